"""GGML block codecs: bit-exact decode, byte-exact re-encode, and agreement with references we did
not write (the ``gguf`` package's numpy quantizers) or transcribed line by line from ggml's C."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from runtime.formats import codecs
from runtime.formats import gguf_codecs as gc
from runtime.formats.model_data import T2, T3, TernaryTensor

TERNARY = [gc.Q2_0, gc.Q2_0_LEGACY, gc.PQ2_0, gc.PTQ1_0, gc.TQ1_0, gc.TQ2_0]


def random_blocks(gtype: gc.GGMLType, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Valid raw bytes: random codes (0..3 for 2-bit types, canonical base-3 bytes) and fp16 d."""
    nb = cols // gtype.block_size
    d = (rng.random((rows, nb)) + 0.01).astype(np.float16)
    d[0, 0] = 0.0
    hi = 4 if gtype.name in ("Q2_0", "Q2_0_LEGACY", "PQ2_0", "TQ2_0") else 3
    codes = rng.integers(0, hi, (rows, cols)).astype(np.uint8)
    t = TernaryTensor((rows, cols), gtype.block_size, torch.from_numpy(codecs.pack_t2(torch.from_numpy(codes)).numpy()),
                      torch.from_numpy(d), T2)
    return gc.encode_ternary(t, gtype), codes, d


# ---- scalar references transcribed from ggml-quants.c (deliberately loop-based and independent) ----

def ref_dequant_q2(raw: np.ndarray, B: int) -> np.ndarray:
    out = []
    for blk in raw.reshape(-1, 2 + B // 4):
        d = float(blk[:2].view(np.float16)[0])
        qs = blk[2:]
        out += [(((int(qs[j // 4]) >> (2 * (j % 4))) & 3) - 1) * d for j in range(B)]
    return np.array(out, dtype=np.float32)


def ref_dequant_tq2(raw: np.ndarray) -> np.ndarray:
    out = []
    for blk in raw.reshape(-1, 66):
        d = float(blk[64:66].view(np.float16)[0])
        for j in range(0, 64, 32):
            for l in range(4):  # noqa: E741 - as in ggml
                for m in range(32):
                    out.append((((int(blk[j + m]) >> (l * 2)) & 3) - 1) * d)
    return np.array(out, dtype=np.float32)


def ref_dequant_base3(raw: np.ndarray, B: int, stages: list[int], nh: int) -> np.ndarray:
    pow3 = [1, 3, 9, 27, 81, 243]
    nq = sum(stages)
    out = []
    for blk in raw.reshape(-1, nq + nh + 2):
        d = float(blk[nq + nh:].view(np.float16)[0])
        pos = 0
        for c in stages:
            for n in range(5):
                for m in range(c):
                    q = (int(blk[pos + m]) * pow3[n]) & 0xFF
                    out.append((((q * 3) >> 8) - 1) * d)
            pos += c
        for n in range(4):
            for j in range(nh):
                q = (int(blk[nq + j]) * pow3[n]) & 0xFF
                out.append((((q * 3) >> 8) - 1) * d)
    return np.array(out, dtype=np.float32)


def reference_dequant(raw: np.ndarray, gtype: gc.GGMLType) -> np.ndarray:
    if gtype.name in ("Q2_0", "Q2_0_LEGACY", "PQ2_0"):
        return ref_dequant_q2(raw, gtype.block_size)
    if gtype is gc.TQ2_0:
        return ref_dequant_tq2(raw)
    if gtype is gc.TQ1_0:
        return ref_dequant_base3(raw, 256, [32, 16], 4)
    return ref_dequant_base3(raw, 128, [16, 8], 2)


@pytest.mark.parametrize("gtype", TERNARY, ids=lambda t: t.name)
def test_decode_matches_scalar_reference_and_reencodes_byte_exact(gtype):
    rng = np.random.default_rng(gtype.type_id + gtype.block_size)
    rows, cols = 3, 512
    raw, codes, d = random_blocks(gtype, rows, cols, rng)
    t = gc.decode_ternary(raw, rows, cols, gtype)
    assert t.group_size == gtype.block_size
    assert t.encoding == (T3 if gtype is gc.PTQ1_0 else T2)
    # codes and scales identical to what was encoded
    assert np.array_equal(codecs.codes_of(t).numpy(), codes)
    assert np.array_equal(t.scales.numpy().view(np.uint16), d.view(np.uint16))
    # weights identical to ggml's own dequantization loop
    ref = reference_dequant(raw, gtype).reshape(rows, cols)
    assert np.array_equal(t.dequantize().numpy(), ref)
    # byte-for-byte round trip, from both encodings
    assert np.array_equal(gc.encode_ternary(t, gtype), raw)
    if codes.max() <= 2:
        other = gc.decode_ternary(raw, rows, cols, gtype, T2 if t.encoding == T3 else T3)
        assert np.array_equal(gc.encode_ternary(other, gtype), raw)


@pytest.mark.parametrize("name", ["TQ1_0", "TQ2_0"])
def test_tq_types_match_gguf_package_quantizer(name):
    """gguf-py's TQ1_0/TQ2_0 (llama.cpp's own Python port) gives the same bytes and values."""
    from gguf import GGMLQuantizationType, quants

    rng = np.random.default_rng(7)
    rows, cols = 4, 768
    t = rng.integers(-1, 2, (rows, cols // 256, 256)).astype(np.float32)
    s = (rng.random((rows, cols // 256, 1)) + 0.5).astype(np.float16).astype(np.float32)
    w = (t * s).reshape(rows, cols)
    qtype = getattr(GGMLQuantizationType, name)
    ref = quants.quantize(w, qtype)
    mine = gc.decode_ternary(ref, rows, cols, gc.TYPES_BY_NAME[name])
    assert np.array_equal(mine.dequantize().numpy(), quants.dequantize(ref, qtype))
    assert np.array_equal(mine.dequantize().numpy(), w)
    assert np.array_equal(gc.encode_ternary(mine, gc.TYPES_BY_NAME[name]), ref.reshape(rows, -1))


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0"])
def test_dense_quant_types_match_gguf_package(name):
    from gguf import GGMLQuantizationType, quants

    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 256)).astype(np.float32)
    qtype = getattr(GGMLQuantizationType, name)
    ref = quants.quantize(x, qtype)
    assert np.array_equal(gc.encode_dense(torch.from_numpy(x), gc.TYPES_BY_NAME[name]), ref.reshape(-1))
    dec = gc.decode_dense(ref, (6, 256), gc.TYPES_BY_NAME[name]).data
    assert dec.dtype == torch.float32
    assert np.array_equal(dec.numpy(), quants.dequantize(ref, qtype))


@pytest.mark.parametrize("name,dtype", [("F32", torch.float32), ("F16", torch.float16), ("BF16", torch.bfloat16)])
def test_plain_float_types_round_trip(name, dtype):
    x = torch.randn(5, 64).to(dtype)
    raw = gc.encode_dense(x, gc.TYPES_BY_NAME[name])
    y = gc.decode_dense(raw, (5, 64), gc.TYPES_BY_NAME[name]).data
    assert y.dtype == dtype and torch.equal(y, x)


def test_ptq1_0_block_layout_known_answer():
    """One hand-built PTQ1_0 block: weight 0 is +1 (most significant trit of qs[0]), weight 16 is -1,
    weight 120 (qh[0], first trit) is +1, everything else 0; d = 2.0 stored last."""
    trits = np.ones(128, dtype=np.uint8)  # all zero weights (trit 1)
    trits[0], trits[16], trits[120] = 2, 0, 2
    t = TernaryTensor((1, 128), 128, codecs.pack_t3(torch.from_numpy(trits[None]), 128),
                      torch.tensor([[2.0]], dtype=torch.float16), T3)
    raw = gc.encode_ternary(t, gc.PTQ1_0).reshape(-1)
    assert raw.size == 28
    assert raw[26:].view(np.float16)[0] == 2.0
    # qs[0] holds weights 0,16,32,48,64 MSB first: trits 2,0,1,1,1 -> 2*81+0+9+3+1 = 175 -> ceil(175*256/243)
    assert raw[0] == (175 * 256 + 242) // 243
    # qh[0] holds weights 120,122,124,126: trits 2,1,1,1 -> (54+9+3+1)*3 = 201
    assert raw[24] == (201 * 256 + 242) // 243
    w = gc.decode_ternary(raw, 1, 128, gc.PTQ1_0).dequantize().numpy()[0]
    expect = np.zeros(128, dtype=np.float32)
    expect[0], expect[16], expect[120] = 2.0, -2.0, 2.0
    assert np.array_equal(w, expect)


def test_regroup_splits_and_merges_exactly():
    rng = np.random.default_rng(0)
    rows, cols = 4, 512
    codes = torch.from_numpy(rng.integers(0, 3, (rows, cols)).astype(np.uint8))
    s = torch.from_numpy((rng.random((rows, 2)) + 0.5).astype(np.float16))
    t256 = TernaryTensor((rows, cols), 256, codecs.pack_t2(codes), s, T2)
    q2 = gc.decode_ternary(gc.encode_ternary(t256, gc.Q2_0), rows, cols, gc.Q2_0)  # split into g64
    assert torch.equal(q2.dequantize(), t256.dequantize())
    back = gc.decode_ternary(gc.encode_ternary(q2, gc.TQ2_0), rows, cols, gc.TQ2_0)  # merge back
    assert torch.equal(back.codes, t256.codes) and torch.equal(back.scales, t256.scales)


def test_merging_different_scales_is_refused():
    codes = torch.full((1, 256), 2, dtype=torch.uint8)
    t = TernaryTensor((1, 256), 128, codecs.pack_t2(codes), torch.tensor([[1.0, 2.0]], dtype=torch.float16), T2)
    with pytest.raises(ValueError, match="losslessly"):
        gc.encode_ternary(t, gc.TQ2_0)


def test_code_three_cannot_go_base3():
    codes = torch.full((1, 128), 3, dtype=torch.uint8)
    t = TernaryTensor((1, 128), 128, codecs.pack_t2(codes), torch.ones(1, 1, dtype=torch.float16), T2)
    with pytest.raises(ValueError, match="code 3"):
        gc.encode_ternary(t, gc.PTQ1_0)


def test_big_tensor_decode_is_vectorized():
    """A 4096 x 4096 PTQ1_0 tensor (16.8 M weights) decodes well within a second or two."""
    import time

    rows = cols = 4096
    rng = np.random.default_rng(1)
    raw, _codes, _d = random_blocks(gc.PTQ1_0, 8, cols, rng)
    big = np.tile(raw, (rows // 8, 1))
    t0 = time.perf_counter()
    t = gc.decode_ternary(big, rows, cols, gc.PTQ1_0)
    dt = time.perf_counter() - t0
    assert t.codes.shape == (rows, cols // 128 * 26)
    assert dt < 10.0, f"PTQ1_0 decode of 16.8M weights took {dt:.1f}s"


@pytest.mark.parametrize("gtype", [gc.TQ1_0, gc.PTQ1_0, gc.Q2_0], ids=lambda t: t.name)
def test_t3_source_with_other_group_size_encodes_exactly(gtype):
    """A t3 tensor whose group size differs from the block size (split or merged scales)."""
    rng = np.random.default_rng(5)
    rows, cols = 3, 512
    codes = torch.from_numpy(rng.integers(0, 3, (rows, cols)).astype(np.uint8))
    s = torch.from_numpy((rng.random((rows, 1)) + 0.5).astype(np.float16)).repeat(1, 4)  # equal per 512
    t = TernaryTensor((rows, cols), 128, codecs.pack_t3(codes, 128), s, T3)
    back = gc.decode_ternary(gc.encode_ternary(t, gtype), rows, cols, gtype)
    assert torch.equal(back.dequantize(), t.dequantize())
