"""The ``ternary models / download / verify / token`` commands, in-process and (Ctrl-C) as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hub_fake_server import tiny_gguf

from runtime.cli import main
from tests.ctrl_c import popen_interruptible

REPO = "prism-ml/Tiny-Bonsai-gguf"
ROOT = Path(__file__).resolve().parents[2]


def test_models_json_lists_catalog_installed_and_recommendation(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["models", "--json", "--home", str(home)]) == 0
    out = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in out["models"]}
    assert ids == {"bonsai-1.7b", "bonsai-4b", "bonsai-8b", "bonsai-27b", "bonsai-2-27b", "qwen3-embedding-0.6b"}
    assert {r["id"] for r in out["models"] if r["role"] == "embedding"} == {"qwen3-embedding-0.6b"}
    assert out["recommendation"]["model"] != "qwen3-embedding-0.6b"
    row = next(r for r in out["models"] if r["file"] == "Ternary-Bonsai-2-27B-PQ2_0.gguf")
    assert row["size"] == 7_206_168_928 and row["min_vram_bytes"] > row["min_ram_bytes"] > 0
    assert row["fit"] in ("gpu", "cpu", "none") and row["installed"] is None
    assert out["recommendation"]["reason"] and out["machine"]["ram_available_bytes"] > 0


def test_models_text_and_user_entries(tmp_path, capsys):
    home = str(tmp_path / "home")
    assert main(["models", "add", "mine", "--hf", "me/repo", "--file", "a.gguf", "--home", home]) == 0
    assert main(["models", "--no-detect", "--home", home]) == 0
    text = capsys.readouterr().out
    assert "bonsai-2-27b" in text and "PTQ1_0" in text and "mine" in text
    emb = next(line for line in text.splitlines() if line.startswith("qwen3-embedding-0.6b"))
    assert "[embedding model, for document search: not a chat model]" in emb
    assert main(["models", "remove", "mine", "--home", home]) == 0
    assert main(["models", "remove", "mine", "--home", home]) == 1


def test_download_then_verify(hub, tmp_path, capsys):
    content = tiny_gguf(seed=30)
    hub.add(REPO, "m.gguf", content)
    home = str(tmp_path / "home")
    rc = main(["download", f"{REPO}:m.gguf", "--source", "hf", "--endpoint", hub.url, "--home", home,
               "--no-convert"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    installed = Path(out.out.split("installed: ")[1].split("\n")[0])
    assert installed.read_bytes() == content
    assert hashlib.sha256(content).hexdigest() in out.out
    # verify uses the store's record
    assert main(["verify", str(installed), "--home", home]) == 0
    assert "result:  OK" in capsys.readouterr().out
    assert main(["verify", str(installed), "--sha256", "0" * 64]) == 1
    assert "PROBLEM: sha256: expected " + "0" * 64 in capsys.readouterr().out
    installed.write_bytes(b"<html>oops</html>")
    assert main(["verify", str(installed), "--home", home]) == 1
    text = capsys.readouterr().out
    assert "PROBLEM: size" in text and "PROBLEM: magic" in text
    # models shows it as installed but modified (not loadable)
    assert main(["models", "--json", "--no-detect", "--home", home]) == 0
    other = json.loads(capsys.readouterr().out)["other_installed"]
    assert other[0]["state"] == "modified"


def test_download_errors_are_one_line(hub, tmp_path, capsys):
    home = str(tmp_path / "home")
    assert main(["download", "prism-ml/none:x.gguf", "--source", "hf", "--endpoint", hub.url, "--home", home]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "not found" in err and "Traceback" not in err


def test_token_set_status_clear_reads_getpass_not_argv(monkeypatch, memory_keyring, capsys):
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "hf_cli_secret_987")
    assert main(["token", "set", "hf"]) == 0
    assert memory_keyring.store[("ternary-chat", "huggingface")] == "hf_cli_secret_987"
    assert main(["token", "status"]) == 0
    out = capsys.readouterr().out
    assert "huggingface: set" in out and "hf_cli_secret_987" not in out
    assert main(["token", "clear", "hf"]) == 0
    assert ("ternary-chat", "huggingface") not in memory_keyring.store


def test_ctrl_c_cancels_cleanly_and_the_next_run_resumes(hub, tmp_path):
    content = tiny_gguf(500_000, seed=31)
    f = hub.add(REPO, "big.gguf", content, stall_after=100_000)
    home = tmp_path / "home"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
               NO_PROXY="127.0.0.1,localhost")
    cmd = [sys.executable, "-m", "runtime", "download", f"{REPO}:big.gguf", "--source", "hf", "--endpoint", hub.url,
           "--home", str(home), "--no-convert"]
    proc = popen_interruptible(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial_dir = home / "data" / "partial"
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size >= 90_000 for p in partial_dir.glob("*.part")) if partial_dir.exists() else True:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    # generous: includes interpreter shutdown on a possibly loaded CI machine; the < 1 s cancel
    # itself is asserted in-process by test_hub_download's cancel tests
    assert time.monotonic() - t0 < 15.0
    assert proc.returncode == 130, err
    assert "cancelled" in err and "resume" in err
    kept = next(partial_dir.glob("*.part")).stat().st_size
    assert 90_000 <= kept <= 100_000  # everything received before Ctrl-C (the server stalls at 100 kB)
    f.stall_after = None
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"resumed from byte {kept}" in done.stdout
    installed = Path(done.stdout.split("installed: ")[1].split("\n")[0])
    assert installed.read_bytes() == content
