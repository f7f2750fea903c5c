"""Triton kernels on CUDA at real Bonsai shapes vs the torch references (relative-error bounds)."""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import reference_ops as ref
from runtime.kernels.triton import gemm, matvec, packing, tuning
from runtime.kernels.triton.attention import decode_attention
from runtime.kernels.triton.norm import rmsnorm
from runtime.kernels.triton.rope import qk_norm_rope_kv_write
from runtime.kernels.triton.sampling import DecoderSampler

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def weight(n: int, k: int, g: int = 128, enc: str = "t2", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    from runtime.formats.codecs import pack_t2, pack_t3
    gen = torch.Generator(device=DEV).manual_seed(seed)
    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, device=DEV, generator=gen)
    packed = pack_t2(codes) if enc == "t2" else pack_t3(codes, g)
    scales = (torch.rand(n, k // g, device=DEV, generator=gen) * 0.02 + 0.005).half()
    return packed, scales


# (N, K) of Bonsai 1.7B / 8B / 27B decode matmuls (qkv fused, o, down, lm_head slices)
SHAPES = [(4096, 2048), (6144, 4096), (4096, 12288), (17408, 5120), (151669, 4096)]


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_matvec_shapes(n: int, k: int, dtype: torch.dtype) -> None:
    codes, scales = weight(n, k, seed=n)
    x = torch.randn(1, k, device=DEV).to(dtype)
    old = matvec.decode_activations()
    try:
        matvec.set_decode_activations("exact")
        expect = ref.ref_ternary_matmul(x, codes, scales, 128)
        y = matvec.ternary_matvec(x, codes, scales, 128)  # tuned config
        assert rel(y, expect) < TOL[dtype]
        matvec.set_decode_activations("int8")
        y = matvec.ternary_matvec(x, codes, scales, 128)  # tuned among int8 and exact kernels
        xq = ref.ref_int8_activations(x)
        assert min(rel(y, ref.ref_ternary_matmul(xq, codes, scales, 128)), rel(y, expect)) < TOL[dtype]
        assert rel(y, expect) < 2e-2
    finally:
        matvec.set_decode_activations(old)


@pytest.mark.parametrize("cfg", [("q8", 2, 4096, 1, 2), ("q8c", 2, 4096, 1, 2), ("q8c", 4, 4096, 1, 2),
                                 ("q8p", 2, 4096, 8, 2)])
def test_gpu_matvec_more_row_tiles_than_a_grid_dimension_holds(cfg: tuple) -> None:
    """An LM head in 2-row tiles is 75,835 programs: more than grid dimension 1 allows (65,535), so the
    row tiles go in dimension 0 (the launch failed with "invalid argument" before)."""
    n, k = 151_669, 4096
    codes, scales = weight(n, k, seed=4)
    x = torch.randn(1, k, device=DEV, dtype=torch.float32)
    y = matvec.ternary_matvec(x, codes, scales, 128, config=cfg)
    assert rel(y, ref.ref_ternary_matmul(ref.ref_int8_activations(x), codes, scales, 128)) < 5e-4


@pytest.mark.parametrize("cfg", tuning._Q8_CANDIDATES + tuning._Q8C_CANDIDATES + tuning._Q8P_CANDIDATES
                         + tuning._Q8M_CANDIDATES)
def test_gpu_matvec_int8_activations_every_config(cfg: tuple) -> None:
    """W2A8 (dp4a) mat-vec at 8B shapes, batch 1..8, plain / fused norm / SwiGLU / residual."""
    n, k = 6144, 4096
    codes, scales = weight(n, k, seed=2)
    up_codes, up_scales = weight(n, k, seed=3)
    nw = torch.rand(k, device=DEV, dtype=torch.bfloat16) + 0.5
    gen = torch.Generator(device=DEV).manual_seed(7)
    for m in (1, 3, 8):
        x = torch.randn(m, k, device=DEV, dtype=torch.float32, generator=gen)
        xq = ref.ref_int8_activations(x)
        y = matvec.ternary_matvec(x, codes, scales, 128, config=cfg)
        # the kernel's x * (127 / amax) may round a value sitting on a .5 tie the other way than
        # torch's: one int8 step on a few of 4096 values is ~1e-4 relative (exact x differs by ~1e-2)
        assert rel(y, ref.ref_ternary_matmul(xq, codes, scales, 128)) < 5e-4
        assert torch.equal(y, matvec.ternary_matvec(x, codes, scales, 128, config=cfg))  # reproducible
        xb = x.to(torch.bfloat16)
        y = matvec.swiglu_matvec(xb, codes, scales, 128, up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                               config=cfg)
        e = ref.ref_swiglu_matvec(ref.ref_int8_activations(ref.ref_rmsnorm(xb, nw, 1e-6)),
                                  codes, scales, up_codes, up_scales, 128)
        assert rel(y, e) < TOL[torch.bfloat16]
        r = torch.randn(m, n, device=DEV, dtype=torch.bfloat16)
        e = ref.ref_ternary_matmul(ref.ref_int8_activations(xb), codes, scales, 128, residual=r.float())
        matvec.ternary_matvec(xb, codes, scales, 128, out=r, residual=r, config=cfg)
        assert rel(r, e) < TOL[torch.bfloat16]


@pytest.mark.parametrize("k", [5120, 6144, 17408, 9728])
@pytest.mark.parametrize("cfg", [c for c in tuning._Q8P_CANDIDATES + tuning._Q8M_CANDIDATES if c[2] == 0])
def test_gpu_matvec_q8p_whole_row_tails(cfg: tuple, k: int) -> None:
    """Persistent mat-vec, a whole row per step at the 27B widths (320 = 256 + 64, 384 = 256 + 128,
    1088 = 1024 + 64 words) and the 4B FFN (608 = 512 + 96 of a 128-word tail): SwiGLU + norm and
    residual at batch 1 and 3, bitwise reproducible."""
    n = 2000
    codes, scales = weight(n, k, seed=5)
    up_codes, up_scales = weight(n, k, seed=6)
    nw = torch.rand(k, device=DEV, dtype=torch.bfloat16) + 0.5
    for m in (1, 3):
        xb = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        y = matvec.swiglu_matvec(xb, codes, scales, 128, up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                               config=cfg)
        e = ref.ref_swiglu_matvec(ref.ref_int8_activations(ref.ref_rmsnorm(xb, nw, 1e-6)),
                                  codes, scales, up_codes, up_scales, 128)
        assert rel(y, e) < TOL[torch.bfloat16]
        assert torch.equal(y, matvec.swiglu_matvec(xb, codes, scales, 128, up_codes=up_codes, up_scales=up_scales,
                                                 norm_weight=nw, config=cfg))
        r = torch.randn(m, n, device=DEV, dtype=torch.bfloat16)
        e = ref.ref_ternary_matmul(ref.ref_int8_activations(xb), codes, scales, 128, residual=r.float())
        matvec.ternary_matvec(xb, codes, scales, 128, out=r, residual=r, config=cfg)
        assert rel(r, e) < TOL[torch.bfloat16]


@pytest.mark.parametrize("cfg", tuning._GEMV_CANDIDATES + tuning._DOT_CANDIDATES + tuning._XP_CANDIDATES
                         + tuning._X3_CANDIDATES)
def test_gpu_matvec_every_config_batch(cfg: tuple) -> None:
    """Every candidate launch config (incl. split-K with in-kernel reduction) at batch 1..16 (the batching step's
    largest default bucket)."""
    n, k = 6144, 4096
    codes, scales = weight(n, k, seed=1)
    for m in (1, 3, 8, 16):
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        y = matvec.ternary_matvec(x, codes, scales, 128, config=cfg)
        assert rel(y, ref.ref_ternary_matmul(x, codes, scales, 128)) < TOL[torch.bfloat16]
        y2 = matvec.ternary_matvec(x, codes, scales, 128, config=cfg)
        assert torch.equal(y, y2)  # split-K reduction order is fixed: bitwise reproducible


@pytest.mark.parametrize("g", [64, 256])
def test_gpu_matvec_group_sizes(g: int) -> None:
    codes, scales = weight(2048, 4096, g=g, seed=g)
    x = torch.randn(2, 4096, device=DEV, dtype=torch.bfloat16)
    assert rel(matvec.ternary_matvec(x, codes, scales, g), ref.ref_ternary_matmul(x, codes, scales, g)) < 1e-2


def test_gpu_matvec_t3_27b_shape() -> None:
    codes, scales = weight(6144, 5120, enc="t3", seed=3)
    x = torch.randn(1, 5120, device=DEV, dtype=torch.bfloat16)
    y = matvec.ternary_matvec(x, codes, scales, 128, "t3")
    assert rel(y, ref.ref_ternary_matmul(x, codes, scales, 128, "t3")) < 1e-2


def test_gpu_fused_norm_swiglu_residual_8b() -> None:
    dtype = torch.bfloat16
    x = torch.randn(1, 4096, device=DEV, dtype=dtype) * 3
    nw = (torch.randn(4096, device=DEV) * 0.1 + 1).to(dtype)
    qkv_c, qkv_s = weight(6144, 4096, seed=4)
    y = matvec.fused_rmsnorm_matvec(x, nw, 1e-6, qkv_c, qkv_s, 128)
    assert rel(y, ref.ref_fused_rmsnorm_matvec(x, nw, 1e-6, qkv_c, qkv_s, 128)) < 1e-2
    gu_c, gu_s = weight(2 * 12288, 4096, seed=5)
    y = matvec.swiglu_matvec(x, gu_c, gu_s, 128, norm_weight=nw)
    e = ref.ref_swiglu_matvec(x, gu_c[:12288], gu_s[:12288], gu_c[12288:], gu_s[12288:], 128, norm_weight=nw)
    assert rel(y, e) < 2e-2
    d_c, d_s = weight(4096, 12288, seed=6)
    h = torch.randn(1, 12288, device=DEV, dtype=dtype)
    resid = torch.randn(1, 4096, device=DEV, dtype=dtype)
    e = ref.ref_ternary_matmul(h, d_c, d_s, 128, residual=resid)
    matvec.ternary_matvec(h, d_c, d_s, 128, out=resid, residual=resid)
    assert rel(resid, e) < 1e-2


@pytest.mark.parametrize("path", ["mm", "dequant", None])
def test_gpu_prefill_paths(path: str | None) -> None:
    codes, scales = weight(4096, 4096, seed=7)
    x = torch.randn(512, 4096, device=DEV, dtype=torch.bfloat16)
    y = gemm.ternary_matmul(x, codes, scales, 128, prefill_path=path)
    assert rel(y, ref.ref_ternary_matmul(x, codes, scales, 128)) < 1e-2


def test_gpu_matvec_holds_no_dense_weight() -> None:
    """Peak memory of a decode mat-vec is the packed weight + tiny buffers, never an fp16 copy."""
    codes, scales = weight(151669, 4096, seed=8)
    x = torch.randn(1, 4096, device=DEV, dtype=torch.bfloat16)
    matvec.ternary_matvec(x, codes, scales, 128)  # tune/compile first
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    matvec.ternary_matvec(x, codes, scales, 128)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra < 0.02 * (codes.numel() + 2 * scales.numel())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_rmsnorm_residual(dtype: torch.dtype) -> None:
    x = torch.randn(8, 4096, device=DEV).to(dtype)
    r = torch.randn(8, 4096, device=DEV).to(dtype)
    w = (torch.randn(4096, device=DEV) * 0.1 + 1).to(dtype)
    e, h = ref.ref_add_rmsnorm(x, r, w, 1e-6)
    y = rmsnorm(x, w, 1e-6, residual=r)
    assert torch.equal(r, h) and rel(y, e) < TOL[dtype]


@pytest.mark.parametrize("dim,rot,hq,hkv,offset", [(128, 128, 32, 8, 0.0), (256, 64, 24, 4, 1.0)])
def test_gpu_qk_norm_rope_kv_write(dim: int, rot: int, hq: int, hkv: int, offset: float) -> None:
    from runtime.model.config import SYNTHETIC_CONFIGS
    from runtime.model.rope import RotaryTables
    cfg = SYNTHETIC_CONFIGS["bonsai-8b" if dim == 128 else "bonsai-27b"]
    tables = RotaryTables(cfg, 8192, DEV)
    assert tables.cos.shape[1] == rot
    dtype = torch.bfloat16
    t, start = 5, 4000
    q = torch.randn(t, hq, dim, device=DEV, dtype=dtype)
    k = torch.randn(t, hkv, dim, device=DEV, dtype=dtype)
    v = torch.randn(t, hkv, dim, device=DEV, dtype=dtype)
    qw = (torch.randn(dim, device=DEV) * 0.1 + (0 if offset else 1)).to(dtype)
    kw = (torch.randn(dim, device=DEV) * 0.1 + (0 if offset else 1)).to(dtype)
    kc = [torch.zeros(hkv, 8192, dim, device=DEV, dtype=dtype) for _ in range(4)]
    qo = qk_norm_rope_kv_write(q, k, v, qw, kw, tables.cos, tables.sin, torch.tensor([start], device=DEV),
                               kc[0], kc[1], 1e-6, weight_offset=offset)
    qe = ref.ref_qk_norm_rope_kv_write(q, k, v, qw, kw, tables.cos, tables.sin, start, kc[2], kc[3], 1e-6, offset)
    assert rel(qo, qe) < 1e-2 and rel(kc[0], kc[2]) < 1e-2 and torch.equal(kc[1], kc[3])


@pytest.mark.parametrize("hq,hkv,dim", [(32, 8, 128), (24, 4, 256), (16, 8, 128)])
@pytest.mark.parametrize("length", [1, 300, 4096, 30000])
@pytest.mark.parametrize("min_keys", [None, 256])
def test_gpu_decode_attention(hq: int, hkv: int, dim: int, length: int, min_keys: int | None) -> None:
    dtype = torch.bfloat16
    positions = 32768
    q = torch.randn(hq, dim, device=DEV, dtype=dtype)
    kc = torch.randn(hkv, positions, dim, device=DEV, dtype=dtype)
    vc = torch.randn(hkv, positions, dim, device=DEV, dtype=dtype)
    o = decode_attention(q, kc, vc, torch.tensor([length], device=DEV, dtype=torch.int32), dim ** -0.5,
                         min_split_keys=min_keys)
    assert rel(o, ref.ref_decode_attention(q, kc, vc, length, dim ** -0.5)) < 1e-2


@pytest.mark.parametrize("length", [1, 640, 4000])
def test_gpu_decode_attention_output_gate_rounds_like_eager(length: int) -> None:
    """The 27B's gated attention: the in-launch ``sigmoid(gate)`` product equals the eager
    ``attention * torch.sigmoid(gate)`` in bf16 bit for bit (gate = strided half of the q|gate rows)."""
    hq, hkv, dim = 24, 4, 256
    dtype = torch.bfloat16
    q = torch.randn(hq, dim, device=DEV, dtype=dtype)
    kc = torch.randn(hkv, 4096, dim, device=DEV, dtype=dtype)
    vc = torch.randn(hkv, 4096, dim, device=DEV, dtype=dtype)
    gate = torch.randn(hq, 2 * dim, device=DEV, dtype=dtype)[:, dim:]
    seq = torch.tensor([length], device=DEV, dtype=torch.int32)
    eager = decode_attention(q, kc, vc, seq, dim ** -0.5) * torch.sigmoid(gate)
    assert torch.equal(decode_attention(q, kc, vc, seq, dim ** -0.5, gate=gate), eager)


def test_gpu_decode_attention_int8_accuracy() -> None:
    hq, hkv, dim, length = 32, 8, 128, 4096
    q = torch.randn(hq, dim, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(length, hkv, dim, device=DEV)
    v = torch.randn(length, hkv, dim, device=DEV)
    kq, ks = ref.quantize_kv_int8(k)
    vq, vs = ref.quantize_kv_int8(v)
    args = (kq.transpose(0, 1).contiguous(), vq.transpose(0, 1).contiguous())
    o = decode_attention(q, *args, torch.tensor([length], device=DEV), dim ** -0.5,
                         k_scale=ks.t().contiguous(), v_scale=vs.t().contiguous())
    exact = ref.ref_decode_attention(q, k.transpose(0, 1), v.transpose(0, 1), length, dim ** -0.5)
    err = rel(o, exact)
    print(f"int8 KV relative attention-output error vs fp32 cache: {err:.4f}")
    assert err < 3e-2


def test_gpu_cuda_graph_decode_kernels() -> None:
    """mat-vec + rope/kv write + attention + sampling captured once, replayed at moving positions."""
    dtype = torch.bfloat16
    hq, hkv, dim, positions = 32, 8, 128, 2048
    codes, scales = weight(6144, 4096, seed=9)
    x = torch.randn(1, 4096, device=DEV, dtype=dtype)
    nw = torch.ones(4096, device=DEV, dtype=dtype)
    qn = torch.ones(dim, device=DEV, dtype=dtype)
    cos = torch.ones(positions, dim, device=DEV)
    sin = torch.zeros(positions, dim, device=DEV)
    kc = torch.zeros(hkv, positions, dim, device=DEV, dtype=dtype)
    vc = torch.zeros_like(kc)
    pos = torch.zeros(1, dtype=torch.int32, device=DEV)
    seq = torch.ones(1, dtype=torch.int32, device=DEV)
    lm_c, lm_s = weight(1000, 4096, seed=10)
    counts = torch.zeros(1000, dtype=torch.int32, device=DEV)
    seen = torch.zeros(1000, dtype=torch.bool, device=DEV)
    params = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], device=DEV)  # greedy, no penalties (runtime.sampling P_*)
    sampler = DecoderSampler(1000, DEV)
    tok = torch.zeros(1, dtype=torch.int64, device=DEV)
    tok_pos = torch.zeros(1, dtype=torch.int64, device=DEV)
    qkv = torch.empty(1, 6144, device=DEV, dtype=dtype)
    attn = torch.empty(hq, dim, device=DEV, dtype=dtype)

    def step() -> None:
        matvec.fused_rmsnorm_matvec(x, nw, 1e-6, codes, scales, 128, out=qkv)
        q = qkv[:, :4096].view(1, hq, dim)
        k = qkv[:, 4096:5120].view(1, hkv, dim)
        v = qkv[:, 5120:].view(1, hkv, dim)
        qr = qk_norm_rope_kv_write(q, k, v, qn, qn, cos, sin, pos, kc, vc, 1e-6)
        decode_attention(qr[0], kc, vc, seq, dim ** -0.5, out=attn)
        logits = matvec.ternary_matvec(attn.view(1, -1)[:, :4096], lm_c, lm_s, 128)
        sampler.greedy_step(logits, seen, counts, params, tok, tok_pos)
        pos.add_(1)
        seq.add_(1)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up: compile + tune outside capture
    torch.cuda.current_stream().wait_stream(s)
    kc.zero_()
    vc.zero_()
    pos.zero_()
    seq.fill_(1)
    counts.zero_()
    seen.zero_()
    tok_pos.zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    assert int(pos) == 5 and int(seq) == 6 and int(counts.sum()) == 5 and int(tok_pos) == 5
    # the cache rows 0..4 were written by five replays with the same k (x is constant)
    assert torch.equal(kc[:, 0], kc[:, 4]) and not torch.equal(kc[:, 4], kc[:, 5])


@pytest.mark.parametrize("hq,hkv,dim,length,int8,gated", [(32, 8, 128, 1, False, False), (32, 8, 128, 640, False, False),
                                                          (32, 8, 128, 4000, True, False), (24, 4, 256, 700, False, True),
                                                          (24, 4, 256, 4000, False, True)])
def test_gpu_decode_attention_merge_launch_writes_o_proj_planes(hq: int, hkv: int, dim: int, length: int,
                                                                int8: bool, gated: bool) -> None:
    """The 8B's and the 27B's decode attention with the split merge in its own launch (``q8_out``, the fused steps'
    default): the output equals the in-launch merge's bit for bit (same arithmetic, same order), the planes equal
    ``_quant_x_kernel``'s of that output, and the o_proj mat-vec given them equals the one that quantises —
    at one key, a short and a long live length, an int8 cache, the gated output; under PDL when the GPU has it."""
    import triton

    from tests.kernels.test_kernels_linear import make_weight

    dtype, positions = torch.bfloat16, 4096
    q = torch.randn(hq, dim, device=DEV, dtype=dtype)
    kw = dict(k_scale=None, v_scale=None)
    if int8:
        kc = torch.randint(-127, 128, (hkv, positions, dim), device=DEV, dtype=torch.int8)
        vc = torch.randint(-127, 128, (hkv, positions, dim), device=DEV, dtype=torch.int8)
        kw = dict(k_scale=torch.rand(hkv, positions, device=DEV) / 127, v_scale=torch.rand(hkv, positions, device=DEV) / 127)
    else:
        kc = torch.randn(hkv, positions, dim, device=DEV, dtype=dtype)
        vc = torch.randn(hkv, positions, dim, device=DEV, dtype=dtype)
    gate = torch.randn(hq, 2 * dim, device=DEV, dtype=dtype)[:, dim:] if gated else None
    pos = torch.tensor([length - 1], device=DEV)
    planes = torch.full((packing.Q8_PLANES * hq * dim // 16,), -7, dtype=torch.int32, device=DEV)
    o = decode_attention(q, kc, vc, pos, dim ** -0.5, gate=gate, len_offset=1, q8_out=planes, **kw)
    assert torch.equal(o, decode_attention(q, kc, vc, pos, dim ** -0.5, gate=gate, len_offset=1, **kw))
    x = o.reshape(1, -1)
    k = hq * dim
    expect = torch.empty_like(planes)
    packing._quant_x_kernel[(1, triton.cdiv(k // 16, 64))](x, x.stride(0), x, expect, k, k // 16, 1e-6, 0.0,
                                                         BLOCK_W=64, NORM=False, NORM_QWEN3=True, NORM_BLOCK=4096,
                                                         USE_GDC=False)
    assert torch.equal(planes, expect)
    codes, scales = make_weight(512, k, 128, "t2", seed=3)
    codes, scales = codes.to(DEV), scales.to(DEV)
    for cfg in [("q8p", 2, 0, 16, 1), ("q8", 4, 4096, 1, 2)]:
        plain = matvec.ternary_matvec(x, codes, scales, 128, config=cfg)
        assert torch.equal(matvec.ternary_matvec(x, codes, scales, 128, config=cfg, x_int8=planes), plain)


def test_gpu_batched_decode_kernels_equal_per_row() -> None:
    """Continuous batching at the 8B's shape in bf16: 8 rows in slots of a 17-slot cache (lengths 1..3000), the
    batched rope/KV write and attention (in-launch merge and ``q8_out`` merge launch) equal the unbatched kernels
    row by row on each slot's view, bit for bit, at the batched default split count and at 16; under PDL (with
    the L2 prefetch reading each row's slot and length) when the GPU has it."""
    import triton

    from runtime.kernels.triton.attention import _launch_defaults, default_num_splits

    hq, hkv, dim, positions, n_slots, dtype = 32, 8, 128, 4096, 17, torch.bfloat16
    slots = torch.tensor([16, 3, 0, 9, 4, 11, 7, 1], device=DEV, dtype=torch.int32)
    lengths = torch.tensor([3000, 1, 17, 640, 2049, 64, 1500, 2], device=DEV)
    b = slots.numel()
    gen = torch.Generator(device=DEV).manual_seed(11)
    kc = torch.randn(n_slots * hkv, positions, dim, device=DEV, dtype=dtype, generator=gen)
    vc = torch.randn(n_slots * hkv, positions, dim, device=DEV, dtype=dtype, generator=gen)
    cos = torch.randn(positions, dim, device=DEV, generator=gen)
    sin = torch.randn(positions, dim, device=DEV, generator=gen)
    q = torch.randn(b, hq, dim, device=DEV, dtype=dtype, generator=gen)
    k = torch.randn(b, hkv, dim, device=DEV, dtype=dtype, generator=gen)
    v = torch.randn(b, hkv, dim, device=DEV, dtype=dtype, generator=gen)
    nw = (torch.randn(dim, device=DEV, generator=gen) * 0.1 + 1).to(dtype)
    ref_kc, ref_vc = kc.clone(), vc.clone()
    pos = lengths - 1  # the step writes position len - 1, then attends over len keys (len_offset=1)
    qr = qk_norm_rope_kv_write(q, k, v, nw, nw, cos, sin, pos, kc, vc, 1e-6, slots=slots)
    for i, s in enumerate(slots.tolist()):
        h = slice(s * hkv, (s + 1) * hkv)
        one = qk_norm_rope_kv_write(q[i:i + 1], k[i:i + 1], v[i:i + 1], nw, nw, cos, sin, pos[i:i + 1],
                                    ref_kc[h], ref_vc[h], 1e-6)
        assert torch.equal(qr[i], one[0]), i
    assert torch.equal(kc, ref_kc) and torch.equal(vc, ref_vc)
    qf = qr.reshape(b * hq, dim)
    kw = hq * dim // 16
    x_planes = torch.full((b, packing.Q8_PLANES * kw), -7, dtype=torch.int32, device=DEV)
    block_s = _launch_defaults(dim)[0]
    for splits in (default_num_splits(b * hkv, positions, block_s), 16):
        args = dict(num_splits=splits, len_offset=1)
        o = decode_attention(qf, kc, vc, pos, dim ** -0.5, slots=slots, kv_heads=hkv, **args)
        od = decode_attention(qf, kc, vc, pos, dim ** -0.5, slots=slots, kv_heads=hkv, q8_out=x_planes, **args)
        assert torch.equal(o, od), splits
        for i, s in enumerate(slots.tolist()):
            h, rows = slice(s * hkv, (s + 1) * hkv), slice(i * hq, (i + 1) * hq)
            one = torch.full((packing.Q8_PLANES * kw,), -7, dtype=torch.int32, device=DEV)
            oi = decode_attention(qf[rows], kc[h], vc[h], pos[i:i + 1], dim ** -0.5, q8_out=one, **args)
            assert torch.equal(od[rows], oi) and torch.equal(x_planes[i], one), (splits, i)
            e = ref.ref_decode_attention(qf[rows], kc[h], vc[h], int(lengths[i]), dim ** -0.5)
            assert rel(od[rows], e) < 1e-2, (splits, i)
        x = od.reshape(b, -1)
        expect = torch.empty_like(x_planes)
        packing._quant_x_kernel[(b, triton.cdiv(kw, 64))](x, x.stride(0), x, expect, hq * dim, kw, 1e-6, 0.0,
                                                        BLOCK_W=64, NORM=False, NORM_QWEN3=True, NORM_BLOCK=4096,
                                                        USE_GDC=False)
        assert torch.equal(x_planes, expect), splits


@pytest.mark.parametrize("rows", [2, 5, 8, 16, 33, 64])
def test_gpu_batched_int8_matvec_rows_equal_one_row_at_a_time(rows: int) -> None:
    """The batched decode step's q8m mat-vec gives every row bit for bit what q8p (one row per program) gives it
    at the 8B's widths (K = 4096 and the 12288-wide down projection, a whole row plus a tail per step): plain,
    SwiGLU with the fused norm, residual. So a request's tokens do not depend on how many share its step."""
    gen = torch.Generator(device=DEV).manual_seed(rows)
    for n, k in ((4096, 4096), (4096, 12288)):
        codes, scales = weight(n, k, seed=k + 1)
        up_codes, up_scales = weight(n, k, seed=k + 2)
        nw = torch.rand(k, device=DEV, dtype=torch.bfloat16) + 0.5
        xb = torch.randn(rows, k, device=DEV, dtype=torch.bfloat16, generator=gen)
        for bn, per_sm, warps in ((4, 4, 2), (8, 4, 4)):
            batched, single = ("q8m", bn, 0, per_sm, warps), ("q8p", bn, 0, per_sm, warps)
            y = matvec.ternary_matvec(xb, codes, scales, 128, config=batched)
            assert torch.equal(y, matvec.ternary_matvec(xb, codes, scales, 128, config=single))
            y = matvec.swiglu_matvec(xb, codes, scales, 128, up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                                     config=batched)
            one = matvec.swiglu_matvec(xb, codes, scales, 128, up_codes=up_codes, up_scales=up_scales,
                                       norm_weight=nw, config=single)
            assert torch.equal(y, one)
            e = ref.ref_swiglu_matvec(ref.ref_int8_activations(ref.ref_rmsnorm(xb, nw, 1e-6)),
                                      codes, scales, up_codes, up_scales, 128)
            assert rel(y, e) < TOL[torch.bfloat16]
            r = torch.randn(rows, n, device=DEV, dtype=torch.bfloat16, generator=gen)
            r2 = r.clone()
            matvec.ternary_matvec(xb, codes, scales, 128, out=r, residual=r, config=batched)
            matvec.ternary_matvec(xb, codes, scales, 128, out=r2, residual=r2, config=single)
            assert torch.equal(r, r2)


def check_batched_int8_configs(rows: int, configs: list, shapes: tuple, seed: int) -> None:
    """Every config of a batched int8 mat-vec variant at ``rows`` rows of x, over ``shapes`` ((n, k), g): plain,
    SwiGLU with the fused norm, residual == the fp32 reference on the same int8 x, to bf16 output rounding; and ==
    q8p's rows to the float rounding of another summation order (all sum the same exact per-block integer dots)."""
    gen = torch.Generator(device=DEV).manual_seed(seed + rows)
    for (n, k), g in shapes:
        codes, scales = weight(n, k, g, seed=k + seed % 7)
        up_codes, up_scales = weight(n, k, g, seed=k + seed % 7 + 1)
        nw = torch.rand(k, device=DEV, dtype=torch.bfloat16) + 0.5
        xb = torch.randn(rows, k, device=DEV, dtype=torch.bfloat16, generator=gen)
        xq = ref.ref_int8_activations(xb)
        e = ref.ref_ternary_matmul(xq, codes, scales, g)
        per_row = matvec.ternary_matvec(xb, codes, scales, g, config=("q8p", 4, 0, 4, 2))
        for cfg in configs:
            y = matvec.ternary_matvec(xb, codes, scales, g, config=cfg)
            assert rel(y, e) < TOL[torch.bfloat16], cfg
            assert rel(y, per_row) < TOL[torch.bfloat16], cfg
            y = matvec.swiglu_matvec(xb, codes, scales, g, up_codes=up_codes, up_scales=up_scales, norm_weight=nw,
                                     config=cfg)
            es = ref.ref_swiglu_matvec(ref.ref_int8_activations(ref.ref_rmsnorm(xb, nw, 1e-6)),
                                       codes, scales, up_codes, up_scales, g)
            assert rel(y, es) < TOL[torch.bfloat16], cfg
            r = torch.randn(rows, n, device=DEV, dtype=torch.bfloat16, generator=gen)
            er = ref.ref_ternary_matmul(xq, codes, scales, g, residual=r)
            matvec.ternary_matvec(xb, codes, scales, g, out=r, residual=r, config=cfg)
            assert rel(r, er) < TOL[torch.bfloat16], cfg


@pytest.mark.parametrize("rows", [2, 7, 8, 9, 16])
def test_gpu_register_fed_int8_tensor_core_matvec(rows: int) -> None:
    """q8w (mma.sync fed from registers, the batched step's mat-vec at 2-16 rows) at the 8B's widths, every warp
    count of its table, group sizes 128 and 64, a row count that leaves the last 16-row tile partial
    (check_batched_int8_configs). A hardware lane that got another thread's fragments would make this fail (and
    the kernel poisons its output with NaN if its tensors are not laid out one element per thread)."""
    check_batched_int8_configs(rows, tuning._Q8W_CANDIDATES,
                               (((4096, 4096), 128), ((4096, 12288), 128), ((1000, 4096), 64)), 200)


@pytest.mark.parametrize("rows", [2, 8, 16, 33, 64])
def test_gpu_int8_tensor_core_matvec(rows: int) -> None:
    """q8t (int8 tensor cores, the batched step's mat-vec at 8-64 rows) at the 8B's widths (K = 4096, and the
    12288-wide down projection), every config of its table, group sizes 128 and 64 (check_batched_int8_configs)."""
    check_batched_int8_configs(rows, tuning._Q8T_CANDIDATES,
                               (((4096, 4096), 128), ((4096, 12288), 128), ((1536, 4096), 64)), 100)
