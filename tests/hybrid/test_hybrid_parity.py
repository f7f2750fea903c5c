"""Our Qwen3.5 hybrid vs transformers' ``Qwen3_5ForCausalLM`` on identical tiny random weights (fp32 CPU)."""

from __future__ import annotations

import pytest
import torch
from hybrid_helpers import TINY_CONFIGS, hf_greedy, our_greedy

from runtime.model.qwen35 import deltanet
from runtime.model.qwen35.model import Qwen35Model, state_bytes
from runtime.synthetic import synthetic_config

PROMPT = torch.randint(0, 96, (80,), generator=torch.Generator().manual_seed(3))
STEPS = 32


def load(data) -> Qwen35Model:
    return Qwen35Model.from_model_data(data, max_positions=256, backend="reference")


@pytest.fixture(scope="module")
def hf_tokens(tiny_models) -> dict[str, list[int]]:
    return {n: hf_greedy(tiny_models[n][0], PROMPT[:12].tolist(), STEPS) for n in TINY_CONFIGS}


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_hybrid_prefill_logprobs_match_hf(tiny_models, name):
    hf, data = tiny_models[name]
    model = load(data)
    with torch.no_grad():
        ref = hf(PROMPT[None]).logits[0].log_softmax(-1)
        ours = model(PROMPT, torch.arange(len(PROMPT))).log_softmax(-1)
    # 80 tokens: the chunked DeltaNet path with a partial last chunk
    assert (ref - ours).abs().max().item() < 1e-3


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_hybrid_greedy_prefill_then_decode_matches_hf(tiny_models, hf_tokens, name):
    model = load(tiny_models[name][1])
    assert our_greedy(model, PROMPT[:12].tolist(), STEPS) == hf_tokens[name]


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_hybrid_greedy_token_by_token_matches_hf(tiny_models, hf_tokens, name):
    model = load(tiny_models[name][1])
    assert our_greedy(model, PROMPT[:12].tolist(), STEPS, token_by_token=True) == hf_tokens[name]


def test_hybrid_split_prefill_equals_one_pass(tiny_models):
    """A prompt processed in two calls (state carried over) gives the same logits as one call."""
    model = load(tiny_models["gqa_3x"][1])
    with torch.no_grad():
        whole = model(PROMPT, torch.arange(80))
        first = model(PROMPT[:50], torch.arange(50))
        second = model(PROMPT[50:], torch.arange(50, 80))
    assert (torch.cat([first, second]) - whole).abs().max().item() < 1e-4


def test_hybrid_position_zero_starts_a_new_sequence(tiny_models):
    model = load(tiny_models["gqa_2x"][1])
    with torch.no_grad():
        a = model(PROMPT[:20], torch.arange(20))
        model(PROMPT[20:30], torch.arange(20, 30))
        b = model(PROMPT[:20], torch.arange(20))  # same prompt again: state must not leak
    assert torch.equal(a, b)


def test_hybrid_chunked_rule_equals_recurrent():
    g = torch.Generator().manual_seed(0)
    t, h, hv, dk, dv = 150, 2, 6, 16, 24
    q, k = torch.randn(t, h, dk, generator=g), torch.randn(t, h, dk, generator=g)
    v = torch.randn(t, hv, dv, generator=g)
    gate = -torch.rand(t, hv, generator=g)
    beta = torch.rand(t, hv, generator=g)
    s0 = 0.1 * torch.randn(hv, dk, dv, generator=g)
    s1, s2 = s0.clone(), s0.clone()
    o1 = deltanet.gated_delta_rule_recurrent(q, k, v, gate, beta, s1)
    o2 = deltanet.gated_delta_rule_chunked(q, k, v, gate, beta, s2)
    assert (o1 - o2).abs().max().item() < 1e-4
    assert (s1 - s2).abs().max().item() < 1e-4


def test_hybrid_conv_state_continues_across_calls():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(9, 12, generator=g), torch.randn(12, 4, generator=g)
    s_all, s_step = torch.zeros(12, 3), torch.zeros(12, 3)
    whole = deltanet.causal_conv1d(x, s_all, w)
    steps = torch.cat([deltanet.causal_conv1d(x[i:i + 1], s_step, w) for i in range(9)])
    assert torch.allclose(whole, steps, atol=1e-6)
    assert torch.equal(s_all, s_step)
    ref = torch.nn.functional.silu(torch.nn.functional.conv1d(x.T[None], w[:, None], padding=3, groups=12)[0, :, :9].T)
    assert torch.allclose(whole, ref, atol=1e-6)


def test_hybrid_27b_state_and_kv_sizes():
    """The planner's numbers for the 27B: 64 KiB/token fp16 KV (16 of 64 layers) + ~144 MiB recurrent state."""
    cfg = synthetic_config("bonsai-27b")
    assert cfg.kv_layers == 16
    assert cfg.kv_bytes_per_token(2) == 65_536
    rec = 48 * 48 * 128 * 128 * 4
    conv = 48 * 3 * (2 * 16 * 128 + 48 * 128) * 2
    assert state_bytes(cfg, conv_dtype_bytes=2) == rec + conv
    assert rec == 144 * 2**20


class _Counting(torch.nn.Module):
    """Stands in for offload wrappers: forwards any call signature unchanged."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


class _FakePlacement:
    """The runtime.offload.Placement interface the model builder uses, all on the CPU."""

    def __init__(self, cpu_layer: int | None = None) -> None:
        self.finished, self.cpu_layer = False, cpu_layer

    def layer_device(self, i):
        return torch.device("meta" if i == self.cpu_layer else "cpu")

    def embedding_device(self):
        return torch.device("cpu")

    def lm_head_device(self):
        return torch.device("cpu")

    def wrap_layer(self, i, block):
        return _Counting(block)

    def wrap_embedding(self, embed):
        return embed

    def wrap_lm_head(self, head):
        return _Counting(head)

    def finish(self):
        self.finished = True


def test_hybrid_offload_placement_plumbing(tiny_models):
    from runtime.errors import UnsupportedModelError

    data = tiny_models["gqa_2x"][1]
    placement = _FakePlacement()
    wrapped = Qwen35Model.from_model_data(data, max_positions=64, backend="reference", placement=placement)
    plain = load(data)
    with torch.no_grad():
        assert torch.equal(wrapped(PROMPT[:20], torch.arange(20)), plain(PROMPT[:20], torch.arange(20)))
    assert placement.finished and all(layer.calls == 1 for layer in wrapped.layers)
    with pytest.raises(UnsupportedModelError, match="CPU"):
        Qwen35Model.from_model_data(data, max_positions=64, backend="reference", placement=_FakePlacement(1))
