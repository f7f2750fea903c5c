"""The JSON side of a Hugging Face export: config.json, generation_config.json and the tokenizer files.

Why a module of its own: these documents must be what ``transformers`` (and so vLLM and SGLang)
expects for a *plain* Qwen3 / Qwen3.5 / Llama checkpoint, field by field, with no custom code;
the tensors are written by :mod:`runtime.formats.export_hf`. RoPE of the dense models is written
with the long-standing ``rope_theta`` / ``rope_scaling`` keys, which transformers 4.x reads and
transformers 5 converts to ``rope_parameters``; Qwen3.5, which only transformers 5 runs, gets the
``rope_parameters`` block its own checkpoints carry.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import UnsupportedModelError
from runtime.formats.model_data import TokenizerData
from runtime.model.config import ModelConfig, RopeScaling

# ModelConfig.arch -> (config.json architectures[0], model_type)
HF_CLASSES: dict[str, tuple[str, str]] = {
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen35": ("Qwen3_5ForCausalLM", "qwen3_5_text"),
}
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MROPE_SECTION = [11, 11, 10]  # Qwen3.5's text sections (head_dim 256 x 0.25 rotary = 32 frequencies)


def _rope_scaling(rs: RopeScaling | None) -> dict[str, Any] | None:
    """``rope_scaling`` as transformers names the fields; defaults are left out."""
    if rs is None:
        return None
    d: dict[str, Any] = {"rope_type": rs.type, "factor": rs.factor}
    if rs.type == "yarn":
        if rs.original_max_position_embeddings:
            d["original_max_position_embeddings"] = rs.original_max_position_embeddings
        if rs.beta_fast != 32.0:
            d["beta_fast"] = rs.beta_fast
        if rs.beta_slow != 1.0:
            d["beta_slow"] = rs.beta_slow
        if rs.attention_factor is not None:
            d["attention_factor"] = rs.attention_factor
        if not rs.truncate:
            d["truncate"] = False
        if rs.mscale is not None:
            d["mscale"] = rs.mscale
        if rs.mscale_all_dim is not None:
            d["mscale_all_dim"] = rs.mscale_all_dim
    elif rs.type == "llama3":
        d.update(low_freq_factor=rs.low_freq_factor, high_freq_factor=rs.high_freq_factor,
                 original_max_position_embeddings=rs.original_max_position_embeddings)
    elif rs.type != "linear":
        raise UnsupportedModelError(f"RoPE scaling {rs.type!r} has no Hugging Face config equivalent here")
    return d


def _token_ids(tok: TokenizerData) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if tok.bos_token_id is not None:
        out["bos_token_id"] = tok.bos_token_id
    if tok.eos_token_ids:
        out["eos_token_id"] = tok.eos_token_ids[0] if len(tok.eos_token_ids) == 1 else list(tok.eos_token_ids)
    if tok.pad_token_id is not None:
        out["pad_token_id"] = tok.pad_token_id
    return out


def _layer_interval(types: list[str]) -> int | None:
    """``full_attention_interval`` when the layer kinds follow it exactly (every n-th is full)."""
    for n in range(1, len(types) + 1):
        if types == ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(len(types))]:
            return n
    return None


def hf_config(c: ModelConfig, tok: TokenizerData, dtype: str) -> dict[str, Any]:
    """``config.json`` of the plain transformers class for ``c`` (see :data:`HF_CLASSES`)."""
    if c.arch not in HF_CLASSES:
        raise UnsupportedModelError(f"export to Hugging Face is not implemented for architecture {c.arch!r} "
                                    f"(supported: {', '.join(HF_CLASSES)})")
    cls, model_type = HF_CLASSES[c.arch]
    d: dict[str, Any] = {
        "architectures": [cls], "model_type": model_type, "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "hidden_act": "silu",
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings, "attention_bias": False, "attention_dropout": 0.0,
        "initializer_range": 0.02, "use_cache": True,
    }
    if c.arch == "qwen35":
        if not c.attn_output_gate:
            raise UnsupportedModelError("transformers' Qwen3.5 always gates attention output; this model does not")
        if c.rope_scaling is not None:
            raise UnsupportedModelError("Qwen3.5 with RoPE scaling has no Hugging Face config equivalent here")
        types = list(c.layer_types or [])
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta,
                                "partial_rotary_factor": c.partial_rotary_factor}
        if int(c.head_dim * c.partial_rotary_factor) // 2 == sum(MROPE_SECTION):
            rope.update(mrope_section=list(MROPE_SECTION), mrope_interleaved=True)
        d.update(layer_types=types, partial_rotary_factor=c.partial_rotary_factor, rope_parameters=rope,
                 attn_output_gate=True, linear_conv_kernel_dim=c.linear_conv_kernel_dim,
                 linear_key_head_dim=c.linear_key_head_dim, linear_value_head_dim=c.linear_value_head_dim,
                 linear_num_key_heads=c.linear_num_key_heads, linear_num_value_heads=c.linear_num_value_heads)
        interval = _layer_interval(types)
        if interval is not None:
            d["full_attention_interval"] = interval
    else:
        d.update(rope_theta=c.rope_theta, rope_scaling=_rope_scaling(c.rope_scaling))
        if c.arch == "qwen3":
            d.update(use_sliding_window=False, sliding_window=None, max_window_layers=c.num_layers)
        else:
            d.update(mlp_bias=False, pretraining_tp=1)
    d.update(_token_ids(tok))
    d["torch_dtype"] = d["dtype"] = DTYPE_NAMES[dtype]  # transformers 4.x / 5 names
    return d


def generation_config(tok: TokenizerData, defaults: dict[str, Any], fallback: dict[str, Any]) -> dict[str, Any]:
    """``generation_config.json``: the file's sampling defaults, the family's (``fallback``) where it
    has none, so vLLM's ``--generation-config auto`` samples as Ternary Chat does."""
    g = _token_ids(tok)
    for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        value = defaults.get(key, fallback.get(key))
        if value is not None:
            g[key] = value
    for key in ("presence_penalty", "frequency_penalty"):  # OpenAI-style; only when the model sets them
        if defaults.get(key):
            g[key] = defaults[key]
    if isinstance(defaults.get("max_new_tokens"), int):
        g["max_new_tokens"] = defaults["max_new_tokens"]
    g["do_sample"] = bool(defaults.get("do_sample", True)) and float(g.get("temperature", 1.0)) > 0
    return g


def _token_text(doc: dict[str, Any], token_id: int | None) -> str | None:
    if token_id is None:
        return None
    for a in doc.get("added_tokens") or []:
        if a.get("id") == token_id and isinstance(a.get("content"), str):
            return a["content"]
    vocab = (doc.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        for text, i in vocab.items():
            if i == token_id:
                return text
    return None


def tokenizer_config(tok: TokenizerData, chat_template: str, max_length: int) -> dict[str, Any]:
    """``tokenizer_config.json`` for the exact ``tokenizer.json`` written beside it.

    ``PreTrainedTokenizerFast`` loads ``tokenizer.json`` as it is (a Qwen2 tokenizer class would
    rebuild the pre-tokenizer from its own defaults, which a GGUF-derived vocabulary may not match)."""
    doc = json.loads(tok.tokenizer_json)
    eos = _token_text(doc, tok.eos_token_ids[0]) if tok.eos_token_ids else None
    return {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": _token_text(doc, tok.bos_token_id),
        "eos_token": eos, "pad_token": _token_text(doc, tok.pad_token_id), "unk_token": None,
        "add_bos_token": tok.add_bos_token, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": max_length, "chat_template": chat_template,
    }
