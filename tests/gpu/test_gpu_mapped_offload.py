"""Mapped offload on CUDA: layers and the LM head whose packed matrices live in pinned host memory and
are read in place by the same Triton kernels. Through the engine (graph prefill, fused step, CUDA-graph
decode) the greedy tokens equal the full-GPU load's, VRAM drops by the mapped bytes, and no launch
config is ever timed over the bus."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from runtime import planner
from runtime.engine import Engine
from runtime.formats.model_data import T2, T3
from runtime.generation import GenerationSettings
from runtime.gpu_decode_qwen35 import fused_decode_step
from runtime.kernels import triton_linear as tlin
from runtime.offload import host_mapped_tensors, map_linears_to_host, measure_offload_costs
from runtime.prefill import graph_prefill_runner, graph_unsupported_reason
from runtime.synthetic import random_ternary
from tests import model_factory as mf
from tests.engine.conftest import build_tiny

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
PROMPT = "The quick brown fox jumps over the lazy dog. 你好 " * 2
GEN = 24


@pytest.fixture(autouse=True)
def _graph_prefill_on(monkeypatch):
    monkeypatch.setenv("TERNARY_GRAPH_PREFILL", "1")


def _all_mapped(real):
    """The planner's own plan for this GPU, with every layer and the LM head mapped."""
    def plan(model, **kw):
        p = real(model, **kw)
        n = p.layers_on_gpu + p.layers_on_cpu
        return dataclasses.replace(p, gpu_layers=[], cpu_layers=list(range(n)), offload_mode="mapped",
                                   lm_head_device="cpu", lm_head_mapped=True)
    return plan


def _mapped_linears(model: torch.nn.Module) -> list[tlin.TritonLinear]:
    return [m for m in model.modules() if isinstance(m, tlin.TritonLinear)]


def _settle() -> int:
    gc.collect()
    torch.cuda.synchronize(DEV)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(DEV)
    return torch.cuda.memory_allocated(DEV)


def _run(data, monkeypatch, mapped: bool, ctx: int = 256) -> dict:
    """Load through ``Engine.load``, greedy-generate twice (capture, then replay), close; the numbers:
    VRAM held after loading, the peak while loading, the peak while generating."""
    base = _settle()
    with monkeypatch.context() as mp:
        if mapped:
            mp.setattr(planner, "plan_for_this_machine", _all_mapped(planner.plan_for_this_machine))
        eng = Engine.load(data, device="cuda", context_length=ctx)
    torch.cuda.synchronize(DEV)
    out: dict = {"loaded": torch.cuda.memory_allocated(DEV) - base,
                 "load_peak": torch.cuda.max_memory_allocated(DEV) - base}
    torch.cuda.reset_peak_memory_stats(DEV)  # from here: the peak of using the loaded model
    model = eng.model
    lins = _mapped_linears(model)
    assert lins
    out["mapped_bytes"] = sum(m.codes.numel() + m.scales.numel() * 2 for m in lins)
    if mapped:
        assert eng.info.plan["offload_mode"] == "mapped" and eng.info.plan["lm_head_mapped"]
        assert type(model.layers[0]).__name__ in ("Qwen3Block", "Qwen35Layer")  # not wrapped
        assert all(m.codes.device.type == "cpu" and m.codes.is_pinned() and m.scales.is_pinned() for m in lins)
        assert model.lm_head in lins  # the head too, computed on the GPU
        ids = host_mapped_tensors(model)
        host = [n for n, t in model.named_buffers() if t.device.type != "cuda" and id(t) not in ids]
        assert host == []  # norms, caches, dense projections, the rest: all still on the GPU
    else:
        assert all(m.codes.device.type == "cuda" for m in lins)
    assert fused_decode_step(model) is not None  # the fused Triton step accepts mapped linears
    s = GenerationSettings(temperature=0.0, max_new_tokens=GEN, ignore_eos=True)
    runs = []
    for _ in range(2):
        eng.reset()
        runs.append(list(eng.generate(PROMPT, s))[-1].stats.token_ids)
    assert runs[0] == runs[1]
    out["tokens"] = runs[0]
    assert eng._decoder.use_graph and eng._decoder.graph_replays > 0, eng._decoder.fallback_reason
    if getattr(model.config, "arch", "") == "qwen3":
        assert graph_unsupported_reason(model) is None
        runner = graph_prefill_runner(model)
        assert runner.use_graph and runner.captures >= 1 and runner.fallback_reason is None
    torch.cuda.synchronize(DEV)
    out["peak"] = torch.cuda.max_memory_allocated(DEV) - base
    eng.close()
    del eng, model, lins
    _settle()
    return out


def _compare(data, monkeypatch) -> None:
    _run(data, monkeypatch, mapped=False)  # warm-up: tunes every launch config (resident), counters, JIT
    resident = _run(data, monkeypatch, mapped=False)
    mapped = _run(data, monkeypatch, mapped=True)
    # same kernels, same (tuned) configs: the very same tokens
    assert mapped["tokens"] == resident["tokens"]
    nbytes = mapped["mapped_bytes"]
    assert nbytes == resident["mapped_bytes"] > 1 << 20
    slack = 0.1 * nbytes  # allocator rounding (512 B per tensor) and a few small transient buffers
    assert abs((resident["loaded"] - mapped["loaded"]) - nbytes) < slack, (resident, mapped)
    assert abs((resident["peak"] - mapped["peak"]) - nbytes) < slack, (resident, mapped)
    # loading prepares one mapped layer at a time on the GPU, never the whole model
    assert mapped["load_peak"] < resident["load_peak"] - nbytes / 2, (resident, mapped)


def test_mapped_qwen3_engine_gives_the_full_gpu_tokens_with_less_vram(monkeypatch):
    _, data = build_tiny(seed=7, group_size=128, num_hidden_layers=4, intermediate_size=2048)
    _compare(data, monkeypatch)


@pytest.mark.parametrize("encoding", [T2, T3])
def test_mapped_hybrid_engine_gives_the_full_gpu_tokens_with_less_vram(monkeypatch, encoding):
    from runtime.model.qwen35_synthetic import qwen35_synthetic_model

    cfg = mf.tiny_hybrid_synthetic_config(intermediate=1536, max_positions=256)  # the 27B's pattern, toy sizes
    assert "linear_attention" in cfg.layer_types and "full_attention" in cfg.layer_types
    data = qwen35_synthetic_model("bonsai-27b", seed=5, encoding=encoding, group_size=64, config=cfg)
    _compare(data, monkeypatch)


def test_mapped_matvec_is_not_tuned_over_the_bus_and_rounds_like_resident(monkeypatch):
    t = random_ternary("mapped-probe", (384, 640), seed=11)  # a shape nothing else in the suite uses
    resident = tlin.TritonLinear(t, DEV)
    mapped = tlin.TritonLinear(t, DEV)
    before = torch.cuda.memory_allocated(DEV)
    moved = map_linears_to_host(mapped)
    assert moved == t.nbytes and mapped.codes.is_pinned() and tlin.is_mapped(mapped.codes)
    assert before - torch.cuda.memory_allocated(DEV) >= moved  # the GPU copies are gone

    def no_timing(*_a, **_k):
        raise AssertionError("a mapped weight was benchmarked")

    monkeypatch.setattr(tlin, "_bench", no_timing)
    monkeypatch.setattr(tlin, "_remember", no_timing)
    tuned = dict(tlin._tuned)
    x = torch.randn(1, 640, device=DEV, dtype=torch.bfloat16)
    y = mapped(x)  # decode mat-vec: the first candidate config, not measured, not remembered
    xs = torch.randn(64, 640, device=DEV, dtype=torch.bfloat16)
    ys = mapped(xs)  # prefill: dequantize (each weight byte crosses the bus once) + cuBLAS
    assert tlin._tuned == tuned
    cfg = tlin._gemv_config(x, None, mapped.codes, mapped.scales, None, None, None, 384, 640, t.group_size,
                            t.encoding, 1e-6, 0.0, False)
    want = tlin.ternary_matvec(x, resident.codes, resident.scales, t.group_size, t.encoding, config=cfg)
    assert torch.equal(y, want)  # the same config on device memory: bit for bit
    assert torch.equal(ys, tlin.ternary_matmul(xs, resident.codes, resident.scales, t.group_size, t.encoding,
                                               prefill_path="dequant"))
    # and inside a CUDA graph (what decode replays)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = mapped(x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize(DEV)
    assert torch.equal(yg, tlin.ternary_matvec(x, resident.codes, resident.scales, t.group_size, t.encoding,
                                               config=cfg))


def test_measured_costs_include_the_mapped_read_bandwidth():
    costs = measure_offload_costs(DEV, h2d_bytes=32 << 20, mapped_bytes=32 << 20, repeats=3)
    assert costs.measured and costs.mapped_bytes_per_s is not None
    assert 0.1e9 < costs.mapped_bytes_per_s < 10 * costs.h2d_bytes_per_s  # over the bus, not from VRAM
    assert costs.mapped_rate == costs.mapped_bytes_per_s
