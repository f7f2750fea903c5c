"""Qwen3.5-family hybrid (GGUF arch ``qwen35``): tensor names, value conventions and metadata.

Why a module: llama.cpp's converter does more than rename for this architecture, and each
difference silently breaks the model if missed. Canonical tensors in :class:`ModelData` use
Hugging Face ``Qwen3_5ForCausalLM`` names **and HF layouts**; a GGUF differs as follows (from
llama.cpp ``convert_hf_to_gguf.py`` classes ``Qwen3NextModel`` and ``_LinearAttentionVReorderBase``):

* RMSNorm weights have ``+1`` folded in (HF stores ``w`` and computes ``x * (1 + w)``), except the
  DeltaNet gated norm ``linear_attn.norm`` which is plain ``w * x`` in both. We keep values as
  stored and record the convention in ``ModelConfig.norm_weight_offset`` (1.0 for HF, 0.0 for
  GGUF), so a GGUF -> .ternary -> GGUF round trip is bit-exact.
* ``ssm_a`` stores ``-exp(A_log)``: kept as stored under the canonical name
  ``model.layers.N.linear_attn.A`` (HF sources keep ``linear_attn.A_log``). The model accepts
  either.
* ``ssm_dt.bias`` is HF ``linear_attn.dt_bias``; ``ssm_conv1d`` is the conv weight squeezed to
  ``[channels, kernel]`` (HF ``[channels, 1, kernel]``).
* When key heads != value heads, llama.cpp reorders V heads from HF's *grouped* order
  ``[k0v0, k0v1, .., k1v0, ..]`` to *tiled* order ``[k0v0, k1v0, .., k0v1, ..]`` in the V rows of
  ``attn_qkv``, the rows of ``attn_gate`` (z), ``ssm_beta``/``ssm_alpha``, ``ssm_a``, ``ssm_dt``, the
  V channels of ``ssm_conv1d`` and the input columns of ``ssm_out``. We undo it at load (a lossless
  permutation). Exception: in a Hadamard-rotated file with ``gdn_v_grouped`` the folded
  ``ssm_out`` already takes grouped input and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from runtime.errors import ModelFormatError, UnsupportedModelError
from runtime.formats import codecs
from runtime.formats.model_data import DenseTensor, Tensor, TernaryTensor
from runtime.model.config import HadamardConfig, ModelConfig

ARCH = "qwen35"

# (GGUF suffix, canonical suffix) for per-layer tensors
_LAYER_NAMES: list[tuple[str, str]] = [
    ("attn_norm.weight", "input_layernorm.weight"),
    ("post_attention_norm.weight", "post_attention_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("attn_qkv.weight", "linear_attn.in_proj_qkv.weight"),
    ("attn_gate.weight", "linear_attn.in_proj_z.weight"),
    ("ssm_beta.weight", "linear_attn.in_proj_b.weight"),
    ("ssm_alpha.weight", "linear_attn.in_proj_a.weight"),
    ("ssm_conv1d.weight", "linear_attn.conv1d.weight"),
    ("ssm_dt.bias", "linear_attn.dt_bias"),
    ("ssm_a", "linear_attn.A"),
    ("ssm_norm.weight", "linear_attn.norm.weight"),
    ("ssm_out.weight", "linear_attn.out_proj.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
]
_GLOBAL_NAMES: list[tuple[str, str]] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
]
_G2C_LAYER = dict(_LAYER_NAMES)
_C2G_LAYER = {c: g for g, c in _LAYER_NAMES}
_C2G_LAYER["linear_attn.A_log"] = "ssm_a"  # written as -exp(A_log)
_G2C_GLOBAL = dict(_GLOBAL_NAMES)
_C2G_GLOBAL = {c: g for g, c in _GLOBAL_NAMES}
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def gguf_name_to_canonical(name: str, num_layers: int | None = None) -> str | None:
    """Canonical name of a GGUF tensor; ``None`` for tensors the text model does not use
    (MTP ``blk.{n_layers}.nextn.*`` layers). Unknown names raise: silently dropping a tensor
    would hide a converter mismatch."""
    if name in _G2C_GLOBAL:
        return _G2C_GLOBAL[name]
    m = _BLK.match(name)
    if m:
        bid, rest = int(m.group(1)), m.group(2)
        if num_layers is not None and bid >= num_layers:
            return None  # MTP head grafted as extra blocks
        if rest in _G2C_LAYER:
            return f"model.layers.{bid}.{_G2C_LAYER[rest]}"
        if rest.startswith("nextn."):
            return None
    raise ModelFormatError(f"unknown tensor {name!r} in a qwen35 GGUF")


def canonical_name_to_gguf(name: str) -> str:
    if name in _C2G_GLOBAL:
        return _C2G_GLOBAL[name]
    m = _LAYER.match(name)
    if m and m.group(2) in _C2G_LAYER:
        return f"blk.{m.group(1)}.{_C2G_LAYER[m.group(2)]}"
    raise ModelFormatError(f"tensor {name!r} has no qwen35 GGUF name")


def hf_name_to_canonical(name: str) -> str | None:
    """Names in HF / MLX Qwen3.5 checkpoints -> canonical; ``None`` for vision tower and MTP head.

    ``Qwen3_5ForConditionalGeneration`` stores ``model.language_model.*``; MLX packs use
    ``language_model.model.*``; ``Qwen3_5ForCausalLM`` already uses canonical names.
    """
    if name.startswith(("model.visual.", "visual.", "mtp.", "model.mtp.", "vision_tower.", "model.vision_tower.")):
        return None
    for prefix, repl in (("model.language_model.", "model."), ("language_model.model.", "model."),
                         ("language_model.lm_head.", "lm_head.")):
        if name.startswith(prefix):
            return repl + name[len(prefix):]
    return name


def canonical_weight_name(name: str, num_layers: int | None = None) -> str | None:
    """A name from ``prism.hadamard.weight_names`` (GGUF, HF or MLX style) -> canonical."""
    if name.startswith("blk.") or name in _G2C_GLOBAL:
        return gguf_name_to_canonical(name, num_layers)
    return hf_name_to_canonical(name)


# ------------------------------------------------------------------------------------------
# V-head order (grouped <-> tiled)
# ------------------------------------------------------------------------------------------

def v_head_permutation(num_k_heads: int, num_v_heads: int, head_dim: int, to_grouped: bool) -> torch.Tensor:
    """Index ``p`` with ``out = x[..., p]`` converting the V-head order of a ``num_v_heads*head_dim`` axis.

    grouped: index ``(k, r, d)``; tiled: ``(r, k, d)``, with ``r`` the value head within a key head.
    """
    r = num_v_heads // num_k_heads
    idx = torch.arange(num_v_heads * head_dim)
    if to_grouped:  # source is tiled [r, k, d]; output position (k, r, d) reads tiled (r, k, d)
        return idx.view(r, num_k_heads, head_dim).permute(1, 0, 2).reshape(-1)
    return idx.view(num_k_heads, r, head_dim).permute(1, 0, 2).reshape(-1)


def _permute_rows(t: Tensor, perm: torch.Tensor) -> Tensor:
    if isinstance(t, TernaryTensor):
        return TernaryTensor(t.shape, t.group_size, t.codes.index_select(0, perm).contiguous(),
                             t.scales.index_select(0, perm).contiguous(), t.encoding)
    return DenseTensor(t.data.index_select(0, perm).contiguous())


def _permute_cols(t: Tensor, perm: torch.Tensor, head_dim: int) -> Tensor:
    if isinstance(t, DenseTensor):
        return DenseTensor(t.data.index_select(t.data.dim() - 1, perm).contiguous())
    if head_dim % t.group_size:
        raise UnsupportedModelError(
            f"cannot reorder ternary input columns: value head dim {head_dim} is not a multiple of "
            f"the group size {t.group_size}")
    codes = codecs.codes_of(t).index_select(1, perm)
    gperm = perm.view(-1, t.group_size)[:, 0] // t.group_size
    packed = codecs.pack_t2(codes) if t.encoding == "t2" else codecs.pack_t3(codes, t.group_size)
    return TernaryTensor(t.shape, t.group_size, packed, t.scales.index_select(1, gperm).contiguous(), t.encoding)


def _reorder_v(local: str, t: Tensor, cfg: ModelConfig, to_grouped: bool, rotated_out: bool) -> Tensor:
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    if not nk or nk == nv:
        return t
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    vperm = v_head_permutation(nk, nv, dv, to_grouped)
    if local == "linear_attn.in_proj_qkv.weight":
        qk = 2 * nk * dk
        return _permute_rows(t, torch.cat([torch.arange(qk), qk + vperm]))
    if local == "linear_attn.in_proj_z.weight":
        return _permute_rows(t, vperm)
    if local in ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight", "linear_attn.A",
                 "linear_attn.A_log", "linear_attn.dt_bias"):
        return _permute_rows(t, v_head_permutation(nk, nv, 1, to_grouped))
    if local == "linear_attn.conv1d.weight":
        qk = 2 * nk * dk
        return _permute_rows(t, torch.cat([torch.arange(qk), qk + vperm]))
    if local == "linear_attn.out_proj.weight" and not rotated_out:
        return _permute_cols(t, vperm, dv)
    return t


def _local(name: str) -> str:
    m = _LAYER.match(name)
    return m.group(2) if m else name


def tensor_from_gguf(name: str, t: Tensor, cfg: ModelConfig) -> Tensor:
    """A tensor read from a qwen35 GGUF (already decoded, canonical ``name``) -> canonical layout."""
    local = _local(name)
    rotated_out = cfg.hadamard is not None and name in cfg.hadamard.weight_names
    if local == "linear_attn.conv1d.weight" and isinstance(t, DenseTensor) and t.data.dim() == 2:
        t = _reorder_v(local, t, cfg, True, rotated_out)  # GGUF [C, K] -> HF [C, 1, K]
        return DenseTensor(t.data.unsqueeze(1).contiguous())  # type: ignore[union-attr]
    return _reorder_v(local, t, cfg, True, rotated_out)


def tensor_to_gguf(name: str, t: Tensor, cfg: ModelConfig) -> tuple[str, Tensor]:
    """A canonical tensor -> ``(GGUF name, tensor in GGUF conventions)`` (for writers).

    Applies the +1 norm folding when ``cfg.norm_weight_offset`` is 1 (HF source), ``A_log`` ->
    ``-exp(A_log)``, the conv squeeze and the V-head reorder.
    """
    local = _local(name)
    rotated_out = cfg.hadamard is not None and name in cfg.hadamard.weight_names
    if isinstance(t, DenseTensor):
        data = t.data
        if local.endswith("norm.weight") or name == "model.norm.weight":
            if local != "linear_attn.norm.weight" and cfg.norm_weight_offset:
                data = data.to(torch.float32) + cfg.norm_weight_offset
        elif local == "linear_attn.A_log":
            data = -torch.exp(data.to(torch.float32))
        elif local == "linear_attn.conv1d.weight":
            data = data.reshape(data.shape[0], -1)
        t = DenseTensor(data)
    return canonical_name_to_gguf(name), _reorder_v(local, t, cfg, False, rotated_out)


# ------------------------------------------------------------------------------------------
# Metadata
# ------------------------------------------------------------------------------------------

def _kv(kv: Mapping[str, Any], key: str, default: Any = None) -> Any:
    full = f"{ARCH}.{key}"
    if full in kv:
        return kv[full]
    if default is None:
        raise ModelFormatError(f"qwen35 GGUF is missing metadata key {full!r}")
    return default


GGUF_CONFIG_NAMES = {
    "hidden_size": f"{ARCH}.embedding_length", "intermediate_size": f"{ARCH}.feed_forward_length",
    "num_layers": f"{ARCH}.block_count", "num_heads": f"{ARCH}.attention.head_count",
    "num_kv_heads": f"{ARCH}.attention.head_count_kv", "head_dim": f"{ARCH}.attention.key_length",
    "rms_norm_eps": f"{ARCH}.attention.layer_norm_rms_epsilon", "rope_theta": f"{ARCH}.rope.freq_base",
    "max_position_embeddings": f"{ARCH}.context_length", "partial_rotary_factor": f"{ARCH}.rope.dimension_count",
    "linear_num_key_heads": f"{ARCH}.ssm.group_count", "linear_num_value_heads": f"{ARCH}.ssm.time_step_rank",
    "linear_key_head_dim": f"{ARCH}.ssm.state_size", "linear_value_head_dim": f"{ARCH}.ssm.inner_size",
    "linear_conv_kernel_dim": f"{ARCH}.ssm.conv_kernel", "vocab_size": "token_embd.weight rows",
}
HF_CONFIG_NAMES = {
    "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
    "rms_norm_eps": "rms_norm_eps", "rope_theta": "rope_theta", "max_position_embeddings": "max_position_embeddings",
    "partial_rotary_factor": "partial_rotary_factor", "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads", "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim", "linear_conv_kernel_dim": "linear_conv_kernel_dim",
    "layer_types": "layer_types", "vocab_size": "vocab_size",
}


def layer_types_from_tensors(names: list[str] | set[str], num_layers: int, *, source: str = "qwen35 GGUF") -> list[str]:
    """Read each block's kind from the tensors it has (GGUF or canonical names)."""
    names = set(names)
    types = []
    for i in range(num_layers):
        lin = f"blk.{i}.ssm_out.weight" in names or f"model.layers.{i}.linear_attn.out_proj.weight" in names
        full = f"blk.{i}.attn_q.weight" in names or f"model.layers.{i}.self_attn.q_proj.weight" in names
        if lin == full:
            raise ModelFormatError(f"{source}: block {i} is neither clearly linear attention nor full attention "
                                   f"(the tensor table has {'both' if lin else 'neither'} kinds of tensors for it)")
        types.append("linear_attention" if lin else "full_attention")
    return types


def config_from_gguf(kv: Mapping[str, Any], tensor_shapes: Mapping[str, tuple[int, ...]], *,
                     source: str = "qwen35 GGUF") -> ModelConfig:
    """ModelConfig from qwen35 GGUF metadata + tensor shapes (GGUF names, numpy order ``[rows, cols]``).

    Every key is read through :class:`runtime.formats.config_schema.Fields` (type and range,
    message naming ``source`` and the key); counts are bounded before the per-layer loop."""
    from runtime.formats.config_schema import (
        MAX_CONTEXT,
        MAX_FFN,
        MAX_HEAD_DIM,
        MAX_HEADS,
        MAX_HIDDEN,
        MAX_LAYERS,
        Fields,
        validate_config,
    )

    f = Fields(kv, source)
    a = ARCH + "."
    n_layers = f.int(a + "block_count", lo=1, hi=MAX_LAYERS + 64)
    nextn = f.int(a + "nextn_predict_layers", 0, lo=0, hi=n_layers - 1)
    n_text = n_layers - nextn  # MTP layers are counted in block_count
    head_dim = f.int(a + "attention.key_length", lo=2, hi=MAX_HEAD_DIM)
    rope_dims = f.int(a + "rope.dimension_count", head_dim, lo=2, hi=head_dim)
    n_v = f.int(a + "ssm.time_step_rank", lo=1, hi=MAX_HEADS)
    inner = f.int(a + "ssm.inner_size", lo=1, hi=MAX_HEADS * MAX_HEAD_DIM)
    if inner % n_v:
        raise f.fail(a + "ssm.inner_size", f"({inner}) must be a multiple of {a}ssm.time_step_rank ({n_v})")
    embd = tensor_shapes.get("token_embd.weight")
    if embd is None:
        raise ModelFormatError(f"{source}: qwen35 GGUF has no token_embd.weight")
    if n_text > MAX_LAYERS:
        raise f.fail(a + "block_count", f"gives {n_text} text layers; at most {MAX_LAYERS} are allowed")
    layer_types = layer_types_from_tensors(list(tensor_shapes), n_text, source=source)
    interval = f.int(a + "full_attention_interval", 0, lo=0, hi=MAX_LAYERS)
    if interval:
        expect = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_text)]
        if expect != layer_types:
            raise ModelFormatError(f"{source}: qwen35 layer kinds from the tensors disagree with "
                                   f"{a}full_attention_interval ({interval})")
    rope_scaling = None
    stype = kv.get(f"{ARCH}.rope.scaling.type")
    if stype not in (None, "none", ""):
        raise UnsupportedModelError(f"{source}: qwen35 RoPE scaling {stype!r} is not supported")
    cfg = ModelConfig(
        arch=ARCH, vocab_size=int(embd[0]), hidden_size=f.int(a + "embedding_length", lo=1, hi=MAX_HIDDEN),
        intermediate_size=f.int(a + "feed_forward_length", lo=1, hi=MAX_FFN), num_layers=n_text,
        num_heads=f.int(a + "attention.head_count", lo=1, hi=MAX_HEADS),
        num_kv_heads=f.int(a + "attention.head_count_kv", lo=1, hi=MAX_HEADS),
        head_dim=head_dim, rms_norm_eps=f.float(a + "attention.layer_norm_rms_epsilon", lo=0.0, hi=0.1, lo_open=True),
        rope_theta=f.float(a + "rope.freq_base", lo=1.0, hi=1e12, lo_open=True), rope_scaling=rope_scaling,
        max_position_embeddings=f.int(a + "context_length", lo=1, hi=MAX_CONTEXT),
        tie_word_embeddings="output.weight" not in tensor_shapes,
        layer_types=layer_types, partial_rotary_factor=rope_dims / head_dim, attn_output_gate=True,
        linear_num_key_heads=f.int(a + "ssm.group_count", lo=1, hi=MAX_HEADS), linear_num_value_heads=n_v,
        linear_key_head_dim=f.int(a + "ssm.state_size", lo=1, hi=MAX_HEAD_DIM), linear_value_head_dim=inner // n_v,
        linear_conv_kernel_dim=f.int(a + "ssm.conv_kernel", lo=1, hi=64), norm_weight_offset=0.0,
    )
    validate_config(cfg, source, GGUF_CONFIG_NAMES)
    cfg.hadamard = hadamard_from_gguf(kv, n_text, source=source)
    return cfg


def gguf_metadata(cfg: ModelConfig) -> dict[str, Any]:
    """qwen35 architecture keys for a writer (values as llama.cpp's converter writes them)."""
    types = cfg.layer_types or []
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    interval = full[0] + 1 if full else 0
    periodic = bool(full) and types == [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(len(types))]
    kv: dict[str, Any] = {
        "general.architecture": ARCH,
        f"{ARCH}.block_count": cfg.num_layers,
        f"{ARCH}.context_length": cfg.max_position_embeddings,
        f"{ARCH}.embedding_length": cfg.hidden_size,
        f"{ARCH}.feed_forward_length": cfg.intermediate_size,
        f"{ARCH}.attention.head_count": cfg.num_heads,
        f"{ARCH}.attention.head_count_kv": cfg.num_kv_heads,
        f"{ARCH}.attention.key_length": cfg.head_dim,
        f"{ARCH}.attention.value_length": cfg.head_dim,
        f"{ARCH}.attention.layer_norm_rms_epsilon": cfg.rms_norm_eps,
        f"{ARCH}.rope.freq_base": cfg.rope_theta,
        f"{ARCH}.rope.dimension_count": int(cfg.head_dim * cfg.partial_rotary_factor),
        f"{ARCH}.rope.dimension_sections": [11, 11, 10, 0],
        f"{ARCH}.ssm.conv_kernel": cfg.linear_conv_kernel_dim,
        f"{ARCH}.ssm.state_size": cfg.linear_key_head_dim,
        f"{ARCH}.ssm.group_count": cfg.linear_num_key_heads,
        f"{ARCH}.ssm.time_step_rank": cfg.linear_num_value_heads,
        f"{ARCH}.ssm.inner_size": cfg.linear_value_head_dim * cfg.linear_num_value_heads,
    }
    if periodic:  # llama.cpp derives the layer kinds from this; our reader reads them from the tensors
        kv[f"{ARCH}.full_attention_interval"] = interval
    if cfg.hadamard is not None:
        kv.update(hadamard_to_gguf(cfg.hadamard))
    return kv


def hadamard_from_gguf(kv: Mapping[str, Any], num_layers: int | None = None, *,
                       source: str = "GGUF metadata") -> HadamardConfig | None:
    """``prism.hadamard.*`` -> HadamardConfig (weight names made canonical); None when absent.

    Partial metadata is refused here: a rotated file with half its recipe cannot be run. Types
    and ranges are checked through :class:`runtime.formats.config_schema.Fields`.
    """
    import numpy as np

    from runtime.formats.config_schema import Fields
    from runtime.model.qwen35.hadamard import split_sign_values

    keys = [k for k in kv if k.startswith("prism.hadamard.")]
    if not keys:
        return None
    f = Fields(kv, source)
    p = "prism.hadamard."
    need = ["block_size", "weight_names", "sign_widths", "sign_values"]
    missing = [k for k in need if f"prism.hadamard.{k}" not in kv]
    mode = f.str(p + "sign_mode", "explicit")
    if mode == "identity":
        missing = [k for k in missing if k not in ("sign_widths", "sign_values")]
    if missing:
        raise UnsupportedModelError(
            f"{source}: the file has incomplete Hadamard rotation metadata (missing prism.hadamard.{missing[0]}); "
            "it cannot be run correctly")
    version = f.int(p + "version", 1)
    if version != 1:
        raise UnsupportedModelError(f"{source}: prism.hadamard.version {version} is not supported (supported: 1)")
    if mode not in ("explicit", "identity"):
        raise UnsupportedModelError(f"{source}: prism.hadamard.sign_mode {mode!r} is not supported")

    def canon(names: list[str]) -> list[str]:
        out = []
        for n in names:
            c = canonical_weight_name(n, num_layers)
            if c is not None:
                out.append(c)
        return out

    widths = f.int_list(p + "sign_widths", [], lo=1, hi=1 << 20, max_len=4096)
    signs: dict[int, list[int]] = {}
    if mode == "explicit":
        values = f.raw(p + "sign_values", [])
        arr = np.asarray(values if isinstance(values, np.ndarray | list) else [values], dtype=object)
        if arr.ndim != 1 or not all(not isinstance(v, bool) and isinstance(v, int | float | np.number)
                                    and v in (-1, 1) for v in arr.tolist()):
            raise f.fail(p + "sign_values", "must be a list of +1/-1 values")
        signs = split_sign_values(widths, values)
    return HadamardConfig(
        block_size=f.int(p + "block_size", lo=1, hi=1 << 20),
        transform=f.str(p + "transform", "normalized-sylvester-walsh-hadamard"),
        sign_widths=widths,
        weight_names=canon(f.str_list(p + "weight_names")),
        inverse_weight_names=canon(f.str_list(p + "inverse_weight_names", [])),
        gdn_v_grouped=f.bool(p + "gdn_v_grouped", True),
        signs=signs,
        axis=f.str(p + "axis", "input-last-dimension"),
    )


def hadamard_to_gguf(hc: HadamardConfig) -> dict[str, Any]:
    widths = sorted(int(w) for w in hc.signs) if hc.signs else list(hc.sign_widths)
    values: list[int] = []
    for w in widths:
        values += [int(v) for v in (hc.signs.get(w) or hc.signs.get(str(w)))]  # type: ignore[call-overload]
    return {
        "prism.hadamard.version": 1,
        "prism.hadamard.block_size": hc.block_size,
        "prism.hadamard.transform": hc.transform,
        "prism.hadamard.axis": hc.axis,
        "prism.hadamard.sign_mode": "explicit",
        "prism.hadamard.sign_widths": widths,
        "prism.hadamard.sign_values": values,
        "prism.hadamard.weight_names": [canonical_name_to_gguf(n) for n in hc.weight_names],
        "prism.hadamard.inverse_weight_names": [canonical_name_to_gguf(n) for n in hc.inverse_weight_names],
        "prism.hadamard.gdn_v_grouped": hc.gdn_v_grouped,
    }


def config_from_hf(hf: Mapping[str, Any], *, source: str = "config.json") -> ModelConfig:
    """ModelConfig from an HF ``config.json`` (``Qwen3_5ForConditionalGeneration`` or the text config).

    Every field is read through :class:`runtime.formats.config_schema.Fields` (type and range,
    message naming ``source`` and the field); the layer count is bounded before the layer list."""
    from runtime.formats.config_schema import (
        MAX_CONTEXT,
        MAX_FFN,
        MAX_HEAD_DIM,
        MAX_HEADS,
        MAX_HIDDEN,
        MAX_LAYERS,
        MAX_VOCAB,
        Fields,
        validate_config,
    )

    top = Fields(hf, source)
    tc_map = top.mapping("text_config", None)
    tc = dict(tc_map) if tc_map else dict(hf)
    f = Fields(tc, source, prefix="text_config." if tc_map else "")
    rp_map = f.mapping("rope_parameters", None) or f.mapping("rope_scaling", None) or {}
    rp = Fields(rp_map, source, prefix=f.prefix + ("rope_parameters." if f.has("rope_parameters") else "rope_scaling."))
    rope_type = rp.str("rope_type", None) if rp.has("rope_type") else rp.str("type", "default")
    if rope_type not in ("default", None):
        raise UnsupportedModelError(f"{source}: qwen3.5 RoPE type {rope_type!r} is not supported")
    n = f.int("num_hidden_layers", lo=1, hi=MAX_LAYERS)
    if f.has("layer_types"):
        types = f.str_list("layer_types", max_len=MAX_LAYERS)
    else:
        interval = f.int("full_attention_interval", 4, lo=1, hi=MAX_LAYERS)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    hidden = f.int("hidden_size", lo=1, hi=MAX_HIDDEN)
    heads = f.int("num_attention_heads", lo=1, hi=MAX_HEADS)
    head_dim = f.int("head_dim", hidden // heads, lo=2, hi=MAX_HEAD_DIM)
    tie = top.bool("tie_word_embeddings", None)
    if tie is None:
        tie = f.bool("tie_word_embeddings", False)
    theta_f = rp if rp.has("rope_theta") else f
    prf_f = rp if rp.has("partial_rotary_factor") else f
    cfg = ModelConfig(
        arch=ARCH, vocab_size=f.int("vocab_size", lo=1, hi=MAX_VOCAB), hidden_size=hidden,
        intermediate_size=f.int("intermediate_size", lo=1, hi=MAX_FFN), num_layers=n,
        num_heads=heads, num_kv_heads=f.int("num_key_value_heads", lo=1, hi=MAX_HEADS),
        head_dim=head_dim, rms_norm_eps=f.float("rms_norm_eps", 1e-6, lo=0.0, hi=0.1, lo_open=True),
        rope_theta=theta_f.float("rope_theta", 10_000.0, lo=1.0, hi=1e12, lo_open=True),
        max_position_embeddings=f.int("max_position_embeddings", 32768, lo=1, hi=MAX_CONTEXT), tie_word_embeddings=tie,
        layer_types=list(types),
        partial_rotary_factor=prf_f.float("partial_rotary_factor", 0.25, lo=0.0, hi=1.0, lo_open=True),
        attn_output_gate=f.bool("attn_output_gate", True),
        linear_num_key_heads=f.int("linear_num_key_heads", lo=1, hi=MAX_HEADS),
        linear_num_value_heads=f.int("linear_num_value_heads", lo=1, hi=MAX_HEADS),
        linear_key_head_dim=f.int("linear_key_head_dim", lo=1, hi=MAX_HEAD_DIM),
        linear_value_head_dim=f.int("linear_value_head_dim", lo=1, hi=MAX_HEAD_DIM),
        linear_conv_kernel_dim=f.int("linear_conv_kernel_dim", 4, lo=1, hi=64), norm_weight_offset=1.0,
    )
    names = {k: f.prefix + v for k, v in HF_CONFIG_NAMES.items()}
    return validate_config(cfg, source, names)
