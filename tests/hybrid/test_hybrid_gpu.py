"""CUDA paths of the hybrid: DeltaNet on CUDA (fla kernels when installed), tiny model GPU == CPU,
the GEMM rotation, and the fused layer path (Triton norms / residual matmuls / DeltaNet glue)."""

from __future__ import annotations

import pytest
import torch
from hybrid_helpers import build_tiny, hf_torch_path
from test_hybrid_hadamard import rotated_pair

from runtime.generation import GenerationSettings
from runtime.gpu_decode import StatefulGraphDecoder, graph_decoder_for
from runtime.model.qwen35 import deltanet
from runtime.model.qwen35.model import Qwen35Model

pytestmark = pytest.mark.gpu
PROMPT = torch.randint(0, 96, (80,), generator=torch.Generator().manual_seed(3))


def _inputs(t: int, dtype: torch.dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    h, hv, dk, dv = 4, 12, 128, 128
    q = torch.randn(t, h, dk, device="cuda", generator=g).to(dtype)
    k = torch.randn(t, h, dk, device="cuda", generator=g).to(dtype)
    v = torch.randn(t, hv, dv, device="cuda", generator=g).to(dtype)
    gate = -torch.rand(t, hv, device="cuda", generator=g) * 0.3
    beta = torch.rand(t, hv, device="cuda", generator=g).to(dtype)
    s0 = 0.1 * torch.randn(hv, dk, dv, device="cuda", generator=g)
    return q, k, v, gate, beta, s0


def test_hybrid_gpu_deltanet_matches_torch_reference():
    """fla kernels when installed (the default CUDA path), else the torch code on CUDA, vs fp32 torch."""
    use_fla = deltanet.fla_available()
    q, k, v, gate, beta, s0 = _inputs(300, torch.float32)
    s_ref, s_gpu = s0.clone(), s0.clone()
    o_ref = deltanet.gated_delta_rule_chunked(q, k, v, gate, beta, s_ref)
    o_gpu = deltanet.gated_delta_rule(q, k, v, gate, beta, s_gpu, use_fla=use_fla)
    scale = float(o_ref.abs().max())
    # Triton dot products on fp32 inputs may run as TF32: compare relative to the output scale
    assert (o_gpu - o_ref).abs().max().item() < 2e-2 * scale
    assert (s_gpu - s_ref).abs().max().item() < 2e-2 * float(s_ref.abs().max())
    s_ref, s_gpu = s0.clone(), s0.clone()
    o_ref = deltanet.gated_delta_rule_recurrent(q[:1], k[:1], v[:1], gate[:1], beta[:1], s_ref)
    o_gpu = deltanet.gated_delta_rule(q[:1], k[:1], v[:1], gate[:1], beta[:1], s_gpu, use_fla=use_fla)
    assert (o_gpu - o_ref).abs().max().item() < 1e-2 * float(o_ref.abs().max())


@pytest.mark.parametrize("name", ["gqa_2x", "gqa_3x"])
def test_hybrid_gpu_tiny_model_matches_cpu(name):
    _, data = build_tiny(name)
    with torch.no_grad():
        cpu = Qwen35Model.from_model_data(data, "cpu", max_positions=128, backend="reference")(
            PROMPT, torch.arange(80)).log_softmax(-1)
        gpu = Qwen35Model.from_model_data(data, "cuda", dtype=torch.float32, max_positions=128, backend="reference")(
            PROMPT.cuda(), torch.arange(80, device="cuda")).log_softmax(-1).cpu()
    # fp32 on CUDA does not use fla by default (its chunked kernels run TF32 dot products for fp32
    # inputs, ~0.05-0.09 here); the torch path with fp32 cuBLAS is exact fp32 like the CPU
    gpu_model = Qwen35Model.from_model_data(data, "cuda", dtype=torch.float32, max_positions=16, backend="reference")
    assert not gpu_model.uses_fla
    assert (cpu - gpu).abs().max().item() < 1e-3


def test_hybrid_gpu_rotation_matches_reference():
    hf, data = rotated_pair("gqa_2x", 32)
    m = Qwen35Model.from_model_data(data, "cuda", dtype=torch.float32, max_positions=64, backend="reference")
    assert m.rotation is not None and m.rotation.use_matmul
    with torch.no_grad(), hf_torch_path(hf):  # the CPU reference must not dispatch to fla's CUDA kernels
        ref = hf(PROMPT[None, :40]).logits[0].log_softmax(-1)
        ours = m(PROMPT[:40].cuda(), torch.arange(40, device="cuda")).log_softmax(-1).cpu()
    assert (ours - ref).abs().max().item() < 1e-3


def test_hybrid_fused_layer_path_matches_reference():
    """Triton RMSNorm, residual-fused matmuls, SwiGLU mat-vec and the DeltaNet glue kernels."""
    _, data = build_tiny("gqa_2x", group=32)
    ref = Qwen35Model.from_model_data(data, "cuda", dtype=torch.float32, max_positions=32, backend="reference",
                                      fused_kernels=False)
    fused = Qwen35Model.from_model_data(data, "cuda", dtype=torch.float32, max_positions=32, backend="triton",
                                        fused_kernels=True)
    assert fused.fused_kernels and fused.layers[0].swiglu is not None
    ids = torch.randint(0, 96, (6,), generator=torch.Generator().manual_seed(1)).to("cuda")
    pos = torch.arange(6, device="cuda")
    with torch.no_grad():
        assert (ref(ids, pos) - fused(ids, pos)).abs().max().item() < 1e-3
        for i in range(2):  # decode steps: conv_step + gates + gated norm kernels
            t, p = ids[i:i + 1], torch.tensor([6 + i], device="cuda")
            assert (ref(t, p, kv_len=7 + i) - fused(t, p, kv_len=7 + i)).abs().max().item() < 1e-3


def _eager_greedy(m: Qwen35Model, prompt: torch.Tensor, steps: int) -> list[int]:
    """``steps`` greedy tokens by the eager forward; the state ends having consumed ``steps - 1`` of
    them, as after GraphDecoder's first token + ``steps - 1`` decode steps."""
    n = len(prompt)
    with torch.no_grad():
        logits = m(prompt, torch.arange(n, device="cuda"), kv_len=n, last_only=True)
        out = [int(logits[-1].argmax())]
        for i in range(steps - 1):
            logits = m(torch.tensor([out[-1]], device="cuda"), torch.tensor([n + i], device="cuda"), kv_len=n + i + 1)
            out.append(int(logits[-1].argmax()))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hybrid_gpu_fused_step_in_cuda_graph(dtype):
    """The fused step captured in a CUDA graph (StatefulGraphDecoder) decodes like the eager forward.

    fp32: identical greedy tokens and state. bf16: the two paths round differently, so only the
    first step's logits are compared (relative error), and the graph must reproduce itself.
    """
    _, data = build_tiny("gqa_2x", group=32)
    ref = Qwen35Model.from_model_data(data, "cuda", dtype=dtype, max_positions=64, backend="triton")
    m = Qwen35Model.from_model_data(data, "cuda", dtype=dtype, max_positions=64, backend="triton")
    step = m.decode_step()
    assert step is not None
    prompt = PROMPT[:12].cuda()
    want = _eager_greedy(ref, prompt, 16)
    dec = graph_decoder_for(m, step, "cuda")
    assert isinstance(dec, StatefulGraphDecoder) and dec.use_graph
    runs = []
    for _ in range(2):  # first run captures (warm-up must not advance the state), second replays only
        dec.configure(GenerationSettings(temperature=0.0, max_new_tokens=16), prompt.tolist())
        with torch.no_grad():
            logits = m(prompt, torch.arange(12, device="cuda"), kv_len=12, last_only=True)
            first = dec.sample_first(logits[-1])
            runs.append([first] + list(dec.tokens(first, 12, 15)))
    assert dec.fallback_reason is None and dec.graph_replays >= 30
    assert runs[0] == runs[1]
    if dtype == torch.float32:
        assert runs[0] == want
        assert torch.allclose(ref.state.recurrent, m.state.recurrent, atol=1e-4)
    else:
        with torch.no_grad():
            m(prompt, torch.arange(12, device="cuda"), kv_len=12, last_only=True)
            ref(prompt, torch.arange(12, device="cuda"), kv_len=12, last_only=True)
            tok, pos = torch.tensor([want[0]], device="cuda"), torch.tensor([12], device="cuda")
            a, b = ref(tok, pos, kv_len=13)[-1], step(tok, pos)
        assert float((a - b).norm() / a.norm()) < 5e-2  # bench_ours's acceptance bound for a fused step


def test_hybrid_fused_graph_same_tokens_with_and_without_pdl():
    """Programmatic dependent launch (runtime/kernels/triton/pdl.py) lets each kernel of the captured step
    start during the previous one's tail; the DeltaNet, conv, attention and mat-vec kernels must all
    wait correctly, so the tokens (bf16, 24 steps) equal those of serial launches."""
    from runtime.kernels.triton import pdl

    _, data = build_tiny("gqa_2x", group=32)
    prompt = PROMPT[:12].cuda()
    runs = {}
    for flag in (False, True):
        pdl.set_enabled(flag)
        try:
            m = Qwen35Model.from_model_data(data, "cuda", dtype=torch.bfloat16, max_positions=64, backend="triton")
            step = m.decode_step()
            assert step is not None
            dec = graph_decoder_for(m, step, "cuda")
            dec.configure(GenerationSettings(temperature=0.0, max_new_tokens=24), prompt.tolist())
            with torch.no_grad():
                logits = m(prompt, torch.arange(12, device="cuda"), kv_len=12, last_only=True)
                first = dec.sample_first(logits[-1])
                runs[flag] = [first] + list(dec.tokens(first, 12, 23))
            assert dec.fallback_reason is None and dec.graph_replays >= 23
        finally:
            pdl.set_enabled(None)
    assert runs[True] == runs[False]
