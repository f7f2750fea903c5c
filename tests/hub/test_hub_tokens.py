"""Tokens: keyring storage, session-only fallback, and proof they never leak into files, logs or errors."""

from __future__ import annotations

import logging
import pickle
import traceback

import keyring
import keyring.backends.fail
import keyring.backends.null
import pytest
from hub_fake_server import tiny_gguf

from runtime.hub.errors import AuthenticationError
from runtime.hub.fetch import Target
from runtime.hub.logs import configure_hub_logging
from runtime.hub.settings import HubSettings
from runtime.hub.tokens import RedactingFilter, Secret, TokenStore, redact

SECRET = "hf_TOPSECRETtokenValue0123456789"


def test_secret_is_masked_everywhere():
    s = Secret(SECRET)
    for text in (repr(s), str(s), f"{s}", f"{s!r}", format(s), str.format("{}", s), repr([s]), repr({"t": s})):
        assert SECRET not in text
    assert s.reveal() == SECRET
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(ValueError):
        Secret("   ")


def test_redact_scrubs_known_tokens_and_auth_headers():
    Secret(SECRET)
    assert SECRET not in redact(f"request failed with token {SECRET}")
    assert "abc.def" not in redact("headers={'Authorization': 'Bearer abc.def'}")
    assert "zzz123" not in redact("Cookie: m_session_id=zzz123; other=1")
    assert "qqq" not in redact("GET /x?token=qqq&a=1")
    assert redact("nothing secret here") == "nothing secret here"


def test_keyring_set_get_clear(memory_keyring):
    store = TokenStore()
    assert store.secure_backend_available()
    assert store.get("hf") is None
    msg = store.set("hf", SECRET)
    assert "keyring" in msg and SECRET not in msg
    assert memory_keyring.store[("ternary-chat", "huggingface")] == SECRET
    assert store.get("huggingface").reveal() == SECRET
    store.set("modelscope", "ms-token")
    assert memory_keyring.store[("ternary-chat", "modelscope")] == "ms-token"
    assert "removed" in store.clear("hf")
    assert store.get("hf") is None
    assert "not stored" in store.clear("hf")
    with pytest.raises(ValueError):
        store.get("github")


@pytest.mark.parametrize("backend", [keyring.backends.fail.Keyring, keyring.backends.null.Keyring])
def test_no_secure_backend_keeps_token_in_memory_only(backend, tmp_path):
    keyring.set_keyring(backend())
    store = TokenStore()
    assert not store.secure_backend_available()
    msg = store.set("hf", SECRET)
    assert "no secure keyring" in msg and "this session only" in msg
    assert store.get("hf").reveal() == SECRET  # usable for the rest of the session
    store.clear("hf")
    assert store.get("hf") is None


def test_environment_token_is_a_last_resort(monkeypatch, memory_keyring):
    monkeypatch.setenv("HF_TOKEN", "env-token")
    assert TokenStore().get("hf").reveal() == "env-token"
    memory_keyring.set_password("ternary-chat", "huggingface", "keyring-token")
    assert TokenStore().get("hf").reveal() == "keyring-token"


def test_token_never_reaches_config_logs_or_errors_after_a_401(hub, make_fetcher, paths, memory_keyring, caplog):
    repo = "prism-ml/Private-Bonsai"
    hub.add(repo, "m.gguf", tiny_gguf())
    hub.repos[repo].valid_tokens = {"the-right-token"}
    TokenStore().set("hf", SECRET)
    HubSettings(hf_endpoint=hub.url, modelscope_endpoint=hub.url).save(paths)
    handler = configure_hub_logging(paths, level=logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(AuthenticationError) as ei:
            make_fetcher("auto").fetch(Target(filename="m.gguf", hf_repo=repo, ms_repo=repo))
        # the request really carried the token (so a leak would have had something to leak)
        assert any(r["headers"].get("authorization") == f"Bearer {SECRET}" for r in hub.seen("hub"))
        logging.getLogger("runtime.hub.test").error("debug dump: Authorization: Bearer %s", SECRET)
        logging.getLogger("runtime.hub.test").exception("with traceback", exc_info=ei.value)
    finally:
        handler.flush()
        logging.getLogger("runtime.hub").removeHandler(handler)
        handler.close()
    full_error = "".join(traceback.format_exception(ei.value))
    assert SECRET not in str(ei.value) and SECRET not in repr(ei.value) and SECRET not in full_error
    # caplog sees raw records: only the line we deliberately logged with the token may contain it
    leaked = [r for r in caplog.records if SECRET in r.getMessage() and "debug dump" not in r.getMessage()]
    assert leaked == []
    # every file the app wrote (config, logs, partials, sidecars, quarantine) is clean
    files = [p for p in paths.data_dir.parent.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files) and any(p.name == "hub_settings.json" for p in files)
    for p in files:
        assert SECRET.encode() not in p.read_bytes(), f"token leaked into {p}"


def test_redacting_filter_cleans_records_and_tracebacks():
    Secret(SECRET)
    rec = logging.LogRecord("runtime.hub", logging.ERROR, __file__, 1, "token %s", (SECRET,), None)
    assert RedactingFilter().filter(rec) and SECRET not in rec.getMessage()
    try:
        raise RuntimeError(f"boom {SECRET}")
    except RuntimeError:
        import sys

        rec = logging.LogRecord("runtime.hub", logging.ERROR, __file__, 1, "x", (), sys.exc_info())
    RedactingFilter().filter(rec)
    assert rec.exc_info is None and SECRET not in rec.exc_text
