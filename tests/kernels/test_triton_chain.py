"""Chained int8 decode activations (runtime/kernels/triton_chain.py) in the Triton interpreter: the
layout the producers write, the deferred RMSNorm, and the producers' quantised outputs (own groups,
groups completed by the last of several programs, after split-K, from attention)."""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import reference_ops as ref
from runtime.kernels import triton_attention as ta
from runtime.kernels import triton_chain as tc
from runtime.kernels import triton_linear as tlin
from tests.kernels.test_kernels_linear import make_weight, rel


def ref_layout(x: torch.Tensor, nw: torch.Tensor | None = None, offset: float = 0.0) -> torch.Tensor:
    """The chain layout in torch: rows 0..3 packed bytes, scale, int8 sum, sum of squares."""
    m, k = x.shape
    kw = k // 16
    v = x.float().reshape(m, kw, 16)
    ss = (v * v).sum(-1)
    if nw is not None:
        v = v * (nw.float() + offset).reshape(kw, 16)
    amax = v.abs().amax(-1)
    rcp = torch.where(amax > 0, 127.0 / amax.clamp_min(1e-30), torch.zeros_like(amax))
    q = torch.floor(v * rcp[..., None] + 0.5).clamp(-127, 127).to(torch.int64)
    rows = []
    for j in range(4):
        word = sum((q[..., 4 * b + j] & 0xFF) << (8 * b) for b in range(4))
        rows.append(((word + 2**31) % 2**32 - 2**31).to(torch.int32))
    rows += [(amax / 127.0).view(torch.int32), q.sum(-1).to(torch.int32), ss.view(torch.int32)]
    return torch.stack(rows, 1).reshape(m, 7 * kw)


def split(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The integer rows (packed bytes, int8 sums: exact) and the fp32 rows (scale, sum of squares:
    within an ulp or two — division and summation order)."""
    r = q.reshape(q.shape[0], 7, -1)
    return r[:, :4], r[:, 5], r[:, [4, 6]].contiguous().view(torch.float32)


def assert_layout_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    gb, gsum, gf = split(got)
    wb, wsum, wf = split(want)
    assert torch.equal(gb, wb)
    assert torch.equal(gsum, wsum)
    torch.testing.assert_close(gf, wf, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("norm", [False, True])
def test_chain_quantize_layout(norm: bool) -> None:
    k = 40 * 16  # 40 groups: the kernel's 64-group block is partly masked
    torch.manual_seed(1)
    x = torch.randn(2, k, dtype=torch.bfloat16)
    x[0, :16] = 0  # an all-zero group: scale 0
    nw = (torch.randn(k) * 0.1 + 1).to(torch.bfloat16) if norm else None
    q = tc.chain_quantize(x, tc.chain_buffer(2, k, "cpu"), nw, 1.0 if norm else 0.0)
    assert_layout_equal(q, ref_layout(x, nw, 1.0 if norm else 0.0))


@pytest.mark.parametrize("cfg", [("q8", 16, 64, 1, 4), ("q8", 4, 128, 2, 4), ("q8", 2, 256, 1, 2),
                                 ("q8", 32, 64, 3, 4)])
def test_chain_matvec_deferred_norm_and_quantised_output(cfg: tuple) -> None:
    """y = rmsnorm(x) @ W^T from the chain layout (1/rms applied to the dot), and y's own chain
    layout, written by the programs that own its groups or by the last of several to finish."""
    n, k, m, g = 96, 384, 2, 128
    torch.manual_seed(3)
    codes, scales = make_weight(n, k, g, "t2", seed=3)
    x = torch.randn(m, k, dtype=torch.bfloat16)
    nw = (torch.randn(k) * 0.1 + 1).to(torch.bfloat16)
    q = tc.chain_quantize(x, tc.chain_buffer(m, k, "cpu"), nw)
    next_nw = (torch.randn(n) * 0.1 + 1).to(torch.bfloat16)
    q_out = tc.chain_buffer(m, n, "cpu")
    y = tc.chain_matvec(q, codes, scales, g, dtype=torch.bfloat16, norm_eps=1e-6, q_out=q_out, q_out_norm=next_nw,
                        config=cfg)
    inv = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    want = ref.ref_ternary_matmul(ref.ref_int8_activations(x.float() * nw.float()), codes, scales, g) * inv
    assert rel(y, want) < 1e-2  # bf16 output
    exact = ref.ref_ternary_matmul(ref.ref_rmsnorm(x.float(), nw.float(), 1e-6), codes, scales, g)
    assert rel(y, exact) < 3e-2  # int8 rounding is small
    assert_layout_equal(q_out, ref_layout(y, next_nw))
    # the arrival counters were reset: a second launch gives the same bits
    q2 = tc.chain_buffer(m, n, "cpu")
    tc.chain_matvec(q, codes, scales, g, dtype=torch.bfloat16, norm_eps=1e-6, q_out=q2, q_out_norm=next_nw, config=cfg)
    assert torch.equal(q2, q_out)


@pytest.mark.parametrize("cfg", [("q8", 16, 64, 1, 4), ("q8", 4, 128, 2, 4)])
def test_chain_matvec_swiglu_and_residual(cfg: tuple) -> None:
    n, k, g = 64, 256, 64
    torch.manual_seed(5)
    codes, scales = make_weight(n, k, g, "t2", seed=5)
    up_codes, up_scales = make_weight(n, k, g, "t2", seed=6)
    x = torch.randn(1, k, dtype=torch.bfloat16)
    q = tc.chain_quantize(x, tc.chain_buffer(1, k, "cpu"))
    q_out = tc.chain_buffer(1, n, "cpu")
    h = tc.chain_matvec(q, codes, scales, g, dtype=torch.bfloat16, up_codes=up_codes, up_scales=up_scales,
                        q_out=q_out, config=cfg)
    # without a deferred norm the chain is the two-launch W2A8 path, bit for bit
    assert torch.equal(h, tlin.swiglu_matvec(x, codes, scales, g, up_codes=up_codes, up_scales=up_scales, config=cfg))
    xq = ref.ref_int8_activations(x.float())
    want = ref.ref_swiglu_matvec(xq, codes, scales, up_codes, up_scales, g)
    assert rel(h, want) < 2e-2  # gate and up are rounded to bf16 before silu(g) * u
    assert_layout_equal(q_out, ref_layout(h))
    # residual producer, in place, as the decode step uses it
    d_codes, d_scales = make_weight(k, n, g, "t2", seed=7)
    resid = torch.randn(1, k, dtype=torch.bfloat16)
    before = resid.float().clone()
    q_res = tc.chain_buffer(1, k, "cpu")
    tc.chain_matvec(q_out, d_codes, d_scales, g, dtype=torch.bfloat16, residual=resid, out=resid, q_out=q_res,
                    config=cfg)
    want = ref.ref_ternary_matmul(ref.ref_int8_activations(h.float()), d_codes, d_scales, g) + before
    assert rel(resid, want) < 1e-2
    assert_layout_equal(q_res, ref_layout(resid))


def test_chain_matvec_rejects_mismatched_buffers() -> None:
    codes, scales = make_weight(32, 128, 64, "t2")
    with pytest.raises(ValueError, match="do not take"):
        tc.chain_matvec(tc.chain_buffer(1, 256, "cpu"), codes, scales, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_out"):
        tc.chain_matvec(tc.chain_buffer(1, 128, "cpu"), codes, scales, 64, dtype=torch.bfloat16,
                        q_out=tc.chain_buffer(1, 64, "cpu"))
    with pytest.raises(ValueError, match="multiple of 16"):
        tc.chain_buffer(1, 40, "cpu")


@pytest.mark.parametrize("splits", [1, 3])
def test_attention_writes_its_chain_layout(splits: int) -> None:
    hq, hkv, d, length, max_pos = 8, 2, 32, 40, 64
    torch.manual_seed(7)
    q = torch.randn(hq, d)  # fp32: the interpreter's bf16 tl.dot is not numpy's strength
    kc = torch.randn(hkv, max_pos, d)
    vc = torch.randn(hkv, max_pos, d)
    seq = torch.tensor([length], dtype=torch.int32)
    q_out = tc.chain_buffer(1, hq * d, "cpu")
    o = ta.decode_attention(q, kc, vc, seq, d ** -0.5, num_splits=splits, q_out=q_out)
    assert rel(o, ref.ref_decode_attention(q, kc, vc, length, d ** -0.5)) < 1e-5
    assert_layout_equal(q_out, ref_layout(o.reshape(1, -1)))
