"""The Qwen3 forward pass equals transformers' Qwen3ForCausalLM on the same ternary weights."""

from __future__ import annotations

import pytest
import torch

from runtime import engine as engine_mod
from runtime.engine import Engine
from runtime.generation import GenerationSettings
from runtime.model.qwen3 import Qwen3Model
from tests.engine.conftest import build_tiny, hf_greedy

# (name, overrides): tied/untied, GQA ratio 1/2/4, head_dim 64/128, YaRN on/off; vocab 300 is not a
# multiple of 128 in all of them.
CONFIGS = [
    ("untied-gqa2-hd64", {}),
    ("tied-gqa1-hd64-yarn", {"tie": True, "num_key_value_heads": 4, "yarn": (4.0, 64)}),
    ("untied-gqa4-hd128-yarn", {"num_key_value_heads": 1, "head_dim": 128, "yarn": (2.0, 128)}),
    ("tied-gqa2-hd128", {"tie": True, "head_dim": 128, "vocab_size": 333}),
]

PROMPT_LEN = 48


PROMPT = "The quick brown fox jumps over the lazy dog. 你好"


@pytest.fixture(scope="module", params=CONFIGS, ids=[c[0] for c in CONFIGS])
def pair(request):
    name, overrides = request.param
    return build_tiny(seed=7, group_size=64 if "hd64" in name else 128, **overrides)


@pytest.fixture(scope="module")
def greedy_reference(pair):
    """(prompt ids, transformers' 32 greedy tokens) for PROMPT, computed once per config."""
    engine = Engine.load(pair[1], device="cpu", context_length=128)
    ids = engine.tokenizer.encode(PROMPT, add_special_tokens=True)
    return ids, hf_greedy(pair[0], ids, 32)


def _prompt(vocab: int, n: int = PROMPT_LEN, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def test_yarn_configs_really_use_yarn(pair):
    hf, data = pair
    rotary = hf.model.rotary_emb
    if data.config.rope_scaling is not None:
        assert rotary.rope_type == "yarn" and rotary.attention_scaling > 1.0
    else:
        assert rotary.rope_type == "default"


def test_logprobs_match_transformers_prefill_and_stepwise(pair):
    hf, data = pair
    ids = _prompt(data.config.vocab_size)
    model = Qwen3Model.from_model_data(data, "cpu", max_positions=128)
    with torch.no_grad():
        ref = torch.log_softmax(hf(ids[None]).logits[0].float(), -1)
        prefill = torch.log_softmax(model(ids, torch.arange(len(ids)), kv_len=len(ids)), -1)
        assert (prefill - ref).abs().max().item() <= 1e-3
        model.setup_cache(128)
        steps = [model(ids[i:i + 1], torch.tensor([i]), kv_len=i + 1) for i in range(len(ids))]
        stepwise = torch.log_softmax(torch.cat(steps), -1)
        assert (stepwise - ref).abs().max().item() <= 1e-3
        # static-shape path (no kv_len): attends over the whole cache with a mask
        model.setup_cache(128)
        half = len(ids) // 2
        first = model(ids[:half], torch.arange(half))
        rest = [model(ids[i:i + 1], torch.tensor([i])) for i in range(half, len(ids))]
        static = torch.log_softmax(torch.cat([first, *rest]), -1)
        assert (static - ref).abs().max().item() <= 1e-3


def test_different_weights_are_detected(pair):
    """Guard against a vacuous comparison: a perturbed model must not match."""
    hf, data = pair
    ids = _prompt(data.config.vocab_size)
    model = Qwen3Model.from_model_data(data, "cpu", max_positions=128)
    model.layers[0].input_norm = model.layers[0].input_norm * 1.5  # not in place: shared with data
    with torch.no_grad():
        ref = torch.log_softmax(hf(ids[None]).logits[0], -1)
        out = torch.log_softmax(model(ids, torch.arange(len(ids)), kv_len=len(ids)), -1)
    assert (out - ref).abs().max().item() > 1e-2


@pytest.mark.parametrize("prefill_chunk", [512, 5])
def test_engine_greedy_matches_transformers_32_steps(pair, greedy_reference, prefill_chunk, monkeypatch):
    """Batched prefill (one chunk, or chunks of 5 tokens) then incremental decode."""
    monkeypatch.setattr(engine_mod, "PREFILL_CHUNK", prefill_chunk)
    engine = Engine.load(pair[1], device="cpu", context_length=128)
    ids, expected = greedy_reference
    settings = GenerationSettings(temperature=0.0, max_new_tokens=32, ignore_eos=True)
    done = list(engine.generate(PROMPT, settings))[-1]
    assert done.stats.token_ids == expected
    assert done.stats.finish_reason == "length"
    assert done.stats.prompt_tokens == len(ids)


def test_token_by_token_greedy_matches_transformers(pair, greedy_reference):
    """Feed the prompt one token at a time (no batched prefill), then decode 32 greedy steps."""
    ids, expected = greedy_reference
    model = Qwen3Model.from_model_data(pair[1], "cpu", max_positions=128)
    got = []
    with torch.no_grad():
        seq = list(ids)
        for i, tok in enumerate(seq):
            logits = model(torch.tensor([tok]), torch.tensor([i]), kv_len=i + 1)
        for _ in range(32):
            nxt = int(torch.argmax(logits[-1]))
            got.append(nxt)
            pos = len(seq)
            seq.append(nxt)
            logits = model(torch.tensor([nxt]), torch.tensor([pos]), kv_len=pos + 1)
    assert got == expected


def test_engine_prefills_in_the_plans_chunk(pair, greedy_reference, monkeypatch):
    """A plan made for a tight VRAM budget carries a smaller prompt chunk; the engine honours it
    (never above PREFILL_CHUNK) and still decodes exactly what transformers decodes."""
    engine = Engine.load(pair[1], device="cpu", context_length=128)
    engine.info.plan["prefill_chunk"] = 4
    seen: list[int] = []
    forward = engine._forward

    def spy(tokens, start):
        seen.append(len(tokens))
        return forward(tokens, start)

    monkeypatch.setattr(engine, "_forward", spy)
    ids, expected = greedy_reference
    done = list(engine.generate(PROMPT, GenerationSettings(temperature=0.0, max_new_tokens=32, ignore_eos=True)))[-1]
    assert done.stats.token_ids == expected
    n = -(-len(ids) // 4)  # prefill forwards come first, then one per decoded token
    assert len(ids) > 4 and seen[:n] == [4] * (n - 1) + [len(ids) - 4 * (n - 1)]
    engine.info.plan["prefill_chunk"] = 10_000
    assert engine._prefill_chunk() == engine_mod.PREFILL_CHUNK
