"""Synthetic Bonsai-shaped models: exact shapes, ternary codes, determinism, usable tokenizer."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from runtime.errors import UnsupportedModelError
from runtime.formats.codecs import codes_of
from runtime.formats.model_data import T3, DenseTensor, TernaryTensor
from runtime.model.config import SYNTHETIC_CONFIGS
from runtime.synthetic import (
    random_ternary,
    synthetic_config,
    synthetic_model,
    synthetic_tensors,
    synthetic_tokenizer,
    tensor_specs,
    to_encoding,
)


def _small_qwen3():
    cfg = synthetic_config("bonsai-1.7b")
    cfg.num_layers, cfg.vocab_size = 2, 1000
    return cfg


@pytest.mark.parametrize("name", ["bonsai-1.7b", "bonsai-4b", "bonsai-8b"])
def test_qwen3_specs_have_exact_bonsai_shapes(name: str) -> None:
    cfg = SYNTHETIC_CONFIGS[name]
    specs = {s.name: s for s in tensor_specs(cfg)}
    assert specs["model.embed_tokens.weight"].shape == (151_669, cfg.hidden_size)
    assert specs["model.layers.0.mlp.down_proj.weight"].shape == (cfg.hidden_size, cfg.intermediate_size)
    assert specs["model.layers.0.self_attn.k_proj.weight"].shape == (cfg.num_kv_heads * 128, cfg.hidden_size)
    assert f"model.layers.{cfg.num_layers - 1}.mlp.up_proj.weight" in specs
    assert ("lm_head.weight" in specs) == (not cfg.tie_word_embeddings)
    params = sum(torch.Size(s.shape).numel() for s in specs.values())
    expected = {"bonsai-1.7b": 1.72e9, "bonsai-4b": 4.02e9, "bonsai-8b": 8.19e9}[name]
    assert abs(params - expected) / expected < 0.01


def test_random_ternary_codes_and_scales() -> None:
    t = random_ternary("x", (512, 1024), seed=0)
    counts = torch.bincount(codes_of(t).flatten().long(), minlength=4)
    assert counts[3] == 0
    frac = counts[:3].double() / counts.sum()
    assert bool(((frac - 1 / 3).abs() < 0.01).all())  # ~1/3 zeros, ~1/3 each sign
    s = t.scales.float()
    assert 0.01 < s.min() and s.max() < 0.06


def test_synthetic_is_deterministic_and_order_independent() -> None:
    cfg = _small_qwen3()
    a = dict(synthetic_tensors(cfg, seed=7))
    b = dict(reversed(list(synthetic_tensors(cfg, seed=7))))
    c = dict(synthetic_tensors(cfg, seed=8))
    name = "model.layers.1.self_attn.q_proj.weight"
    for k, v in a.items():
        w = b[k]
        if isinstance(v, TernaryTensor):
            assert torch.equal(v.codes, w.codes) and torch.equal(v.scales, w.scales)
        else:
            assert isinstance(v, DenseTensor) and torch.equal(v.data, w.data)
    assert not torch.equal(a[name].codes, c[name].codes)
    # a tensor does not depend on the rest of the model
    alone = random_ternary(name, (2048, 2048), seed=7)
    assert torch.equal(alone.codes, a[name].codes)


def test_t3_encoding_holds_the_same_weights() -> None:
    cfg = _small_qwen3()
    t2 = dict(synthetic_tensors(cfg, seed=1))
    t3 = dict(synthetic_tensors(cfg, seed=1, encoding=T3))
    k = "model.layers.0.mlp.down_proj.weight"
    assert t3[k].encoding == T3
    assert torch.equal(codes_of(t3[k]), codes_of(t2[k]))
    assert torch.equal(to_encoding(t3[k], "t2").codes, t2[k].codes)


def test_synthetic_model_bonsai_17b() -> None:
    m = synthetic_model("bonsai-1.7b")
    cfg = m.config
    assert cfg.num_layers == 28 and cfg.tie_word_embeddings
    assert len(m.tensors) == 1 + 28 * 11 + 1
    assert m.tensors["model.embed_tokens.weight"].shape == (151_669, 2048)
    assert 0.45e9 < m.nbytes < 0.47e9  # 2-bit codes + fp16 g128 scales + fp32 norms


def test_unknown_synthetic_names_and_arches_are_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="unknown synthetic model"):
        synthetic_model("bonsai-3b")
    cfg = synthetic_config("bonsai-1.7b")
    cfg.arch = "mamba"
    with pytest.raises(UnsupportedModelError, match="no synthetic tensor list"):
        next(synthetic_tensors(cfg))


def test_synthetic_tokenizer_round_trips_any_text() -> None:
    td = synthetic_tokenizer()
    tok = Tokenizer.from_str(td.tokenizer_json)
    text = "Hello, wörld! 中文 😀 <|im_start|>user"
    enc = tok.encode(text)
    assert tok.token_to_id("<|im_start|>") in enc.ids
    assert tok.decode(enc.ids, skip_special_tokens=False) == text
    assert max(enc.ids) < 151_669 and td.eos_token_ids == [258, 256]
