"""Engine test fixtures: tiny exactly-ternary Qwen3 models as ``transformers`` model + ModelData.

The ModelData is built here directly from the HF state dict with ``codecs.quantize_ternary``
(strict), so engine tests do not depend on any file reader; the format tests in
``test_engine_formats.py`` go through the real readers.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runtime.formats.codecs import quantize_ternary
from runtime.formats.model_data import DenseTensor, ModelData, Provenance, TokenizerData
from runtime.model.config import ModelConfig, RopeScaling
from tests import model_factory as mf


def model_config_from_hf(cfg: Any) -> ModelConfig:
    """Our ModelConfig from a ``transformers.Qwen3Config`` (the fields the engine reads)."""
    rp = dict(cfg.rope_parameters or {})
    rs = None
    if rp.get("rope_type", "default") != "default":
        rs = RopeScaling(type=rp["rope_type"], factor=float(rp.get("factor") or 1.0),
                         original_max_position_embeddings=int(rp.get("original_max_position_embeddings") or 0),
                         beta_fast=float(rp.get("beta_fast") or 32.0), beta_slow=float(rp.get("beta_slow") or 1.0),
                         attention_factor=rp.get("attention_factor"), truncate=bool(rp.get("truncate", True)))
    return ModelConfig(
        arch="qwen3", vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps, rope_theta=float(rp.get("rope_theta", 10000.0)), rope_scaling=rs,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
    )


def tokenizer_data(chat_template: str | None = None) -> TokenizerData:
    tok = mf.tiny_tokenizer()
    return TokenizerData(
        tokenizer_json=tok.to_str(), bos_token_id=None,
        eos_token_ids=[mf.TOKEN_IDS["<|im_end|>"], mf.TOKEN_IDS["<|endoftext|>"]],
        pad_token_id=mf.TOKEN_IDS["<|endoftext|>"], add_bos_token=False,
        chat_template=chat_template if chat_template is not None else mf.QWEN3_CHAT_TEMPLATE,
    )


def model_data_from_hf(model: Any, group_size: int = 128, chat_template: str | None = None,
                       generation_defaults: dict | None = None) -> ModelData:
    cfg = model.config
    tensors: dict = {}
    for name, p in model.state_dict().items():
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        if p.ndim == 2 and "norm" not in name:
            tensors[name] = quantize_ternary(p.detach(), group_size)[0]
        else:
            tensors[name] = DenseTensor(p.detach().clone())
    return ModelData(
        config=model_config_from_hf(cfg), tensors=tensors, tokenizer=tokenizer_data(chat_template),
        generation_defaults=dict(mf.GENERATION_DEFAULTS if generation_defaults is None else generation_defaults),
        provenance=Provenance(source_name="tiny", source_format="test-memory"), name="tiny-qwen3",
    )


def build_tiny(seed: int = 0, group_size: int = 128, **overrides: Any) -> tuple[Any, ModelData]:
    """(HF Qwen3ForCausalLM in fp32, ModelData with the same exactly-ternary weights)."""
    hf_cfg = mf.tiny_qwen3_config(**overrides)
    model = mf.make_ternary_hf_model(hf_cfg, seed=seed, group_size=group_size)
    return model, model_data_from_hf(model, group_size)


@pytest.fixture(scope="session")
def tiny_pair() -> tuple[Any, ModelData]:
    """The default tiny model (untied, GQA 2, head_dim 64, no YaRN)."""
    return build_tiny(seed=1)


@pytest.fixture(scope="session")
def tiny_engine(tiny_pair):
    from runtime.engine import Engine

    return Engine.load(tiny_pair[1], device="cpu", context_length=256)


def hf_greedy(model: Any, ids: list[int], steps: int) -> list[int]:
    """Reference greedy decoding with transformers' own KV cache; EOS is not special."""
    out = []
    with torch.no_grad():
        res = model(torch.tensor([ids]), use_cache=True)
        for _ in range(steps):
            nxt = int(torch.argmax(res.logits[0, -1]))
            out.append(nxt)
            res = model(torch.tensor([[nxt]]), past_key_values=res.past_key_values, use_cache=True)
    return out


# GPU tests are collected only where CUDA exists (CI runs `-m "not gpu"` on CPUs): nothing skips.
collect_ignore_glob = [] if torch.cuda.is_available() else ["test_engine_gpu.py"]
