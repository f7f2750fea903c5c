"""Batched decode (continuous batching) of the q/k-norm+RoPE+KV-write and decode-attention kernels under the
Triton interpreter: B rows, each its own sequence in a slot of a cache that stacks S slots' KV heads, equal bit
for bit to the unbatched kernel run row by row on the slot's view of the cache (and to torch references)."""

from __future__ import annotations

import pytest
import torch
import triton

from runtime.kernels import reference_ops as ref
from runtime.kernels.triton import attention, matvec, packing
from runtime.kernels.triton.attention import decode_attention
from runtime.kernels.triton.rope import qk_norm_rope_kv_write

HQ, HKV, D, POS = 4, 2, 32, 64


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def _tables(rot: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    freqs = torch.arange(positions).float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def _heads(s: int) -> slice:
    return slice(s * HKV, (s + 1) * HKV)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("int8", [False, True])
def test_batched_rope_kv_write_equals_per_row(dtype: torch.dtype, int8: bool) -> None:
    """Rows at their own positions go to their slots' heads (slots [2, 0, 3] of 4): q out, caches and scales equal
    the unbatched kernel's row by row on each slot's view; slot 1 and every other position keep their contents."""
    torch.manual_seed(0)
    t, slots_n = 3, 4
    slots = torch.tensor([2, 0, 3], dtype=torch.int32)
    pos = torch.tensor([5, 0, 17], dtype=torch.int64)
    cos, sin = _tables(16, POS)  # partial rotary
    qkv = torch.randn(t, (HQ + 2 * HKV) * D).to(dtype)  # strided views, as after a fused qkv
    q = qkv[:, : HQ * D].view(t, HQ, D)
    k = qkv[:, HQ * D: (HQ + HKV) * D].view(t, HKV, D)
    v = qkv[:, (HQ + HKV) * D:].view(t, HKV, D)
    qw, kw = (torch.randn(D) * 0.2 + 1).to(dtype), (torch.randn(D) * 0.2 + 1).to(dtype)
    cdt = torch.int8 if int8 else dtype
    kc = torch.full((slots_n * HKV, POS, D), 5).to(cdt)
    vc = torch.full((slots_n * HKV, POS, D), 5).to(cdt)
    ks = torch.full((slots_n * HKV, POS), -1.0) if int8 else None
    vs = torch.full((slots_n * HKV, POS), -1.0) if int8 else None
    ref_kc, ref_vc = kc.clone(), vc.clone()
    ref_ks, ref_vs = (ks.clone(), vs.clone()) if int8 else (None, None)
    qo = qk_norm_rope_kv_write(q, k, v, qw, kw, cos, sin, pos, kc, vc, 1e-6, k_scale=ks, v_scale=vs, slots=slots)
    for r in range(t):
        h = _heads(int(slots[r]))
        qr = qk_norm_rope_kv_write(q[r:r + 1], k[r:r + 1], v[r:r + 1], qw, kw, cos, sin, pos[r:r + 1],
                                   ref_kc[h], ref_vc[h], 1e-6, k_scale=ref_ks[h] if int8 else None,
                                   v_scale=ref_vs[h] if int8 else None)
        assert torch.equal(qo[r], qr[0]), r
    assert torch.equal(kc, ref_kc) and torch.equal(vc, ref_vc)
    if int8:
        assert torch.equal(ks, ref_ks) and torch.equal(vs, ref_vs)
    written = torch.zeros(slots_n * HKV, POS, dtype=torch.bool)
    for r in range(t):
        written[_heads(int(slots[r])), int(pos[r])] = True
    assert (kc[~written].float() == 5).all() and (vc[~written].float() == 5).all()
    assert (kc[written].float() != 5).any(dim=-1).all()  # each written row really changed
    if int8:
        assert (ks[~written] == -1).all() and (ks[written] > 0).all()


def test_batched_rope_kv_write_rejects_bad_shapes() -> None:
    cos, sin = _tables(D, POS)
    q, k, v = torch.randn(3, HQ, D), torch.randn(3, HKV, D), torch.randn(3, HKV, D)
    w = torch.ones(D)
    kc = torch.zeros(4 * HKV, POS, D)
    pos, slots = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="slots and start_pos"):
        qk_norm_rope_kv_write(q, k, v, w, w, cos, sin, pos, kc, kc.clone(), 1e-6, slots=slots[:2])
    with pytest.raises(ValueError, match="slots and start_pos"):
        qk_norm_rope_kv_write(q, k, v, w, w, cos, sin, pos[:1], kc, kc.clone(), 1e-6, slots=slots)
    odd = torch.zeros(4 * HKV + 1, POS, D)
    with pytest.raises(ValueError, match="slots \\* kv_heads"):
        qk_norm_rope_kv_write(q, k, v, w, w, cos, sin, pos, odd, odd.clone(), 1e-6, slots=slots)


def _batch(rows: int, slots_n: int, dtype: torch.dtype, int8: bool, seed: int = 1):
    """q [B*Hq, D] and S-slot caches where only each row's slot and live length hold numbers: NaN elsewhere
    (int8: NaN scales), so a wrong slot or length shows up."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows * HQ, D, generator=g).to(dtype)
    kw: dict = {}
    if int8:
        kc = torch.randint(-127, 128, (slots_n * HKV, POS, D), dtype=torch.int8, generator=g)
        vc = torch.randint(-127, 128, (slots_n * HKV, POS, D), dtype=torch.int8, generator=g)
        ks = torch.full((slots_n * HKV, POS), float("nan"))
        vs = torch.full((slots_n * HKV, POS), float("nan"))
        kw = dict(k_scale=ks, v_scale=vs)
        live = ks, vs
    else:
        kc = torch.full((slots_n * HKV, POS, D), float("nan"), dtype=dtype)
        vc = torch.full((slots_n * HKV, POS, D), float("nan"), dtype=dtype)
        live = kc, vc
    return q, kc, vc, kw, live, g


def _fill_live(live, slots: torch.Tensor, lengths: list[int], g: torch.Generator) -> None:
    for s, n in zip(slots.tolist(), lengths, strict=True):
        for t in live:
            shape = t[_heads(s), :n].shape
            val = torch.rand(shape, generator=g) / 100 if t.dim() == 2 else torch.randn(shape, generator=g)
            t[_heads(s), :n] = val.to(t.dtype)


def _slot_kw(kw: dict, s: int) -> dict:
    return {n: t[_heads(s)] for n, t in kw.items()}


@pytest.mark.parametrize("splits,len_offset,int8", [(1, 0, False), (3, 1, False), (3, 0, True), (4, 1, True)])
def test_batched_decode_attention_equals_per_row(splits: int, len_offset: int, int8: bool) -> None:
    """Rows in slots [3, 0, 4, 1] of 5 (slot 2 unused), live lengths 37, 1, 64 (the whole cache) and 20: each row's
    output equals the unbatched kernel's on its slot's view bit for bit, and the torch softmax reference."""
    slots = torch.tensor([3, 0, 4, 1], dtype=torch.int64)
    lengths = [37, 1, 64, 20]
    q, kc, vc, kw, live, g = _batch(4, 5, torch.float32, int8)
    _fill_live(live, slots, lengths, g)
    seq = torch.tensor(lengths, dtype=torch.int32) - len_offset
    out = torch.full_like(q, float("nan"))
    o = decode_attention(q, kc, vc, seq, 0.17, out=out, num_splits=splits, len_offset=len_offset, slots=slots,
                         kv_heads=HKV, **kw)
    assert o is out
    for b, (s, n) in enumerate(zip(slots.tolist(), lengths, strict=True)):
        h, qb = _heads(s), q[b * HQ:(b + 1) * HQ]
        one = decode_attention(qb, kc[h], vc[h], seq[b:b + 1], 0.17, num_splits=splits, len_offset=len_offset,
                               **_slot_kw(kw, s))
        assert torch.equal(o[b * HQ:(b + 1) * HQ], one), b
        sk = _slot_kw(kw, s)
        e = ref.ref_decode_attention(qb, kc[h], vc[h], n, 0.17, sk.get("k_scale"), sk.get("v_scale"))
        assert rel(o[b * HQ:(b + 1) * HQ], e) < 1e-5, b
    again = decode_attention(q, kc, vc, seq, 0.17, num_splits=splits, len_offset=len_offset, slots=slots,
                             kv_heads=HKV, **kw)
    assert torch.equal(again, o)  # the arrival counters were reset for the next launch


def test_batched_decode_attention_default_splits_count_every_program(monkeypatch) -> None:
    """Without num_splits the split count is sized for B * Hkv programs (not Hkv): 3 rows x 2 KV heads."""
    seen = []
    real = attention.default_num_splits

    def spy(kv_heads: int, max_positions: int, block_s: int = 64) -> int:
        seen.append((kv_heads, max_positions))
        return real(kv_heads, max_positions, block_s)

    monkeypatch.setattr(attention, "default_num_splits", spy)
    slots = torch.tensor([1, 2, 0], dtype=torch.int32)
    lengths = [9, 30, 2]
    q, kc, vc, kw, live, g = _batch(3, 3, torch.float32, False)
    _fill_live(live, slots, lengths, g)
    o = decode_attention(q, kc, vc, torch.tensor(lengths), 0.2, slots=slots, kv_heads=HKV)
    assert seen == [(3 * HKV, POS)]
    for b, (s, n) in enumerate(zip(slots.tolist(), lengths, strict=True)):
        e = ref.ref_decode_attention(q[b * HQ:(b + 1) * HQ], kc[_heads(s)], vc[_heads(s)], n, 0.2)
        assert rel(o[b * HQ:(b + 1) * HQ], e) < 1e-5, b


@pytest.mark.parametrize("splits,gated", [(3, False), (1, False), (4, True)])
def test_batched_decode_attention_merge_writes_per_row_planes(splits: int, gated: bool) -> None:
    """``q8_out`` batched: row b's int8 planes land at ``b * 7 * KW`` (``quant_x_planes(B, Hq*D)``'s layout) and
    equal the unbatched planes of that row and ``_quant_x_kernel``'s of the output rows; the output equals the
    in-launch merge's; the o_proj mat-vec over the B rows given the planes equals the one that quantises."""
    from tests.kernels.test_kernels_linear import make_weight

    slots = torch.tensor([2, 0, 3], dtype=torch.int32)
    lengths = [1, 37, 50]
    rows, kw = 3, HQ * D // 16
    q, kc, vc, _, live, g = _batch(rows, 4, torch.float16, False)
    _fill_live(live, slots, lengths, g)
    gate = torch.randn(rows * HQ, 2 * D, generator=g).half()[:, D:] if gated else None  # strided, as q|gate
    pos = torch.tensor(lengths) - 1
    planes = torch.full((rows, packing.Q8_PLANES * kw), -7, dtype=torch.int32)
    args = dict(num_splits=splits, len_offset=1, gate=gate, slots=slots, kv_heads=HKV)
    o = decode_attention(q, kc, vc, pos, 0.17, q8_out=planes, **args)
    assert torch.equal(o, decode_attention(q, kc, vc, pos, 0.17, **args))
    for b, s in enumerate(slots.tolist()):
        h, qs = _heads(s), slice(b * HQ, (b + 1) * HQ)
        one = torch.full((packing.Q8_PLANES * kw,), -7, dtype=torch.int32)
        ob = decode_attention(q[qs], kc[h], vc[h], pos[b:b + 1], 0.17, num_splits=splits, len_offset=1,
                              gate=gate[qs] if gated else None, q8_out=one)
        assert torch.equal(o[qs], ob) and torch.equal(planes[b], one), b
        e = ref.ref_decode_attention(q[qs].float(), kc[h].float(), vc[h].float(), lengths[b], 0.17)
        if gated:
            e = e * torch.sigmoid(gate[qs].float())
        assert rel(o[qs], e) < 2e-3, b
    x = o.reshape(rows, -1)
    expect = torch.empty_like(planes)
    packing._quant_x_kernel[(rows, triton.cdiv(kw, 16))](x, x.stride(0), x, expect, HQ * D, kw, 1e-6, 0.0,
                                                       BLOCK_W=16, NORM=False, NORM_QWEN3=True, NORM_BLOCK=16,
                                                       USE_GDC=False)
    assert torch.equal(planes, expect)
    if splits == 3:  # slow in the interpreter: once (every int8 kernel reads the planes of row m at m * 7 * KW)
        codes, scales = make_weight(8, HQ * D, 64, "t2", seed=5)
        plain = matvec.ternary_matvec(x, codes, scales, 64, config=("q8", 4, 128, 1, 2))
        given = matvec.ternary_matvec(x, codes, scales, 64, config=("q8", 4, 128, 1, 2), x_int8=planes)
        assert torch.equal(plain, given)


def test_batched_decode_attention_rejects_bad_shapes() -> None:
    slots = torch.tensor([0, 1])
    q, kc, vc = torch.randn(2 * HQ, D), torch.randn(3 * HKV, POS, D), torch.randn(3 * HKV, POS, D)
    seq = torch.tensor([3, 4])
    with pytest.raises(ValueError, match="both slots and kv_heads"):
        decode_attention(q, kc, vc, seq, 0.1, slots=slots)
    with pytest.raises(ValueError, match="both slots and kv_heads"):
        decode_attention(q, kc, vc, seq, 0.1, kv_heads=HKV)
    with pytest.raises(ValueError, match=r"\[B\]"):
        decode_attention(q, kc, vc, seq[:1], 0.1, slots=slots, kv_heads=HKV)
    with pytest.raises(ValueError, match=r"\[B\]"):
        decode_attention(q, kc, vc, seq, 0.1, slots=slots.float(), kv_heads=HKV)
    with pytest.raises(ValueError, match="Hq % kv_heads"):
        decode_attention(q[:-1], kc, vc, seq, 0.1, slots=slots, kv_heads=HKV)
    with pytest.raises(ValueError, match="Hq % kv_heads"):
        decode_attention(q, kc[:-1], vc[:-1], seq, 0.1, slots=slots, kv_heads=HKV)
