"""The model on CUDA through the CUDA-graph decoder: same greedy tokens as the CPU path, logits
close to ``transformers``, offload that does not change the output, and a VRAM cap that bites."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder, enforce_max_vram
from runtime.model.qwen3 import Qwen3Model
from runtime.offload import LayerStreamer
from tests import model_factory as mf

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
PROMPT = [5, 17, 250, 3, 99, 42, 7, 120, 33, 64, 8, 200]
GEN = 24


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def tiny():
    cfg = mf.tiny_qwen3_config(num_hidden_layers=4, yarn=(4.0, 128))
    hf = mf.make_ternary_hf_model(cfg, seed=3)
    md = mf.hf_model_to_model_data(hf, mf.tiny_tokenizer())
    return hf, md


def greedy_eager(model: Qwen3Model, device: torch.device, n: int = GEN) -> list[int]:
    ids = torch.tensor(PROMPT, device=device)
    with torch.inference_mode():
        logits = model.forward(ids, torch.arange(len(PROMPT), device=device), last_only=True)[-1]
        out = []
        pos = len(PROMPT)
        for _ in range(n):
            tok = int(torch.argmax(logits))
            out.append(tok)
            logits = model.forward(torch.tensor([tok], device=device), torch.tensor([pos], device=device),
                                   kv_len=pos + 1)[-1]
            pos += 1
    return out


def greedy_graph(model: Qwen3Model, n: int = GEN, settings: GenerationSettings | None = None,
                 fused: bool = False) -> tuple[list[int], GraphDecoder]:
    ids = torch.tensor(PROMPT, device=DEV)
    step = model.decode_step() if fused else (lambda t, p: model.forward(t, p)[-1])
    assert step is not None
    dec = GraphDecoder(step, model.vocab_size, DEV)
    with torch.inference_mode():
        dec.configure(settings or GenerationSettings(temperature=0.0), PROMPT)
        first = dec.sample_first(model.forward(ids, torch.arange(len(PROMPT), device=DEV), last_only=True)[-1])
        return [first] + list(dec.tokens(first, len(PROMPT), n - 1)), dec


def test_graph_decode_matches_cpu_greedy(tiny):
    _, md = tiny
    cpu = greedy_eager(Qwen3Model.from_model_data(md, "cpu", dtype=torch.float32, max_positions=128), torch.device("cpu"))
    gpu_model = Qwen3Model.from_model_data(md, DEV, dtype=torch.float32, max_positions=128)
    eager = greedy_eager(gpu_model, DEV)
    graph, dec = greedy_graph(gpu_model)
    assert dec.use_graph and dec.graph_replays == GEN - 1, dec.fallback_reason
    fused, dec = greedy_graph(gpu_model, fused=True)
    assert dec.use_graph and dec.graph_replays == GEN - 1, dec.fallback_reason
    assert eager == cpu
    assert graph == cpu
    assert fused == cpu


# bf16: both sides use int8 decode activations (one scale per 32 values), quantised from differently rounded
# inputs (the fused step normalises in fp32 inside the quantiser, forward() rounds the norm's output to bf16)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_fused_step_matches_engine_forward(tiny, dtype, tol):
    _, md = tiny
    a = Qwen3Model.from_model_data(md, DEV, dtype=dtype, max_positions=128)
    b = Qwen3Model.from_model_data(md, DEV, dtype=dtype, max_positions=128)
    ids = torch.tensor(PROMPT, device=DEV)
    with torch.inference_mode():
        for m in (a, b):
            m.forward(ids, torch.arange(len(PROMPT), device=DEV), kv_len=len(PROMPT))
        step = a.decode_step()
        assert step is not None
        for i, tok in enumerate([7, 250, 3]):
            t, p = torch.tensor([tok], device=DEV), torch.tensor([len(PROMPT) + i], device=DEV)
            got, want = step(t, p), b.forward(t, p)[-1]
            assert rel(got, want) < tol, (i, rel(got, want))
        torch.testing.assert_close(a.cache.k[:, :, : len(PROMPT) + 3].float(), b.cache.k[:, :, : len(PROMPT) + 3].float(),
                                   atol=tol * 10, rtol=tol * 10)


def test_gpu_logits_match_transformers(tiny):
    hf, md = tiny
    ids = torch.tensor([PROMPT], device=DEV)
    hf32 = hf.to(DEV).float().eval()
    with torch.inference_mode():
        want = hf32(input_ids=ids).logits[0]
        for dtype, tol in ((torch.float32, 1e-3), (torch.bfloat16, 3e-2)):
            model = Qwen3Model.from_model_data(md, DEV, dtype=dtype, max_positions=128)
            got = model.forward(ids[0], torch.arange(len(PROMPT), device=DEV))
            assert rel(got, want) < tol, (dtype, rel(got, want))
    hf.to("cpu")


def test_streamed_offload_in_graph_gives_identical_tokens(tiny):
    _, md = tiny
    ref, _ = greedy_graph(Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128))
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128)
    streamer = LayerStreamer(DEV)
    for i in (1, 2, 3):
        model.layers[i] = streamer.adopt(model.layers[i])
    streamer.finish()
    assert len(streamer.slots) == 2 and not streamer.resident
    got, dec = greedy_graph(model)
    assert dec.use_graph, dec.fallback_reason
    assert got == ref
    fused_ref, _ = greedy_graph(Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128), fused=True)
    fused_got, dec = greedy_graph(model, fused=True)
    assert dec.use_graph, dec.fallback_reason
    assert fused_got == fused_ref


def test_sampling_in_graph_is_seeded_and_valid(tiny):
    _, md = tiny
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128)
    s = GenerationSettings(temperature=0.8, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.1, seed=7)
    a, _ = greedy_graph(model, settings=s)
    b, _ = greedy_graph(model, settings=s)
    c, _ = greedy_graph(model, settings=GenerationSettings(temperature=0.8, top_k=20, top_p=0.9, seed=8))
    assert a == b and a != c
    assert all(0 <= t < model.vocab_size for t in a)


def test_max_vram_cap_is_enforced():
    torch.cuda.empty_cache()
    try:
        enforce_max_vram(1 << 30, DEV, context_bytes=0)
        x = torch.empty(512 << 20, dtype=torch.uint8, device=DEV)  # fits under 1 GiB
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
        del x
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, DEV)
        torch.cuda.empty_cache()
