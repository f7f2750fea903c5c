"""The engine on CUDA: same tokens as transformers in fp32 through the CUDA-graph decode loop,
sane behaviour in the default bf16 mode. Collected only on machines with a GPU (see conftest)."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.generation import CancelToken, DoneEvent, GenerationSettings
from tests.engine.conftest import build_tiny, hf_greedy

pytestmark = pytest.mark.gpu

PROMPT = "The quick brown fox jumps over the lazy dog. 你好"


@pytest.fixture(scope="module")
def pair():
    return build_tiny(seed=7, group_size=64, yarn=(4.0, 64))


def test_fp32_cuda_graph_decode_matches_transformers(pair):
    hf, data = pair
    eng = Engine.load(data, device="cuda", context_length=128, dtype=torch.float32)
    assert eng.graph_decode
    ids = eng.tokenizer.encode(PROMPT, add_special_tokens=True)
    with torch.inference_mode():
        out = eng.model(torch.tensor(ids, device="cuda"), torch.arange(len(ids), device="cuda"), kv_len=len(ids))
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0], -1)
    assert (torch.log_softmax(out, -1).cpu() - ref).abs().max().item() <= 1e-3
    eng.reset()
    done = list(eng.generate(PROMPT, GenerationSettings(temperature=0.0, max_new_tokens=32, ignore_eos=True)))[-1]
    assert done.stats.token_ids == hf_greedy(hf, ids, 32)
    assert eng._decoder.fallback_reason is None and eng._decoder.graph_replays > 0
    assert done.stats.peak_memory_bytes > 0 and done.stats.device.startswith("cuda")


def test_default_dtype_generates_and_cancels(pair):
    _, data = pair
    eng = Engine.load(data, device="cuda", context_length=256)
    done = list(eng.generate(PROMPT, GenerationSettings(max_new_tokens=40, ignore_eos=True, seed=1)))[-1]
    assert done.stats.generated_tokens == 40 and done.stats.decode_tok_s > 0
    again = list(eng.generate(PROMPT, GenerationSettings(max_new_tokens=40, ignore_eos=True, seed=1)))[-1]
    assert again.stats.token_ids == done.stats.token_ids  # same seed, same tokens
    cancel = CancelToken()
    n = 0
    last = None
    for ev in eng.generate(PROMPT, GenerationSettings(max_new_tokens=200, ignore_eos=True), cancel=cancel):
        n += 1
        if n == 5:
            cancel.cancel()
        last = ev
    assert isinstance(last, DoneEvent) and last.stats.finish_reason == "cancelled"
    assert last.stats.generated_tokens < 200
    mem = eng.memory_stats()
    assert mem.device_allocated_bytes and mem.device_total_bytes and mem.kv_cache_bytes > 0


def test_uncapped_load_lifts_an_earlier_cap(pair):
    """--max-vram caps torch's allocator for the whole process; loading again without a cap (the
    user cleared the setting) must not stay confined to the old cap."""
    _, data = pair
    try:
        Engine.load(data, device="cuda", context_length=128, max_vram_bytes=1 << 30).close()
        eng = Engine.load(data, device="cuda", context_length=128)
        x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # well above the old 1 GiB cap
        del x
        eng.close()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


def test_closing_the_engine_gives_its_gpu_memory_back(pair):
    """The app loads and closes models for as long as it runs: after the first load (which leaves
    the process-wide cuBLAS workspaces and the shared warm-up stream behind) a load-generate-close
    cycle must not keep any GPU memory. A fresh warm-up stream per graph capture used to leave a
    32 MiB cuBLAS workspace behind with every load."""
    _, data = pair
    settings = GenerationSettings(temperature=0.0, max_new_tokens=8, ignore_eos=True)
    after_close = []
    for _ in range(3):
        eng = Engine.load(data, device="cuda", context_length=128)
        list(eng.generate(PROMPT, settings))
        eng.close()
        del eng
        after_close.append(torch.cuda.memory_allocated())
    assert after_close[2] - after_close[0] <= 1 << 20, [f"{b / 2**20:.1f} MiB" for b in after_close]
