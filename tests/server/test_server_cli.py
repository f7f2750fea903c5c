"""``ternary serve``: refuses unsafe set-ups before loading anything, serves a model folder, stops on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from runtime.cli import main
from tests import model_factory as mf
from tests.ctrl_c import popen_interruptible
from tests.server.conftest import raw

ROOT = Path(__file__).resolve().parents[2]


def test_public_host_without_key_is_refused(capsys):
    assert main(["serve", "no-such-model.gguf", "--host", "0.0.0.0"]) == 1
    assert "without an API key" in capsys.readouterr().err


def test_missing_key_variable_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("TERNARY_TEST_NO_KEY", raising=False)
    assert main(["serve", "no-such-model.gguf", "--api-key-env", "TERNARY_TEST_NO_KEY"]) == 1
    assert "TERNARY_TEST_NO_KEY is not set" in capsys.readouterr().err


def test_serve_a_folder_then_stop_with_ctrl_c(tmp_path):
    cfg = mf.tiny_qwen3_config()
    folder = mf.write_hf_folder(mf.make_ternary_hf_model(cfg, seed=3), mf.tiny_tokenizer(), tmp_path / "tiny")
    env = {**os.environ, "TERNARY_SERVE_KEY": "k1", "PYTHONPATH": str(ROOT)}
    proc = popen_interruptible([sys.executable, "-m", "runtime", "serve", str(folder), "--port", "0", "--device", "cpu",
                             "--ctx", "256", "--api-key-env", "TERNARY_SERVE_KEY", "--model-id", "tiny"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        url = re.search(r"listening on (http://\S+)", line).group(1)
        deadline = time.monotonic() + 60
        while raw(url, "GET", "/health")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        status, _, out = raw(url, "POST", "/v1/chat/completions", body.encode(), {"Authorization": "Bearer k1"})
        assert status == 200 and json.loads(out)["usage"]["completion_tokens"] >= 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

