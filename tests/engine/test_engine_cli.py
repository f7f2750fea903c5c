"""``ternary generate`` and ``ternary chat`` on a tiny model folder."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.cli.chat import chat_loop
from runtime.engine import Engine
from runtime.generation import GenerationSettings
from tests import model_factory as mf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    cfg = mf.tiny_qwen3_config()
    model = mf.make_ternary_hf_model(cfg, seed=3)
    return mf.write_hf_folder(model, mf.tiny_tokenizer(), tmp_path_factory.mktemp("cli") / "tiny")


def test_generate_json_fields(folder, capsys):
    rc = main(["generate", str(folder), "--prompt", "Hello 你好", "--chat", "--system", "Be brief.",
               "--max-new-tokens", "6", "--temperature", "0", "--ignore-eos", "--device", "cpu", "--ctx", "128",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("text", "token_ids", "prompt_tokens", "ttft_s", "prefill_tok_s", "decode_tok_s",
                "peak_memory_bytes", "device"):
        assert key in out
    assert len(out["token_ids"]) == 6 and out["finish_reason"] == "length"
    assert out["prompt_tokens"] > 10 and out["device"] == "cpu" and out["context_length"] == 128
    assert out["ttft_s"] > 0 and out["prefill_tok_s"] > 0 and out["decode_tok_s"] > 0
    assert out["peak_memory_bytes"] > 2**20
    assert out["settings"]["temperature"] == 0.0 and out["settings"]["top_k"] == 20  # file default
    # greedy is deterministic and equals the engine API's answer
    eng = Engine.load(folder, device="cpu", context_length=128)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello 你好"}]
    done = list(eng.generate(msgs, GenerationSettings(temperature=0.0, max_new_tokens=6, ignore_eos=True)))[-1]
    assert done.stats.token_ids == out["token_ids"] and done.text == out["text"]


def test_generate_streams_text_and_honours_sampling_flags(folder, capsys):
    args = ["generate", str(folder), "--prompt", "Once upon", "--max-new-tokens", "8", "--seed", "5",
            "--temperature", "1.0", "--top-k", "0", "--top-p", "0.9", "--min-p", "0.01", "--repetition-penalty", "1.1",
            "--presence-penalty", "0.5", "--frequency-penalty", "0.1", "--ignore-eos", "--device", "cpu",
            "--ctx", "64", "--json"]
    assert main(args) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    b = json.loads(capsys.readouterr().out)
    assert a["token_ids"] == b["token_ids"]
    assert a["settings"]["top_p"] == 0.9 and a["settings"]["presence_penalty"] == 0.5
    assert main(args[:-1]) == 0  # without --json: text on stdout, stats on stderr
    cap = capsys.readouterr()
    assert cap.out.rstrip("\n") == a["text"].rstrip("\n") or a["text"] in cap.out
    assert "decode" in cap.err and "tok/s" in cap.err


def test_generate_bad_model_path_is_one_line_error(tmp_path):
    bad = tmp_path / "missing.gguf"
    proc = subprocess.run([sys.executable, "-m", "runtime", "generate", str(bad), "--prompt", "hi"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "missing.gguf" in lines[0]
    assert "Traceback" not in proc.stderr


def test_generate_not_a_model_file(tmp_path, capsys):
    page = tmp_path / "model.gguf"
    page.write_text("<!DOCTYPE html><html><body>404</body></html>")
    assert main(["generate", str(page), "--prompt", "hi"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_generate_prompt_too_long_for_ctx(folder, capsys):
    assert main(["generate", str(folder), "--prompt", "hello " * 200, "--ctx", "32", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "context" in err[0]


def test_bad_max_vram_value(folder, capsys):
    assert main(["generate", str(folder), "--prompt", "hi", "--max-vram", "lots"]) == 1
    assert "6GiB" in capsys.readouterr().err


def test_chat_loop_history_reset_and_exit(folder):
    eng = Engine.load(folder, device="cpu", context_length=256)
    lines = iter(["Hello", "", "/help", "And more?", "/reset", "Hi again", "/exit", "never read"])
    prompts = []

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(lines)

    out = io.StringIO()
    settings = GenerationSettings(temperature=0.0, max_new_tokens=4, ignore_eos=True)
    generated = []
    original = eng.generate

    def spy(request, s=None, cancel=None):
        generated.append([dict(m) for m in request])
        return original(request, s, cancel=cancel)

    eng.generate = spy  # type: ignore[method-assign]
    assert chat_loop(eng, settings, read, out, system="Be brief.") == 0
    assert len(generated) == 3
    assert [m["role"] for m in generated[0]] == ["system", "user"]
    assert [m["role"] for m in generated[1]] == ["system", "user", "assistant", "user"]  # history kept
    assert [m["role"] for m in generated[2]] == ["system", "user"]  # after /reset
    assert "unknown command /help" in out.getvalue()
    assert len(prompts) == 7


def test_chat_subprocess_end_of_input(folder):
    proc = subprocess.run([sys.executable, "-m", "runtime", "chat", str(folder), "--device", "cpu", "--ctx", "128",
                           "--max-new-tokens", "3", "--temperature", "0", "--stats"],
                          input="Hello\n/reset\n", capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "(new conversation)" in proc.stdout and "tok/s" in proc.stdout
