"""Benchmark plumbing on the CPU: parallel synthetic generation is bit-identical, run_bench reports."""

from __future__ import annotations

import json

import torch

import runtime.synthetic as syn
from runtime.bench import decode_bytes_per_token, format_result, run_bench, synthetic_model_cached
from runtime.model.config import SYNTHETIC_CONFIGS
from runtime.planner import ModelSizes
from tests.planner.conftest import tiny_config, tiny_model_data


def test_parallel_synthetic_generation_is_identical(tmp_path, monkeypatch):
    monkeypatch.setitem(SYNTHETIC_CONFIGS, "tiny-test", tiny_config(layers=3))
    a = syn.synthetic_model("tiny-test", 3)
    b = synthetic_model_cached("tiny-test", 3, tmp_path, workers=3)
    c = synthetic_model_cached("tiny-test", 3, tmp_path, workers=3)  # from the cache
    assert list(a.tensors) == list(b.tensors) == list(c.tensors)
    for n, x in a.tensors.items():
        for other in (b, c):
            y = other.tensors[n]
            if hasattr(x, "codes"):
                assert torch.equal(x.codes, y.codes) and torch.equal(x.scales, y.scales), n
            else:
                assert torch.equal(x.data, y.data), n


def test_decode_bytes_counts_weights_head_and_kv():
    md = tiny_model_data(dense=False)
    s = ModelSizes.from_model_data(md)
    n0 = decode_bytes_per_token(s, 1000, 0)
    assert n0 >= sum(s.layer_bytes) + s.lm_head_bytes
    assert decode_bytes_per_token(s, 1000, 10) == n0 + 10_000


def test_run_bench_on_cpu_reports_everything(capsys):
    md = tiny_model_data(dense=False)
    r = run_bench(md, device="cpu", ctx=256, prompt_tokens=16, gen=6, runs=2)
    json.dumps(r)  # JSON-able
    o = r["ours"]
    assert o["deterministic"] and len(o["tokens"]) == 6
    assert o["decode_tok_s"] > 0 and o["prefill_tok_s"] > 0 and 0 < o["ttft_s"] < o["cold_start_s"] + 60
    assert r["plan"]["context_length"] == 256 and r["roofline_tok_s"] is None
    assert "skipped" in r["bf16"]
    text = format_result(r)
    assert "decode" in text and "no bf16 baseline" in text
