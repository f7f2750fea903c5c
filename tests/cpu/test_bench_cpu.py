"""scripts/bench_cpu.py: engine names, background hogs that end with the run, per-row memory facts."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cpu", ROOT / "scripts" / "bench_cpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_cpu"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_engine_names(bench) -> None:
    assert bench.parse_system("ours") == {"kind": "ours", "isa": None, "activations": None, "file": "ours"}
    assert bench.parse_system("ours:avx2:exact")["isa"] == "avx2"
    assert bench.parse_system("ours:avx2:exact")["activations"] == "exact"
    assert bench.parse_system("llama-avx2:TQ2_0") == {"kind": "llama-avx2", "gguf": "TQ2_0", "file": "llama:TQ2_0"}
    for bad in ("ours:sse4", "ours:avx2:int4", "llama:Q4_0", "llama", "mlc"):
        with pytest.raises(ValueError):
            bench.parse_system(bad)


def test_bad_arguments_are_refused_before_any_work(bench, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--only", "ours:sse4"], ["--shape", "3b"], ["--hog", "-1"], ["--rounds", "0"],
                 ["--only", "llama-avx2:TQ2_0", "--llama-path", "/nonexistent"]):
        with pytest.raises(SystemExit) as exc:
            bench.main(argv)
        assert exc.value.code == 2, argv
    assert "unknown shape '3b'" in capsys.readouterr().err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("priority", [False, True])
def test_hogs_run_in_their_own_sessions_and_stop(bench, priority: bool) -> None:
    with bench.Hogs(2, priority) as hogs:
        pids = [p.pid for p in hogs.procs]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        assert all(os.getsid(pid) == pid for pid in pids)
    assert not any(_alive(pid) for pid in pids)


def test_memory_now_splits_anonymous_and_file_pages(bench) -> None:
    mem = bench.memory_now()
    assert set(mem) == {"rss", "anon", "file", "peak"}
    assert mem["anon"] > 0 and mem["file"] > 0 and mem["peak"] >= mem["rss"]
    assert mem["anon"] + mem["file"] <= mem["rss"] + 1024 * 1024  # RssShmem is the rest
    assert set(bench.cpu_flags()) <= set(bench.RELEVANT_FLAGS)


def _row(engine: str, rnd: int, prefill: float, decode: float) -> dict:
    label = "ours" if engine.startswith("ours") else f"llama.cpp ({engine})"
    return {"shape": "1.7b", "engine": engine, "label": label, "round": rnd, "prefill_tok_s": prefill,
            "decode_tok_s": decode, "peak_rss": 700 * 2**20, "weight_bytes": 2**28, "threads": 2, "hogs": 0,
            "load_avg_before": [1.0], "load_avg_after": [1.0], "runs": [{"tokens": [1, 2, 3]}]}


def test_rounds_give_each_rounds_ratios_and_their_median(bench, capsys: pytest.CaptureFixture[str]) -> None:
    """--rounds alternates the engines; the summary pairs each round's rows and takes the median ratio,
    with the AVX2 goal (1.25) for an AVX2-only llama.cpp and 1.5 for the native build."""
    rows = [_row("ours:avx2", 0, 100.0, 50.0), _row("llama-avx2:TQ2_0", 0, 80.0, 40.0),
            _row("ours:avx2", 1, 90.0, 45.0), _row("llama-avx2:TQ2_0", 1, 90.0, 30.0),
            _row("ours:avx2", 2, 120.0, 60.0), _row("llama-avx2:TQ2_0", 2, 60.0, 40.0)]
    bench.print_tables(rows)
    out = capsys.readouterr().out
    assert "1.7b round 1: ours / llama.cpp (llama-avx2:TQ2_0): decode 1.25 (goal >= 1.25), prefill 1.25 " \
           "(goal >= 1.25)" in out
    assert "round 3" in out and "round 4" not in out
    assert "over 3 rounds: decode median 1.50 (1.25, 1.50, 1.50), prefill median 1.25 (1.25, 1.00, 2.00)" in out
    bench.print_tables([_row("ours", 0, 150.0, 50.0), _row("llama:TQ2_0", 0, 100.0, 40.0)])
    out = capsys.readouterr().out
    assert "1.7b: ours / llama.cpp (llama:TQ2_0): decode 1.25 (goal >= 1.25), prefill 1.50 (goal >= 1.5)" in out
    assert "round" not in out and "median" not in out


def test_llama_worker_decodes_the_models_own_greedy_tokens(bench, tmp_path: Path) -> None:
    """The llama.cpp worker's tokens are llama.cpp's argmax, checked against the same GGUF evaluated with every
    position's logits kept (llama-cpp-python 0.3.x leaves llm.scores empty without logits_all, which once made
    the worker report token 0 at every step)."""
    import argparse

    import llama_cpp
    import numpy as np

    from tests.model_factory import (
        hf_model_to_model_data,
        make_ternary_hf_model,
        tiny_qwen3_config,
        tiny_tokenizer,
        write_gguf,
    )

    hf = make_ternary_hf_model(tiny_qwen3_config(), seed=1, group_size=256)
    path = write_gguf(hf_model_to_model_data(hf, tiny_tokenizer()), tmp_path / "tiny-TQ2_0.gguf", "TQ2_0")
    args = argparse.Namespace(prompt_tokens=12, seed=0, ctx=128, threads=2)
    toks = bench.worker_llama(path, args, decode_tokens=8, runs_n=1)["runs"][0]["tokens"]
    assert len(toks) == 8
    prompt = bench._prompt_ids(12, 0)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=2, logits_all=True, verbose=False)
    llm.eval(prompt + toks[:-1])
    scores = np.array(llm.scores[: llm.n_tokens])
    llm.close()
    assert scores[len(prompt) - 1:].argmax(-1).tolist() == toks
    assert len(set(toks)) > 1 or toks[0] != 0
