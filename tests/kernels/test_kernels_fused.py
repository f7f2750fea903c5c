"""RMSNorm, q/k-norm+RoPE+KV write and decode attention vs torch references (Triton interpreter, tiny shapes;
the sampler's kernel: test_decoder_sampler.py)."""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import reference_ops as ref
from runtime.kernels.triton.attention import decode_attention
from runtime.kernels.triton.norm import rmsnorm
from runtime.kernels.triton.rope import qk_norm_rope_kv_write


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_kernels_rmsnorm(dtype: torch.dtype, offset: float) -> None:
    x = (torch.randn(3, 2, 80) * 3).to(dtype)
    w = (torch.randn(80) * 0.3 + (0.0 if offset else 1.0)).to(dtype)
    out = torch.full_like(x, float("nan"))
    y = rmsnorm(x, w, 1e-6, weight_offset=offset, out=out)
    assert y is out
    assert rel(y, ref.ref_rmsnorm(x, w, 1e-6, offset)) < (1e-6 if dtype == torch.float32 else 2e-3)


def test_kernels_add_rmsnorm_updates_residual() -> None:
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    expect, h = ref.ref_add_rmsnorm(x, r, w, 1e-5)
    r_live = r.clone()
    y = rmsnorm(x, w, 1e-5, residual=r_live)
    assert torch.allclose(r_live, h) and rel(y, expect) < 1e-6


def _tables(rot: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    freqs = torch.arange(positions).float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos() * 1.13, emb.sin() * 1.13  # YaRN-style attention factor folded in


@pytest.mark.parametrize("dim,rot,offset", [(32, 32, 0.0), (64, 16, 1.0)])  # full; partial rotary (qwen35)
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.int8])
def test_kernels_qk_norm_rope_kv_write(dim: int, rot: int, offset: float, kv_dtype: torch.dtype) -> None:
    t, hq, hkv, positions, start = 3, 4, 2, 16, 6
    cos, sin = _tables(rot, positions)
    q, k, v = torch.randn(t, hq, dim), torch.randn(t, hkv, dim), torch.randn(t, hkv, dim)
    qkv = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], 1)  # strided views, as after a fused qkv
    qv = qkv[:, : hq * dim].view(t, hq, dim)
    kv_ = qkv[:, hq * dim: (hq + hkv) * dim].view(t, hkv, dim)
    vv = qkv[:, (hq + hkv) * dim:].view(t, hkv, dim)
    qw, kw = torch.randn(dim) * 0.2 + 1, torch.randn(dim) * 0.2 + 1
    caches = [torch.full((hkv, positions, dim), 5).to(kv_dtype) for _ in range(4)]
    scales = [torch.full((hkv, positions), -1.0) for _ in range(4)] if kv_dtype == torch.int8 else [None] * 4
    q_out = qk_norm_rope_kv_write(qv, kv_, vv, qw, kw, cos, sin, torch.tensor([start], dtype=torch.int32),
                                  caches[0], caches[1], 1e-6, weight_offset=offset,
                                  k_scale=scales[0], v_scale=scales[1])
    q_ref = ref.ref_qk_norm_rope_kv_write(q, k, v, qw, kw, cos, sin, start, caches[2], caches[3], 1e-6,
                                          offset, scales[2], scales[3])
    assert rel(q_out, q_ref) < 1e-6
    if kv_dtype == torch.int8:  # round-half-away vs half-even may differ by one step at exact .5
        assert (caches[0].int() - caches[2].int()).abs().max() <= 1
        assert (caches[1].int() - caches[3].int()).abs().max() <= 1
        assert torch.allclose(scales[0], scales[2]) and torch.allclose(scales[1], scales[3])
    else:
        assert rel(caches[0], caches[2]) < 1e-6 and torch.equal(caches[1], caches[3])
    untouched = torch.ones(positions, dtype=torch.bool)
    untouched[start:start + t] = False
    assert (caches[0][:, untouched].float() == 5).all()


@pytest.mark.parametrize("hq,hkv,dim,length", [(8, 2, 32, 37), (6, 1, 64, 50), (4, 4, 32, 1)])
@pytest.mark.parametrize("splits,min_keys", [(1, 0), (3, 0), (4, 20)])
def test_kernels_decode_attention(hq: int, hkv: int, dim: int, length: int, splits: int, min_keys: int) -> None:
    """min_keys 20 -> 32 keys per split program (two 16-key tiles): 37 and 50 keys use 2 of the 4."""
    positions = 64
    q = torch.randn(hq, dim)
    kc, vc = torch.randn(hkv, positions, dim), torch.randn(hkv, positions, dim)
    kc[:, length:] = float("nan")  # never read past the live length
    vc[:, length:] = float("nan")
    out = torch.full((hq, dim), float("nan"))
    o = decode_attention(q, kc, vc, torch.tensor([length], dtype=torch.int32), 0.17, out=out, num_splits=splits,
                         min_split_keys=min_keys)
    assert o is out
    assert rel(o, ref.ref_decode_attention(q, kc, vc, length, 0.17)) < 1e-5
    # the live length as "position + 1" (len_offset): the step passes its position tensor itself
    o1 = decode_attention(q, kc, vc, torch.tensor([length - 1]), 0.17, num_splits=splits, min_split_keys=min_keys,
                          len_offset=1)
    assert torch.equal(o1, o)


@pytest.mark.parametrize("splits", [1, 3])
def test_kernels_decode_attention_output_gate(splits: int) -> None:
    """Gated attention (Qwen3.5): ``attn * sigmoid(gate)`` in the same launch, the gate a strided view
    of the q|gate projection (head stride 2·D), with one split and with the merge."""
    hq, hkv, dim, length = 8, 2, 32, 37
    q = torch.randn(hq, dim)
    kc, vc = torch.randn(hkv, 64, dim), torch.randn(hkv, 64, dim)
    qg = torch.randn(hq, 2 * dim)
    gate = qg[:, dim:]
    seq = torch.tensor([length], dtype=torch.int32)
    o = decode_attention(q, kc, vc, seq, 0.17, num_splits=splits, gate=gate)
    e = ref.ref_decode_attention(q, kc, vc, length, 0.17) * torch.sigmoid(gate)
    assert rel(o, e) < 1e-5
    with pytest.raises(ValueError, match="gate"):
        decode_attention(q, kc, vc, seq, 0.17, gate=qg)


def test_kernels_decode_attention_int8_cache() -> None:
    hq, hkv, dim, positions, length = 8, 2, 64, 48, 40
    q = torch.randn(hq, dim)
    k, v = torch.randn(positions, hkv, dim), torch.randn(positions, hkv, dim)
    kq, ks = ref.quantize_kv_int8(k)
    vq, vs = ref.quantize_kv_int8(v)
    kq, vq = kq.transpose(0, 1).contiguous(), vq.transpose(0, 1).contiguous()
    ks, vs = ks.t().contiguous(), vs.t().contiguous()
    seq = torch.tensor([length])
    o = decode_attention(q, kq, vq, seq, 0.125, k_scale=ks, v_scale=vs, num_splits=3)
    assert rel(o, ref.ref_decode_attention(q, kq, vq, length, 0.125, ks, vs)) < 1e-5
    # the accuracy cost of int8 KV itself (vs the fp32 cache) is small but not zero
    exact = ref.ref_decode_attention(q, k.transpose(0, 1), v.transpose(0, 1), length, 0.125)
    assert 0 < rel(o, exact) < 0.02


@pytest.mark.parametrize("hq,hkv,dim,splits,gated", [(8, 2, 64, 3, False), (8, 2, 64, 1, False),
                                                     (12, 2, 32, 4, False), (8, 2, 32, 3, True)])
def test_kernels_decode_attention_merge_writes_o_proj_int8_planes(hq: int, hkv: int, dim: int, splits: int,
                                                                  gated: bool) -> None:
    """``q8_out``: the splits are merged by a second launch that also writes the int8 planes ``_quant_x_kernel``
    makes of the output (bit for bit); the output equals the in-launch merge's, and the o_proj mat-vec given the
    planes (``x_int8``) equals the one that quantises x itself. GQA groups of 4 and 6 (not a power of two), one
    split, several, the live length as position + 1, and the gated (Qwen3.5) output."""
    import triton

    from runtime.kernels.triton import matvec, packing
    from tests.kernels.test_kernels_linear import make_weight

    length, kw = 37, hq * dim // 16
    q = torch.randn(hq, dim, dtype=torch.float16)
    kc, vc = torch.randn(hkv, 64, dim, dtype=torch.float16), torch.randn(hkv, 64, dim, dtype=torch.float16)
    gate = torch.randn(hq, dim, dtype=torch.float16) if gated else None
    pos = torch.tensor([length - 1])
    planes = torch.full((packing.Q8_PLANES * kw,), -7, dtype=torch.int32)
    o = decode_attention(q, kc, vc, pos, 0.17, num_splits=splits, q8_out=planes, gate=gate, len_offset=1)
    inlaunch = decode_attention(q, kc, vc, pos, 0.17, num_splits=splits, gate=gate, len_offset=1)
    assert torch.equal(o, inlaunch)
    e = ref.ref_decode_attention(q.float(), kc.float(), vc.float(), length, 0.17)
    if gated:
        e = e * torch.sigmoid(gate.float())
    assert rel(o.float(), e) < 2e-3
    expect = torch.empty_like(planes)
    x = o.reshape(1, -1)
    packing._quant_x_kernel[(1, triton.cdiv(kw, 16))](x, x.stride(0), x, expect, hq * dim, kw, 1e-6, 0.0, BLOCK_W=16,
                                                    NORM=False, NORM_QWEN3=True, NORM_BLOCK=16, USE_GDC=False)
    assert torch.equal(planes, expect)
    codes, scales = make_weight(24, hq * dim, 64, "t2", seed=5)
    for cfg in [("q8p", 2, 0, 1, 2), ("q8", 4, 128, 1, 2)]:
        plain = matvec.ternary_matvec(x, codes, scales, 64, config=cfg)
        given = matvec.ternary_matvec(x, codes, scales, 64, config=cfg, x_int8=planes)
        assert torch.equal(plain, given)
    with pytest.raises(ValueError, match="q8_out"):
        decode_attention(q, kc, vc, pos, 0.17, q8_out=planes[:10], len_offset=1)
