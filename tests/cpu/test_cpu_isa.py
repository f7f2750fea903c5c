"""Every CPU kernel variant this machine can run (AVX-512 with and without VNNI, AVX2, portable C):
the exact path against a dense fp32 reference, the int8 path against a float64 evaluation of the
contract formula (runtime/kernels/cpu/ternary_common.h), quantisation bit for bit against a torch
implementation of the rule, ISA / activation selection, and int8's accuracy cost on a tiny model."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import tests.model_factory as mf
from runtime.engine import Engine
from runtime.formats.codecs import pack_t2
from runtime.formats.model_data import T2, TernaryTensor
from runtime.kernels.cpu import ternary as ct
from runtime.kernels.cpu.ternary import CpuTernaryLinear

X86_VARIANTS = [v for v in ct.available_variants() if ct._BY_NAME[v].source == "ternary_x86.c"]

# (rows N (not a multiple of 4), width K, group G, tokens M): K 64/128 exercise the scalar tail only,
# 256 one vector chunk, 4224 = 16.5 chunks of 256 (vector + tail); M 1 = decode, 3/17/70 prefill tiles
SHAPES = [(37, 64, 64, 70), (29, 128, 128, 17), (13, 256, 64, 3), (30, 256, 128, 1),
          (29, 4224, 128, 1), (27, 4224, 64, 17), (9, 4096, 128, 70), (5, 4224, 64, 3)]


def _tensor(n: int, k: int, g: int, seed: int) -> tuple[TernaryTensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 4, (n, k), generator=gen, dtype=torch.uint8)  # 3 = +2 (Q2_0) included
    scales = (torch.rand(n, k // g, generator=gen) * 0.05).half()
    scales[0, -1] = 0.0
    return TernaryTensor((n, k), g, pack_t2(codes), scales, T2), codes


def _layer(t: TernaryTensor, variant: str, activations: str) -> CpuTernaryLinear:
    w = CpuTernaryLinear(t, activations=activations)
    w._use_library(ct.load_variant(variant))
    assert w.backend == f"cpu_ternary[{variant},{activations}]"
    return w


def quantize_q8_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The contract's rule in torch: per 32 values d = amax/127 (fp32), q = roundf(x / d) (half away)."""
    m, k = x.shape
    xb = x.reshape(m, k // 32, 32)
    d = xb.abs().amax(-1) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    v = xb * inv[..., None]
    t = torch.trunc(v)
    r = t + torch.where((v - t).abs() >= 0.5, torch.sign(v), torch.zeros_like(v))
    q = r.to(torch.int8)
    return q.reshape(m, k), d, q.to(torch.int32).sum(-1)


def q8_reference(q: torch.Tensor, d: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor,
                 g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 y[m,n] = sum_g s[n,g] sum_{b in g} d[m,b] * sum_{i in b} q[m,i] (code[n,i] - 1), and the
    sum of the terms' magnitudes (the scale of fp32 summation error)."""
    m, k = q.shape
    dots = torch.einsum("mbi,nbi->mnb", q.double().reshape(m, k // 32, 32),
                        (codes.double() - 1).reshape(-1, k // 32, 32))
    terms = dots * d.double()[:, None, :] * scales.double().repeat_interleave(g // 32, dim=1)[None]
    return terms.sum(-1), terms.abs().sum(-1)


@pytest.mark.parametrize("variant", X86_VARIANTS)
def test_exact_path_matches_dense_fp32(variant: str) -> None:
    for i, (n, k, g, m) in enumerate(SHAPES):
        t, _ = _tensor(n, k, g, seed=i)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(100 + i))
        y = _layer(t, variant, "exact")(x)
        w = t.dequantize(torch.float64)
        err = (y.double() - x.double() @ w.t()).abs()
        bound = (x.double().abs() @ w.abs().t()) * 8 * torch.finfo(torch.float32).eps + 1e-30
        assert bool((err <= bound).all()), f"{variant} {n}x{k} g{g} M{m}: worst ratio {(err / bound).max():.3g}"


@pytest.mark.parametrize("variant", X86_VARIANTS)
def test_int8_path_matches_float64_formula(variant: str) -> None:
    lib = ct.load_variant(variant)
    for i, (n, k, g, m) in enumerate(SHAPES):
        t, codes = _tensor(n, k, g, seed=i)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(200 + i)) * 3
        x[0, :32] = 0.0  # an all-zero block: d = 0, q = 0
        q = torch.empty(m, k, dtype=torch.int8)
        d = torch.empty(m, k // 32)
        qs = torch.empty(m, k // 32, dtype=torch.int32)
        lib.quantize_q8(x.data_ptr(), m, k, q.data_ptr(), d.data_ptr(), qs.data_ptr())
        rq, rd, rqs = quantize_q8_torch(x)
        assert torch.equal(q, rq) and torch.equal(d, rd) and torch.equal(qs, rqs), f"{variant} quantize {k}"
        y = _layer(t, variant, "int8")(x)
        ref, size = q8_reference(rq, rd, codes, t.scales, g)
        rel = ((y.double() - ref).norm() / ref.norm()).item()
        assert rel < 1e-5, f"{variant} {n}x{k} g{g} M{m}: rel err {rel:.3g}"
        assert bool(((y.double() - ref).abs() <= size * 1e-5 + 1e-30).all())  # and every output


@pytest.mark.parametrize("variant", X86_VARIANTS)
def test_quantize_q8_rounds_half_away_from_zero_bit_for_bit(variant: str) -> None:
    """amax 127 gives d = 1, so x itself is rounded: ties go away from zero, and 0.49999997 goes to 0
    (rounding via floor(x + 0.5) would give 1 there)."""
    lib = ct.load_variant(variant)
    x = torch.zeros(2, 64)
    x[0, :8] = torch.tensor([127.0, 2.5, -2.5, 0.5, -0.5, 0.49999997, -126.5, 3.4999998])
    x[1] = torch.randn(64) * 1e-30  # tiny (subnormal) scale
    q = torch.empty(2, 64, dtype=torch.int8)
    d = torch.empty(2, 2)
    qs = torch.empty(2, 2, dtype=torch.int32)
    lib.quantize_q8(x.data_ptr(), 2, 64, q.data_ptr(), d.data_ptr(), qs.data_ptr())
    assert q[0, :8].tolist() == [127, 3, -3, 1, -1, 0, -127, 3]
    assert d[0, 0].item() == 1.0 and d[0, 1].item() == 0.0 and q[0, 8:].abs().sum() == 0
    rq, rd, rqs = quantize_q8_torch(x)
    assert torch.equal(q, rq) and torch.equal(d, rd) and torch.equal(qs, rqs)


def test_variant_names_and_widths() -> None:
    assert ct.available_variants()[-1] == "c"
    assert ct.available_isas()[-1] == "c"
    widths = {"avx512-vnni": 512, "avx512": 512, "avx2-vnni": 256, "avx2": 256, "c": 0}
    for v in X86_VARIANTS:
        lib = ct.load_variant(v)
        assert lib.kernel_name().decode() == v and lib.kernel_isa() == widths[v]
    with pytest.raises(ValueError, match="unknown CPU kernel variant"):
        ct.load_variant("sse9")


def test_forced_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _tensor(8, 256, 128, seed=1)[0]
    monkeypatch.setenv("TERNARY_CPU_ISA", "c")
    assert CpuTernaryLinear(t, activations="exact").backend == "cpu_ternary[c,exact]"
    monkeypatch.setenv("TERNARY_CPU_ISA", "sse")
    with pytest.raises(RuntimeError, match="not one of avx512, avx2, neon, c"):
        CpuTernaryLinear(t)
    lacking = "neon" if "avx2" in ct.available_isas() else "avx2"
    monkeypatch.setenv("TERNARY_CPU_ISA", lacking)
    with pytest.raises(RuntimeError, match=f"'{lacking}' cannot run on this CPU .*lacks"):
        CpuTernaryLinear(t)
    monkeypatch.delenv("TERNARY_CPU_ISA")
    assert ct.kernel_library().kernel_name().decode() == ct.available_variants()[0]


def test_activation_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _tensor(8, 256, 128, seed=2)[0]
    monkeypatch.delenv("TERNARY_CPU_ACTIVATIONS", raising=False)
    assert CpuTernaryLinear(t).activations == "int8"  # SIMD kernels: int8 is the faster default
    monkeypatch.setenv("TERNARY_CPU_ISA", "c")
    assert CpuTernaryLinear(t).backend == "cpu_ternary[c,exact]"  # portable C: its fp32 loop is faster
    monkeypatch.delenv("TERNARY_CPU_ISA")
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "exact")
    w = CpuTernaryLinear(t)
    assert w.activations == "exact" and w.backend.endswith(",exact]") and w.backend_family == "cpu_ternary"
    assert CpuTernaryLinear(t, activations="int8").backend.endswith(",int8]")  # the argument wins
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "int4")
    with pytest.raises(ValueError, match="TERNARY_CPU_ACTIVATIONS"):
        CpuTernaryLinear(t)
    with pytest.raises(ValueError, match="activations must be one of"):
        CpuTernaryLinear(t, activations="fp8")
    # int8 blocks are 32 wide: a group-16 layer keeps the exact path
    assert CpuTernaryLinear(_tensor(4, 48, 16, seed=3)[0], activations="int8").activations == "exact"
    # the process-wide setting (the engine's decode_activations) wins over the environment
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "int8")
    try:
        ct.set_default_activations("exact")
        assert CpuTernaryLinear(t).activations == "exact"
        with pytest.raises(ValueError, match="activations must be one of"):
            ct.set_default_activations("int16")
    finally:
        ct.set_default_activations(None)
    assert CpuTernaryLinear(t).activations == "int8"


def test_thread_pool_results_do_not_depend_on_threads_callers_or_fork() -> None:
    """Every output row is computed by one thread in a fixed order, so any thread count gives the same
    bits; concurrent callers are serialised; a forked child starts its own helper threads."""
    t, _ = _tensor(203, 512, 128, seed=4)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(9))
    results = {}
    for act in ("exact", "int8"):
        w = CpuTernaryLinear(t, activations=act)
        ys = []
        for nt in (1, 2, 3, 8):
            with torch.no_grad():
                torch.set_num_threads(nt)
                ys += [w(x), w(x[:1])]
        torch.set_num_threads(2)
        for y in ys[2::2]:
            assert torch.equal(y, ys[0])
        for y in ys[3::2]:
            assert torch.equal(y, ys[1])
        results[act] = (w, ys[0])
    outs: list[bool] = []
    threads = [threading.Thread(target=lambda a=a: outs.extend(
        torch.equal(results[a][0](x), results[a][1]) for _ in range(50))) for a in ("exact", "int8", "int8")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(outs) == 150 and all(outs)
    pid = os.fork()
    if pid == 0:  # child: must not wait for the parent's helper threads (they do not exist here)
        ok = all(torch.equal(w(x), y) for w, y in results.values())
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.fixture(scope="module")
def tiny_model_data():
    cfg = mf.tiny_qwen3_config()
    return mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=7, group_size=128), mf.tiny_tokenizer())


def _logits(data, activations: str, ids: list[int], monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    """Logits at every position: the first half as one prefill, the rest one decode step at a time."""
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", activations)
    eng = Engine.load(data, device="cpu", backend="cpu_ternary", context_length=256)
    assert eng.info.backend.endswith(f",{activations}]")
    half = len(ids) // 2
    with torch.no_grad():
        out = [eng.model(torch.tensor(ids[:half]), torch.arange(half), kv_len=half)]
        for p in range(half, len(ids)):
            out.append(eng.model(torch.tensor(ids[p:p + 1]), torch.tensor([p]), kv_len=p + 1))
    eng.close()
    return torch.cat([o.reshape(-1, o.shape[-1]) for o in out]).double()


def test_int8_accuracy_cost_on_tiny_model(monkeypatch: pytest.MonkeyPatch, tiny_model_data) -> None:
    """KL(exact || int8) and top-1 agreement on a tiny exactly-ternary Qwen3 (numbers in the report)."""
    ids = torch.randint(0, 290, (48,), generator=torch.Generator().manual_seed(0)).tolist()
    exact = _logits(tiny_model_data, "exact", ids, monkeypatch)
    int8 = _logits(tiny_model_data, "int8", ids, monkeypatch)
    lp, lq = torch.log_softmax(exact, -1), torch.log_softmax(int8, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    top1 = (exact.argmax(-1) == int8.argmax(-1)).double().mean().item()
    print(f"int8 vs exact: mean KL {kl.mean().item():.3g}, max KL {kl.max().item():.3g}, top-1 {top1:.3f}")
    assert kl.mean().item() < 1e-3 and top1 >= 0.95
