"""End-to-end downloads against the fake Hugging Face / ModelScope server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from hub_fake_server import assert_store_clean, run_in_thread, tiny_gguf

from runtime.hub import download as download_module
from runtime.hub.catalog import Catalog
from runtime.hub.download import RetryPolicy
from runtime.hub.errors import (
    AuthenticationError,
    DiskFullError,
    DownloadCancelledError,
    DownloadInProgressError,
    GatedRepoError,
    HubPinMismatchError,
    NetworkError,
    NotFoundError,
    RateLimitedError,
    VerificationError,
)
from runtime.hub.fetch import Target, resolve_target
from runtime.hub.store import ModelStore

REPO = "prism-ml/Tiny-Bonsai-gguf"
FILE = "Tiny-Bonsai-PQ2_0.gguf"


def closed_port_url() -> str:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def target(filename: str = FILE, repo: str = REPO, **kw) -> Target:
    return Target(filename=filename, hf_repo=repo, ms_repo=repo, **kw)


def test_hf_success_installs_verified_file_and_token_stays_on_hub_origin(hub, make_fetcher, paths, memory_keyring):
    content = tiny_gguf()
    hub.add(REPO, FILE, content)
    memory_keyring.set_password("ternary-chat", "huggingface", "hf_secret_token_123")
    seen = []
    result = make_fetcher("hf").fetch(target(), progress=seen.append)
    assert result.source == "hf" and not result.already_installed
    item = result.installed
    assert item.path.read_bytes() == content
    assert item.sha256 == hashlib.sha256(content).hexdigest()
    assert item.path.parent.name == "prism-ml--Tiny-Bonsai-gguf"
    assert ModelStore(paths).installed()[0].record["expected_sha256_from"] == "hub metadata"
    # hub API + resolve got the token; the CDN on another origin did not
    hub_reqs = hub.seen("hub")
    assert hub_reqs and all(r["headers"].get("authorization") == "Bearer hf_secret_token_123" for r in hub_reqs)
    cdn_reqs = hub.seen("cdn")
    assert cdn_reqs and all("authorization" not in r["headers"] and "cookie" not in r["headers"] for r in cdn_reqs)
    # progress: bytes, total, and a final report with everything, then verification
    downloading = [p for p in seen if p.phase == "downloading"]
    assert downloading[-1].done == len(content) and downloading[-1].total == len(content)
    assert seen[-1].phase == "verifying"
    # no partial left behind
    assert not any(paths.partial_dir.iterdir())
    # second fetch: already installed, no CDN traffic
    n_cdn = len(hub.seen("cdn"))
    again = make_fetcher("hf").fetch(target())
    assert again.already_installed and len(hub.seen("cdn")) == n_cdn


def test_modelscope_success(hub, make_fetcher, memory_keyring):
    content = tiny_gguf(seed=1)
    hub.add(REPO, FILE, content)
    memory_keyring.set_password("ternary-chat", "modelscope", "ms_token_xyz")
    result = make_fetcher("modelscope").fetch(target())
    assert result.source == "modelscope"
    assert result.installed.path.read_bytes() == content
    assert hub.seen("hub", "/api/v1/models/prism-ml/Tiny-Bonsai-gguf/repo/files")
    api = hub.seen("hub", "/api/v1/")
    assert all(r["headers"].get("authorization") == "Bearer ms_token_xyz" for r in api)
    assert all("m_session_id=ms_token_xyz" in r["headers"].get("cookie", "") for r in api)
    assert all("authorization" not in r["headers"] for r in hub.seen("cdn"))


def test_sha256_mismatch_is_quarantined_with_expected_and_got(hub, make_fetcher, paths):
    content = tiny_gguf(seed=2)
    wrong = tiny_gguf(seed=3)  # same size, valid header, different bytes
    hub.add(REPO, FILE, content, served=wrong)
    with pytest.raises(VerificationError) as ei:
        make_fetcher("hf").fetch(target())
    msg = str(ei.value)
    assert hashlib.sha256(content).hexdigest() in msg and hashlib.sha256(wrong).hexdigest() in msg
    assert "expected" in msg and "got" in msg and "quarantine" in msg
    q = ModelStore(paths).quarantined()
    assert len(q) == 1 and q[0]["problems"][0].startswith("sha256:")
    assert_store_clean(paths)


def test_html_error_page_with_status_200_is_rejected(hub, make_fetcher, paths):
    html = b"<!DOCTYPE html><html><body>Rate limit exceeded, please log in</body></html>\n"
    # Non-LFS file: the hub gives no sha256, so only the magic check can catch it.
    hub.add(REPO, FILE, html, lfs=False)
    with pytest.raises(VerificationError) as ei:
        make_fetcher("hf").fetch(target())
    assert "HTML" in str(ei.value) and "magic" in str(ei.value)
    assert_store_clean(paths)
    # LFS file whose CDN serves an HTML page: size, sha256 and magic all reported
    content = tiny_gguf(seed=4)
    hub.add(REPO, "other.gguf", content, served=html)
    with pytest.raises(VerificationError) as ei:
        make_fetcher("hf").fetch(target("other.gguf"))
    msg = str(ei.value)
    assert f"size: expected {len(content)} bytes, got {len(html)}" in msg
    assert "sha256: expected" in msg and "HTML" in msg
    assert len(ModelStore(paths).quarantined()) == 2
    assert_store_clean(paths)


def test_truncated_transfer_resumes_after_restart(hub, make_fetcher, paths):
    content = tiny_gguf(400_000, seed=5)
    hub.add(REPO, FILE, content, drop_after=150_000, drop_times=1)
    with pytest.raises(NetworkError) as ei:
        make_fetcher("hf", retry=RetryPolicy(max_attempts=1)).fetch(target())
    assert "kept for resuming" in str(ei.value)
    parts = list(paths.partial_dir.glob("*.part"))
    assert len(parts) == 1 and parts[0].stat().st_size == 150_000
    assert list(paths.partial_dir.glob("*.part.json")) and not list(paths.partial_dir.glob("*.lock"))
    pending = ModelStore(paths).partial_downloads()
    assert len(pending) == 1 and pending[0]["bytes"] == 150_000 and not pending[0]["in_progress"]
    assert pending[0]["sha256"] == hashlib.sha256(content).hexdigest() and pending[0]["filename"] == FILE
    assert_store_clean(paths)
    # "restart the app": a fresh fetcher picks the partial up
    result = make_fetcher("hf").fetch(target())
    assert result.resumed_from == 150_000
    assert result.installed.path.read_bytes() == content
    ranges = [r["headers"].get("range") for r in hub.seen("cdn")]
    assert "bytes=150000-" in ranges


def test_dropped_connection_mid_stream_is_retried_and_resumed(hub, make_fetcher):
    content = tiny_gguf(500_000, seed=6)
    hub.add(REPO, FILE, content, drop_after=120_000, drop_times=2)
    result = make_fetcher("hf").fetch(target())
    assert result.installed.path.read_bytes() == content
    ranges = [r["headers"].get("range") for r in hub.seen("cdn")]
    assert ranges == [None, "bytes=120000-", "bytes=240000-"]


def test_server_ignoring_range_restarts_cleanly(hub, make_fetcher):
    content = tiny_gguf(300_000, seed=7)
    # first response cut at 150 kB; the retry's Range is ignored (200 from byte 0) and cut at 100 kB;
    # the third request's Range is honoured. The partial must be truncated *and* its running hash
    # restarted at the 200, or the final hash is wrong.
    hub.add(REPO, FILE, content, drop_after=[150_000, 100_000], drop_times=2, ignore_range_times=1)
    result = make_fetcher("hf").fetch(target())
    assert [r["headers"].get("range") for r in hub.seen("cdn")] == [None, "bytes=150000-", "bytes=100000-"]
    assert result.installed.path.read_bytes() == content
    assert result.installed.sha256 == hashlib.sha256(content).hexdigest()


def test_bad_token_401(hub, make_fetcher, paths, memory_keyring):
    hub.add(REPO, FILE, tiny_gguf())
    hub.repos[REPO].valid_tokens = {"good_token"}
    memory_keyring.set_password("ternary-chat", "huggingface", "bad_token_value")
    with pytest.raises(AuthenticationError) as ei:
        make_fetcher("hf").fetch(target())
    assert "401" in str(ei.value) and "ternary token set hf" in str(ei.value)
    assert_store_clean(paths)


def test_gated_repo_403(hub, make_fetcher, paths, memory_keyring):
    hub.add(REPO, FILE, tiny_gguf())
    hub.repos[REPO].gated_token = "accepted_account_token"
    with pytest.raises(GatedRepoError) as ei:
        make_fetcher("hf").fetch(target())
    assert "licence" in str(ei.value)
    assert_store_clean(paths)
    memory_keyring.set_password("ternary-chat", "huggingface", "accepted_account_token")
    assert make_fetcher("hf").fetch(target()).installed.path.is_file()


def test_not_found_404_repo_and_file(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf())
    with pytest.raises(NotFoundError, match="repository not found"):
        make_fetcher("hf").fetch(target(repo="prism-ml/does-not-exist"))
    with pytest.raises(NotFoundError, match="file not found"):
        make_fetcher("hf").fetch(target("missing.gguf"))
    with pytest.raises(NotFoundError, match="not found"):
        make_fetcher("modelscope").fetch(target("missing.gguf"))
    assert_store_clean(paths)


def test_rate_limited_429_api_reports_retry_after(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf())
    hub.rate_limit_api = "37"
    with pytest.raises(RateLimitedError) as ei:
        make_fetcher("hf").fetch(target())
    assert ei.value.retry_after == 37 and "37 s" in str(ei.value)
    assert_store_clean(paths)


def test_429_and_503_on_transfer_are_retried(hub, make_fetcher):
    content = tiny_gguf(seed=8)
    hub.add(REPO, FILE, content, statuses=[429, 503], retry_after="0")
    result = make_fetcher("hf").fetch(target())
    assert result.installed.path.read_bytes() == content
    assert len(hub.seen("cdn")) == 3


def test_persistent_429_on_transfer_gives_rate_limited_error(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf(), statuses=[429] * 10, retry_after="0")
    with pytest.raises(RateLimitedError):
        make_fetcher("hf").fetch(target())
    assert_store_clean(paths)


def test_cancel_during_a_stalled_read_stops_within_one_second(hub, make_fetcher, paths):
    content = tiny_gguf(600_000, seed=9)
    hub.add(REPO, FILE, content, stall_after=64 * 1024)
    cancel = threading.Event()
    seen = []
    t, outcome = run_in_thread(make_fetcher("hf", stall_timeout_s=30).fetch, target(), cancel=cancel,
                               progress=seen.append)
    deadline = time.monotonic() + 10
    while not any(p.stat().st_size >= 32 * 1024 for p in paths.partial_dir.glob("*.part")):
        assert time.monotonic() < deadline, "no bytes arrived"
        time.sleep(0.02)
    time.sleep(1.2)  # the server has stalled: the reader is now blocked in recv()
    # while stalled, progress still arrives (the watcher's ticks): all bytes held so far
    n_before = len(seen)
    time.sleep(0.7)
    assert len(seen) > n_before and seen[-1].done == 64 * 1024
    assert seen[-1].speed_bps <= max(p.speed_bps for p in seen)
    t0 = time.monotonic()
    cancel.set()
    t.join(5)
    elapsed = time.monotonic() - t0
    assert not t.is_alive()
    assert isinstance(outcome.get("error"), DownloadCancelledError), outcome
    assert elapsed < 1.0, f"cancel took {elapsed:.2f} s"
    part = next(paths.partial_dir.glob("*.part"))
    assert part.stat().st_size == 64 * 1024  # kept for resuming
    assert not list(paths.partial_dir.glob("*.lock"))
    assert_store_clean(paths)


def test_cancel_while_data_flows(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf(2_000_000, seed=10), chunk_delay_s=0.01)
    cancel = threading.Event()
    started = threading.Event()
    t, outcome = run_in_thread(make_fetcher("hf").fetch, target(), cancel=cancel,
                               progress=lambda p: p.done > 0 and started.set())
    assert started.wait(10)
    t0 = time.monotonic()
    cancel.set()
    t.join(5)
    assert time.monotonic() - t0 < 1.0
    assert isinstance(outcome.get("error"), DownloadCancelledError)
    assert_store_clean(paths)


def test_two_concurrent_downloads_of_different_files(hub, make_fetcher):
    a, b = tiny_gguf(400_000, seed=11), tiny_gguf(400_000, seed=12)
    hub.add(REPO, "a.gguf", a, chunk_delay_s=0.002)
    hub.add(REPO, "b.gguf", b, chunk_delay_s=0.002)
    ta, oa = run_in_thread(make_fetcher("hf").fetch, target("a.gguf"))
    tb, ob = run_in_thread(make_fetcher("hf").fetch, target("b.gguf"))
    ta.join(30)
    tb.join(30)
    assert "error" not in oa and "error" not in ob, (oa, ob)
    assert oa["result"].installed.path.read_bytes() == a
    assert ob["result"].installed.path.read_bytes() == b
    cdn = hub.seen("cdn")
    assert len(cdn) == 2


def test_same_file_twice_at_once_is_refused(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf(600_000, seed=13), stall_after=32 * 1024)
    cancel = threading.Event()
    started = threading.Event()
    t, outcome = run_in_thread(make_fetcher("hf").fetch, target(), cancel=cancel,
                               progress=lambda p: p.done > 0 and started.set())
    assert started.wait(10)
    with pytest.raises(DownloadInProgressError, match="already being downloaded"):
        make_fetcher("hf").fetch(target())
    cancel.set()
    t.join(5)
    assert isinstance(outcome.get("error"), DownloadCancelledError)
    assert_store_clean(paths)


def test_stale_lock_from_a_dead_process_is_reclaimed(hub, make_fetcher, paths):
    import json
    import socket

    content = tiny_gguf(seed=14)
    hub.add(REPO, FILE, content)
    key = hashlib.sha256(content).hexdigest()[:16]
    (paths.partial_dir / f"{FILE}.{key}.lock").write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname()}))
    assert make_fetcher("hf").fetch(target()).installed.path.read_bytes() == content


def test_hub_and_catalog_pin_disagree(hub, make_fetcher, paths):
    content = tiny_gguf(seed=15)
    hub.add(REPO, FILE, content)
    pinned = "ab" * 32
    with pytest.raises(HubPinMismatchError) as ei:
        make_fetcher("hf").fetch(target(pin_sha256=pinned, pin_source="test pin"))
    assert pinned in str(ei.value) and hashlib.sha256(content).hexdigest() in str(ei.value)
    assert hub.seen("cdn") == []  # refused before any byte moved
    with pytest.raises(HubPinMismatchError, match="bytes"):
        make_fetcher("modelscope").fetch(target(pin_size=len(content) + 1))
    assert_store_clean(paths)


def test_catalog_pin_is_used_when_the_hub_gives_no_sha256(hub, make_fetcher, paths):
    content = tiny_gguf(seed=16)
    hub.add(REPO, FILE, content, lfs=False)  # no sha256 in metadata
    wrong_pin = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(VerificationError, match="sha256: expected " + wrong_pin):
        make_fetcher("hf").fetch(target(pin_sha256=wrong_pin))
    assert_store_clean(paths)
    ok = make_fetcher("hf").fetch(target(pin_sha256=hashlib.sha256(content).hexdigest()))
    assert ok.installed.record["expected_sha256_from"].startswith("catalog pin")


def test_disk_precheck_refuses_to_start(hub, make_fetcher, paths, monkeypatch):
    import collections

    hub.add(REPO, FILE, tiny_gguf(seed=17))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(DiskFullError, match="not enough disk space"):
        make_fetcher("hf").fetch(target())
    assert hub.seen("cdn") == []
    assert list(paths.partial_dir.iterdir()) == []  # nothing created before the check
    assert_store_clean(paths)


def test_disk_full_while_writing(hub, make_fetcher, paths, monkeypatch):
    import builtins
    import errno

    content = tiny_gguf(400_000, seed=18)
    hub.add(REPO, FILE, content)
    real_open = builtins.open

    class FullDisk:
        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, b):
            if self.written + len(b) > 100_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(b)
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        return FullDisk(f) if str(path).endswith(".part") and "a" in mode else f

    monkeypatch.setattr(download_module, "open", fake_open, raising=False)
    with pytest.raises(DiskFullError, match="disk is full"):
        make_fetcher("hf").fetch(target())
    assert_store_clean(paths)
    monkeypatch.undo()
    result = make_fetcher("hf").fetch(target())  # space freed: resumes and completes
    assert result.resumed_from > 0 and result.installed.path.read_bytes() == content


def test_auto_falls_back_to_modelscope_when_hf_is_offline(hub, make_fetcher):
    content = tiny_gguf(seed=19)
    hub.add(REPO, FILE, content)
    notices = []
    result = make_fetcher("auto", hf_endpoint=closed_port_url()).fetch(target(), notice=notices.append)
    assert result.source == "modelscope" and result.installed.path.read_bytes() == content
    assert notices and "Hugging Face failed" in notices[0] and "ModelScope" in notices[0]


def test_auto_falls_back_to_modelscope_when_hf_has_no_such_repo(hub, make_fetcher):
    content = tiny_gguf(seed=20)
    hub.add(REPO, FILE, content)
    hub.hf_enabled = False
    result = make_fetcher("auto").fetch(target())
    assert result.source == "modelscope"
    assert any("not found" in n for n in result.notes)


def test_forced_source_does_not_fall_back_and_offline_is_reported(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf())
    with pytest.raises(NetworkError, match="cannot reach Hugging Face"):
        make_fetcher("hf", hf_endpoint=closed_port_url()).fetch(target())
    with pytest.raises(NetworkError, match="offline") as ei:
        make_fetcher("auto", hf_endpoint=closed_port_url(), ms_endpoint=closed_port_url()).fetch(target())
    assert "Hugging Face: " in str(ei.value) and " / ModelScope: " in str(ei.value)
    assert hub.seen("hub", "/api/v1/") == []
    assert_store_clean(paths)


def test_resolve_target_from_catalog_and_repo_spec(paths):
    catalog = Catalog.load(paths)
    t = resolve_target("bonsai-2-27b", catalog)
    assert t.filename == "Ternary-Bonsai-2-27B-PQ2_0.gguf" and t.pin_sha256 and t.pin_size == 7_206_168_928
    t = resolve_target("bonsai-2-27b", catalog, "ptq1_0")
    assert t.filename.endswith("PTQ1_0.gguf")
    t = resolve_target("prism-ml/Ternary-Bonsai-4B-gguf:Ternary-Bonsai-4B-PQ2_0.gguf", catalog)
    assert t.pin_sha256 == "829abec7eb92f5bf464762be7c9e8a45d777c714543a1474fc90cee20e698beb"
    t = resolve_target("someone/else:model.gguf", catalog)
    assert t.hf_repo == t.ms_repo == "someone/else" and t.pin_sha256 is None
    with pytest.raises(NotFoundError, match="unknown model"):
        resolve_target("nope", catalog)
    with pytest.raises(NotFoundError, match="which file"):
        resolve_target("someone/else", catalog)
    with pytest.raises(NotFoundError, match="choose one of"):
        resolve_target("bonsai-8b", catalog, "Q4_K_M")


def test_fetch_model_uses_saved_settings_and_user_catalog(hub, tmp_path):
    from runtime.hub.catalog import Catalog
    from runtime.hub.fetch import fetch_model
    from runtime.hub.paths import HubPaths
    from runtime.hub.settings import HubSettings

    content = tiny_gguf(seed=50)
    hub.add("me/custom", "c.gguf", content)
    home = tmp_path / "home"
    paths = HubPaths.resolve(home)
    HubSettings(source="modelscope", hf_endpoint=hub.url, modelscope_endpoint=hub.url).save(paths)
    Catalog.load(paths, with_memory=False).add_user_model(
        model_id="custom", file="c.gguf", source="modelscope", repo="me/custom",
        sha256=hashlib.sha256(content).hexdigest())
    result = fetch_model("custom", home=str(home))
    assert result.source == "modelscope" and result.installed.path.read_bytes() == content
    assert result.installed.record["catalog_id"] == "custom"


def test_transfer_cut_on_hugging_face_resumes_from_modelscope(hub, make_fetcher):
    content = tiny_gguf(300_000, seed=51)
    hub.add(REPO, FILE, content, drop_after=120_000, drop_times=1)
    with pytest.raises(NetworkError):
        make_fetcher("hf", retry=RetryPolicy(max_attempts=1)).fetch(target())
    result = make_fetcher("modelscope").fetch(target())
    assert result.source == "modelscope" and result.resumed_from == 120_000
    assert result.installed.path.read_bytes() == content


def test_cancel_and_timeout_while_waiting_for_metadata(hub, make_fetcher, paths):
    hub.add(REPO, FILE, tiny_gguf(seed=52))
    hub.api_delay_s = 30
    cancel = threading.Event()
    t, outcome = run_in_thread(make_fetcher("hf").fetch, target(), cancel=cancel)
    deadline = time.monotonic() + 10
    while not hub.seen("hub", "paths-info"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    t0 = time.monotonic()
    cancel.set()
    t.join(5)
    assert time.monotonic() - t0 < 1.0 and isinstance(outcome.get("error"), DownloadCancelledError)
    fetcher = make_fetcher("hf")
    fetcher.metadata_timeout_s = 0.5
    with pytest.raises(NetworkError, match="no answer within"):
        fetcher.fetch(target())
    assert_store_clean(paths)
