"""t3 (base-3) weights on int8 activations: the "q3" dp2a mat-vec (Triton interpreter, tiny shapes)."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.codecs import pack_t3
from runtime.kernels import reference_ops as ref
from runtime.kernels.triton import matvec, packing, tuning

CFGS = [tuning._INTERPRET_Q3, ("q3", 8, 32, 1, 4)]  # split-K 2 over 16-word blocks; one block per row


def GEN() -> torch.Generator:  # noqa: N802
    """Seeded inputs: with the global generator the values depended on which tests ran before on the same
    worker, and a value sitting on a rounding tie (the kernel's RMSNorm sums in another order than torch)
    quantises one int8 step apart from the reference — 1e-3 relative on these tiny matrices (CI, 2026-12-03)."""
    return torch.Generator().manual_seed(11)


def make_t3(n: int, k: int, g: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, generator=gen)
    scales = (torch.rand(n, k // g, generator=gen) * 0.05 + 0.01).half()
    return pack_t3(codes, g), scales


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def test_t3_prescale_and_digits_exhaustive() -> None:
    """q = b + ((55 b + 1023) >> 10) (ceil(256 b / 243), or one more for 13 bytes where that works too):
    its 16-bit lane never carries, and 'times 3, carry byte' yields the 5 trits most-significant first,
    for every byte; then the lane-packed version as the kernel runs it, for every pair of bytes."""
    for b in range(243):
        t = b * packing.T3_PRESCALE_MUL + packing.T3_PRESCALE_ADD
        assert t < 1 << 16
        r = t >> packing.T3_PRESCALE_SHIFT
        assert r < 16  # fits the 0x000F000F mask, which excludes the other lane's bits (shift 10 > 4)
        q = b + r
        assert 0 <= q - -(-256 * b // 243) <= 1 and q < 256
        trits = [(b // 3 ** j) % 3 for j in range(5)]
        for i in range(5):
            q *= 3
            assert q < 1 << 16
            assert q >> 8 == trits[4 - i]
            q &= 0xFF
    b = torch.arange(243, dtype=torch.int64)
    lo_b, hi_b = b[:, None].expand(243, 243).reshape(-1), b[None, :].expand(243, 243).reshape(-1)
    v = lo_b | (hi_b << 16)
    v = (v + (((v * 55 + 0x03FF03FF) >> 10) & 0x000F000F)) & 0xFFFFFFFF
    for i in range(5):
        v = (v * 3) & 0xFFFFFFFF
        d = (v >> 8) & 0x00FF00FF
        assert torch.equal(d & 0xFF, (lo_b // 3 ** (4 - i)) % 3)
        assert torch.equal(d >> 16, (hi_b // 3 ** (4 - i)) % 3)
        v &= 0x00FF00FF


def test_t3_q3_layout_check() -> None:
    assert matvec._q3_ok(256, 128) and matvec._q3_ok(512, 128) and matvec._q3_ok(5120, 128)
    assert not matvec._q3_ok(256, 64)  # 13 bytes per group: byte pairs would straddle groups
    assert not matvec._q3_ok(128, 128)  # 26 bytes per row: not whole int32 words


@pytest.mark.parametrize("cfg,k,m", [(CFGS[0], 256, 1), (CFGS[0], 512, 3), (CFGS[1], 512, 3),
                                     (("q3", 4, 8, 3, 2), 512, 1)])  # 26 words: 4 blocks over 3 splits
def test_t3_q3_matvec(cfg: tuple, k: int, m: int) -> None:
    g, n = 128, 21  # N not a multiple of any BLOCK_N above
    codes, scales = make_t3(n, k, g, seed=k + m)
    x = torch.randn(m, k, generator=GEN())
    x[0, :20] = 0.0  # an all-zero word: scale 0, no division by zero
    xq = ref.ref_q3_activations(x, g)
    out = torch.full((m, n), float("nan"))
    y = matvec.ternary_matvec(x, codes, scales, g, "t3", out=out, config=cfg)
    assert y is out and not torch.isnan(y).any()
    assert rel(y, ref.ref_ternary_matmul(xq, codes, scales, g, "t3")) < 1e-5
    exact = ref.ref_ternary_matmul(x, codes, scales, g, "t3")
    assert 1e-4 < rel(y, exact) < 3e-2  # int8 rounding is visible but small
    # residual, in place
    resid = torch.randn(m, n, generator=GEN())
    e = ref.ref_ternary_matmul(xq, codes, scales, g, "t3", residual=resid)
    matvec.ternary_matvec(x, codes, scales, g, "t3", out=resid, residual=resid, config=cfg)
    assert rel(resid, e) < 1e-5


@pytest.mark.parametrize("cfg", CFGS[:2])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_t3_q3_fused_rmsnorm(cfg: tuple, offset: float) -> None:
    g, n, k, m = 128, 19, 512, 3
    codes, scales = make_t3(n, k, g, seed=5)
    x = torch.randn(m, k, generator=GEN())
    nw = torch.randn(k, generator=GEN()) * 0.1 + (0.0 if offset else 1.0)
    y = matvec.fused_rmsnorm_matvec(x, nw, 1e-6, codes, scales, g, "t3", weight_offset=offset, config=cfg)
    h = ref.ref_rmsnorm(x, nw, 1e-6, offset)
    assert rel(y, ref.ref_ternary_matmul(ref.ref_q3_activations(h, g), codes, scales, g, "t3")) < 1e-5
    assert rel(y, ref.ref_ternary_matmul(h, codes, scales, g, "t3")) < 3e-2


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("fused", [False, True])
def test_t3_q3_swiglu(cfg: tuple, fused: bool) -> None:
    g, n, k, m = 128, 13, 256, 3
    codes, scales = make_t3(n, k, g, seed=7)
    up_codes, up_scales = make_t3(n, k, g, seed=8)
    x = torch.randn(m, k, generator=GEN())
    nw = torch.randn(k, generator=GEN()) * 0.1 + 1
    if fused:
        y = matvec.swiglu_matvec(x, torch.cat([codes, up_codes]), torch.cat([scales, up_scales]), g, "t3",
                               norm_weight=nw, config=cfg)
    else:
        y = matvec.swiglu_matvec(x, codes, scales, g, "t3", up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                               config=cfg)
    h = ref.ref_rmsnorm(x, nw, 1e-6)
    e = ref.ref_swiglu_matvec(ref.ref_q3_activations(h, g), codes, scales, up_codes, up_scales, g, "t3")
    assert rel(y, e) < 1e-5
    assert rel(y, ref.ref_swiglu_matvec(h, codes, scales, up_codes, up_scales, g, "t3")) < 3e-2


def test_t3_q3_falls_back_for_odd_group_bytes() -> None:
    """G = 64 (13 bytes per group): a q3 config runs the exact t3 kernel, equal to the fp32 reference."""
    g, n, k, m = 64, 21, 256, 3
    codes, scales = make_t3(n, k, g, seed=9)
    x = torch.randn(m, k, generator=GEN())
    y = matvec.ternary_matvec(x, codes, scales, g, "t3", config=tuning._INTERPRET_Q3)
    assert rel(y, ref.ref_ternary_matmul(x, codes, scales, g, "t3")) < 1e-5
    with pytest.raises(ValueError, match="t3 weights"):
        c2, s2 = make_t3(n, k, g)
        from runtime.formats.codecs import pack_t2
        t2 = pack_t2(torch.randint(0, 3, (n, k), dtype=torch.uint8))
        matvec.ternary_matvec(x, t2, s2, g, "t2", config=tuning._INTERPRET_Q3)
