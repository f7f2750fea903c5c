"""t3 (base-3) weights on int8 activations ("q3": in-register base-3 digits + dp2a) at 27B shapes on CUDA."""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import reference_ops as ref
from runtime.kernels.triton import matvec, tuning

pytestmark = pytest.mark.gpu
DEV = "cuda"
G = 128
# (N, K, dual) of the Bonsai-27B-class decode matmuls: gate/up, down, qkv-like, o_proj
SHAPES = [(17408, 5120, True), (5120, 17408, False), (10240, 5120, False), (5120, 6144, False)]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def weight(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    from runtime.formats.codecs import pack_t3
    gen = torch.Generator(device=DEV).manual_seed(seed)
    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, device=DEV, generator=gen)
    scales = (torch.rand(n, k // G, device=DEV, generator=gen) * 0.02 + 0.005).half()
    return pack_t3(codes, G), scales


def _run(n: int, k: int, dual: bool, x: torch.Tensor, cfg: tuple | None, nw: torch.Tensor | None = None):
    codes, scales = weight(n, k, seed=n + k)
    if dual:
        up_codes, up_scales = weight(n, k, seed=n + k + 1)
        y = matvec.swiglu_matvec(x, codes, scales, G, "t3", up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                               config=cfg)
        h = ref.ref_rmsnorm(x, nw, 1e-6) if nw is not None else x
        e8 = ref.ref_swiglu_matvec(ref.ref_q3_activations(h, G), codes, scales, up_codes, up_scales, G, "t3")
        ex = ref.ref_swiglu_matvec(h.float(), codes, scales, up_codes, up_scales, G, "t3")
    else:
        y = matvec.ternary_matvec(x, codes, scales, G, "t3", config=cfg)
        e8 = ref.ref_ternary_matmul(ref.ref_q3_activations(x, G), codes, scales, G, "t3")
        ex = ref.ref_ternary_matmul(x.float(), codes, scales, G, "t3")
    return y, e8, ex


@pytest.mark.parametrize("n,k,dual", SHAPES)
def test_gpu_t3_q3_27b_shapes(n: int, k: int, dual: bool) -> None:
    """The first q3 candidate and the tuned choice (int8 mode) vs the int8-x and exact references, bf16 x."""
    assert matvec._q3_ok(k, G)
    x = torch.randn(1, k, device=DEV).to(torch.bfloat16)
    nw = (torch.rand(k, device=DEV) + 0.5).to(torch.bfloat16) if dual else None
    y, e8, ex = _run(n, k, dual, x, tuning._Q3_CANDIDATES[0], nw)
    assert rel(y, e8) < 1e-2  # bf16 output rounding
    assert rel(y, ex) < 3e-2
    old = matvec.decode_activations()
    try:
        matvec.set_decode_activations("int8")
        y, e8, ex = _run(n, k, dual, x, None, nw)  # tuned among q3 and the exact t3 kernel
        assert min(rel(y, e8), rel(y, ex)) < 1e-2 and rel(y, ex) < 3e-2
    finally:
        matvec.set_decode_activations(old)


@pytest.mark.parametrize("cfg", tuning._Q3_CANDIDATES)
def test_gpu_t3_q3_every_config(cfg: tuple) -> None:
    """Every q3 candidate (split-K incl.) at batch 1, 3, 8; fused norm + SwiGLU; residual; reproducible."""
    n, k = 5120, 6144
    codes, scales = weight(n, k, seed=11)
    up_codes, up_scales = weight(n, k, seed=12)
    nw = (torch.rand(k, device=DEV) + 0.5).to(torch.bfloat16)
    gen = torch.Generator(device=DEV).manual_seed(13)
    for m in (1, 3, 8):
        x = torch.randn(m, k, device=DEV, generator=gen)
        y = matvec.ternary_matvec(x, codes, scales, G, "t3", config=cfg)
        # The kernel computes floor(x * (127 / amax) + 0.5) with a fused multiply-add and Triton's fp32
        # division, the reference with separately rounded torch ops: an x within an ulp of a .5 boundary
        # lands one int8 step apart (~1e-4 relative at K = 6144, seen once in a full-suite run). Wrong
        # digits, scales or split-K sums are off by > 1e-2, so 1e-3 still separates bugs from rounding.
        assert rel(y, ref.ref_ternary_matmul(ref.ref_q3_activations(x, G), codes, scales, G, "t3")) < 1e-3
        assert torch.equal(y, matvec.ternary_matvec(x, codes, scales, G, "t3", config=cfg))
        xb = x.to(torch.bfloat16)
        y = matvec.swiglu_matvec(xb, codes, scales, G, "t3", up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                               config=cfg)
        e = ref.ref_swiglu_matvec(ref.ref_q3_activations(ref.ref_rmsnorm(xb, nw, 1e-6), G), codes, scales, up_codes,
                                  up_scales, G, "t3")
        assert rel(y, e) < 1e-2
        r = torch.randn(m, n, device=DEV, dtype=torch.bfloat16)
        e = ref.ref_ternary_matmul(ref.ref_q3_activations(xb, G), codes, scales, G, "t3", residual=r.float())
        matvec.ternary_matvec(xb, codes, scales, G, "t3", out=r, residual=r, config=cfg)
        assert rel(r, e) < 1e-2


def test_gpu_t3_q3_speed_report() -> None:
    """Times (cold L2) every q3 candidate vs the exact t3 kernel at the 27B shapes; prints (run with -s)."""
    for n, k, dual in SHAPES:
        codes, scales = weight(n, k, seed=1)
        up = weight(n, k, seed=2) if dual else (None, None)
        x = torch.randn(1, k, device=DEV).to(torch.bfloat16)
        nbytes = (codes.numel() + scales.numel() * 2) * (2 if dual else 1)

        def call(cfg, codes=codes, scales=scales, up=up, x=x, dual=dual):
            if dual:
                return matvec.swiglu_matvec(x, codes, scales, G, "t3", up_codes=up[0], up_scales=up[1], config=cfg)
            return matvec.ternary_matvec(x, codes, scales, G, "t3", config=cfg)

        rows = []
        for cfg in [tuning._GEMV_CANDIDATES[0]] + tuning._Q3_CANDIDATES:
            try:
                ms = tuning._bench(lambda cfg=cfg: call(cfg))
            except Exception as e:  # report it, keep timing the rest
                rows.append((float("inf"), cfg, repr(e)[:80]))
                continue
            rows.append((ms, cfg, f"{nbytes / ms / 1e6:7.1f} GB/s"))
        rows.sort(key=lambda r: r[0])
        print(f"\nN={n} K={k} dual={dual} ({nbytes / 1e6:.1f} MB)")
        for ms, cfg, note in rows:
            print(f"  {ms * 1000:8.1f} us  {note}  {cfg}")
        assert rows[0][0] < float("inf")
