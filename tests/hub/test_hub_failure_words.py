"""explain_failure: every way a download ends badly, said in the user's words (issue 26, item 9).

Real failures from the fake hub (refused connection, dropped transfer, 403, 503, 429, both hubs down)
and raw transport exceptions that could escape (httpx ConnectError, requests, socket). No sentence may
name an exception class.
"""

from __future__ import annotations

import re
import socket

import pytest
import requests
from hub_fake_server import FakeHub, tiny_gguf
from huggingface_hub.utils import httpx  # the HTTP stack huggingface_hub uses (httpx or httpx2)

from runtime.hub import errors as e
from runtime.hub.errors import HubError, explain_failure
from runtime.hub.fetch import Target

REPO = "prism-ml/Tiny-Bonsai-gguf"
FILE = "Tiny-Bonsai-PQ2_0.gguf"
CLASS_NAME = re.compile(r"[A-Z][a-z]+(Error|Exception)|Connect[A-Z]|Timeout\b")


def _dead() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _fail(fetcher) -> HubError:
    with pytest.raises(HubError) as info:
        fetcher.fetch(Target(filename=FILE, hf_repo=REPO, ms_repo=REPO))
    return info.value


def _words(exc: BaseException) -> str:
    text = explain_failure(exc).text()
    assert not CLASS_NAME.search(text), text
    return text


def test_unreachable_hub_says_which_host(make_fetcher):
    exc = _fail(make_fetcher("hf", hf_endpoint=_dead()))
    f = explain_failure(exc)
    assert (f.kind, f.host, f.kept_bytes) == (e.UNREACHABLE, "127.0.0.1", 0)
    assert _words(exc) == "could not reach 127.0.0.1 (no network or blocked)."


def test_both_hubs_down_names_each(make_fetcher):
    exc = _fail(make_fetcher("auto", hf_endpoint=_dead(), ms_endpoint=_dead()))
    assert _words(exc) == ("Hugging Face: could not reach 127.0.0.1 (no network or blocked). "
                           "ModelScope: could not reach 127.0.0.1 (no network or blocked).")


def test_dropped_transfer_says_how_much_is_kept(hub: FakeHub, make_fetcher):
    hub.add(REPO, FILE, tiny_gguf(600_000), drop_after=[300_000, 0, 0, 0, 0], drop_times=5)
    exc = _fail(make_fetcher("hf"))
    f = explain_failure(exc)
    assert (f.kind, f.kept_bytes, f.resumable) == (e.DROPPED, 300_000, True)
    assert _words(exc) == "the connection to 127.0.0.1 dropped after 292.97 KiB; Retry resumes."


def test_http_refusals_and_server_trouble(hub: FakeHub, make_fetcher):
    hub.add(REPO, FILE, tiny_gguf(), statuses=[403])
    f = explain_failure(_fail(make_fetcher("hf")))
    assert (f.kind, f.status, f.status_text) == (e.REFUSED, 403, "403 Forbidden")
    assert f.text() == ("the server refused: 403 Forbidden (the model may need its licence accepted on the "
                        "website, or the token lacks read permission).")
    hub.files[(REPO, FILE)].statuses = [503] * 10
    exc = _fail(make_fetcher("hf"))
    assert _words(exc) == "127.0.0.1 had a problem (503 Service Unavailable); try again later or use a mirror."
    hub.files[(REPO, FILE)].statuses = [429]
    hub.files[(REPO, FILE)].retry_after = "3600"
    exc = _fail(make_fetcher("hf"))
    assert _words(exc) == "127.0.0.1 is limiting downloads (429 Too Many Requests); try again in 3600 s."


def test_raw_transport_exceptions_are_classified_not_named():
    refused = httpx.ConnectError("[Errno 111] Connection refused",
                                 request=httpx.Request("GET", "https://huggingface.co/api/models/x"))
    assert _words(refused) == "could not reach huggingface.co (no network or blocked)."
    assert explain_failure(httpx.ConnectError("boom")).kind == e.UNREACHABLE  # no request attached
    assert explain_failure(requests.exceptions.ConnectionError("Max retries exceeded (Failed to establish a new "
                                                               "connection)")).kind == e.UNREACHABLE
    assert explain_failure(socket.gaierror(-2, "Name or service not known")).kind == e.UNREACHABLE
    assert explain_failure(ConnectionRefusedError(111, "Connection refused")).kind == e.UNREACHABLE
    assert explain_failure(requests.exceptions.ReadTimeout("read timed out")).kind == e.STALLED
    assert explain_failure(requests.exceptions.ChunkedEncodingError("connection broken")).kind == e.DROPPED
    response = requests.Response()
    response.status_code = 404
    response.url = "https://hf-mirror.com/x/resolve/main/y.gguf"
    not_found = requests.exceptions.HTTPError("404 Client Error", response=response)
    assert _words(not_found) == "the download server does not have this file (404 Not Found); try a mirror."


def test_errors_that_already_speak_plainly_keep_their_words():
    disk = e.DiskFullError("not enough disk space for x.gguf: need 2.0 GiB in /data, only 1.0 GiB free")
    assert explain_failure(disk).kind == e.DISK_FULL and explain_failure(disk).text() == disk.args[0] + "."
    bad = e.VerificationError("x.gguf failed verification: sha256 differs. The file was moved to quarantine.")
    assert explain_failure(bad).kind == e.VERIFICATION and "quarantine" in explain_failure(bad).text()
