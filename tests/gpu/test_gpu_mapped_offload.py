"""Mapped offload on CUDA: layers and the LM head whose packed matrices live in pinned host memory and
are read in place by the same Triton kernels. Through the engine (graph prefill, fused step, CUDA-graph
decode) the greedy tokens equal the full-GPU load's, VRAM drops by the mapped bytes, and launch
configs are timed on device copies, never over the bus, so a mapped matrix runs what a resident one would."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from runtime import planner
from runtime.engine import Engine
from runtime.formats.model_data import T2, T3
from runtime.generation import GenerationSettings
from runtime.kernels.triton import backend, gemm, launch, matvec, tuning
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


def _mapped_linears(model: torch.nn.Module) -> list[backend.TritonLinear]:
    return [m for m in model.modules() if isinstance(m, backend.TritonLinear)]


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
    assert model.decode_step() is not None  # the fused Triton step accepts mapped linears
    s = GenerationSettings(temperature=0.0, max_new_tokens=GEN, ignore_eos=True)
    runs = []
    for _ in range(2):
        eng.reset()
        stats = list(eng.generate(PROMPT, s))[-1].stats
        runs.append(stats.token_ids)
    out["prompt_tokens"] = stats.prompt_tokens
    assert runs[0] == runs[1]
    out["tokens"] = runs[0]
    assert eng._decoder.use_graph and eng._decoder.graph_replays > 0, eng._decoder.fallback_reason
    if getattr(model.config, "arch", "") == "qwen3":
        assert graph_unsupported_reason(model) is None
        runner = graph_prefill_runner(model, eng._prefill_chunk())  # the engine's own runner
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
    from runtime.model.qwen35.synthetic import qwen35_synthetic_model

    cfg = mf.tiny_hybrid_synthetic_config(intermediate=1536, max_positions=256)  # the 27B's pattern, toy sizes
    assert "linear_attention" in cfg.layer_types and "full_attention" in cfg.layer_types
    data = qwen35_synthetic_model("bonsai-27b", seed=5, encoding=encoding, group_size=64, config=cfg)
    _compare(data, monkeypatch)


def test_mapped_first_with_nothing_tuned_then_resident_chooses_nothing_new(monkeypatch):
    """What a capped run in a fresh process does: no launch table, a prompt of several chunks. The
    mapped run tunes every shape it meets (on device copies) and the resident run after it finds
    nothing left to choose, so the two run the very same configs and give the very same tokens."""
    import runtime.engine as engine_mod

    _, data = build_tiny(seed=9, group_size=128, num_hidden_layers=3, intermediate_size=1536)
    monkeypatch.setattr(engine_mod, "PREFILL_CHUNK", 16)  # PROMPT spans several prefill chunks
    monkeypatch.setattr(tuning, "_tuned", {})
    monkeypatch.setattr(tuning, "_user_tuned_file", lambda: None)
    mapped = _run(data, monkeypatch, mapped=True)
    after_mapped = dict(tuning._tuned)
    assert any(k.startswith("prefill|") for k in after_mapped) and any(k.startswith("gemv|") for k in after_mapped)
    resident = _run(data, monkeypatch, mapped=False)
    assert tuning._tuned == after_mapped  # no shape the resident run met was left for it to choose
    assert mapped["tokens"] == resident["tokens"]
    assert mapped["prompt_tokens"] > 2 * 16


def test_mapped_matrices_are_tuned_on_a_device_copy_and_round_like_resident(monkeypatch):
    t = random_ternary("mapped-probe", (384, 640), seed=11)  # a shape nothing else in the suite uses
    resident = backend.TritonLinear(t, DEV)
    mapped = backend.TritonLinear(t, DEV)
    before = torch.cuda.memory_allocated(DEV)
    moved = map_linears_to_host(mapped)
    assert moved == t.nbytes and mapped.codes.is_pinned() and launch.is_mapped(mapped.codes)
    assert before - torch.cuda.memory_allocated(DEV) >= moved  # the GPU copies are gone

    timed_on: list[str] = []  # device type of every weight a timed launch read
    timing = [False]
    real_bench, real_gemv, real_mm, real_dq = tuning._bench, matvec._gemv_launch, gemm._mm_launch, gemm._dequant_matmul

    def bench(fn):
        timing[0] = True
        try:
            return real_bench(fn)
        finally:
            timing[0] = False

    def spy(real):
        def spied(x2, a, b, *rest, **kw):
            if timing[0]:  # _gemv_launch(x2, nw, w, ...) / _mm_launch, _dequant_matmul(x2, codes, ...)
                w = b if real is real_gemv else a
                timed_on.append(w.device.type)
            return real(x2, a, b, *rest, **kw)
        return spied

    monkeypatch.setattr(tuning, "_bench", bench)
    monkeypatch.setattr(matvec, "_gemv_launch", spy(real_gemv))
    monkeypatch.setattr(gemm, "_mm_launch", spy(real_mm))
    monkeypatch.setattr(gemm, "_dequant_matmul", spy(real_dq))
    monkeypatch.setattr(tuning, "_user_tuned_file", lambda: None)
    for key in [k for k in tuning._tuned if "|384|640|" in k]:
        monkeypatch.delitem(tuning._tuned, key)
    x = torch.randn(1, 640, device=DEV, dtype=torch.bfloat16)
    y = mapped(x)  # decode mat-vec: tuned on a device copy of the mapped matrix, then run in place
    xs = torch.randn(64, 640, device=DEV, dtype=torch.bfloat16)
    ys = mapped(xs)  # prefill: the same, for the choice between the Triton GEMM and dequantize + cuBLAS
    assert timed_on and set(timed_on) == {"cuda"}  # timed, and never over the bus
    keys = [k for k in tuning._tuned if "|384|640|" in k]
    assert any(k.startswith("gemv|") for k in keys) and any(k.startswith("prefill|") for k in keys)
    n_timed = len(timed_on)
    # the resident matrix of the same shape follows the remembered choices: bit for bit, nothing re-timed
    assert torch.equal(y, resident(x))
    assert torch.equal(ys, resident(xs))
    assert len(timed_on) == n_timed
    # and inside a CUDA graph (what decode replays)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = mapped(x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize(DEV)
    assert torch.equal(yg, resident(x))


def test_measured_costs_include_the_mapped_read_bandwidth():
    costs = measure_offload_costs(DEV, h2d_bytes=32 << 20, mapped_bytes=32 << 20, repeats=3)
    assert costs.measured and costs.mapped_bytes_per_s is not None
    assert 0.1e9 < costs.mapped_bytes_per_s < 10 * costs.h2d_bytes_per_s  # over the bus, not from VRAM
    assert costs.mapped_rate == costs.mapped_bytes_per_s
