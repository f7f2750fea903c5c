"""One schema check for every model header and config a reader takes in.

Why one module: ``.ternary`` headers, GGUF metadata, ``config.json``, ``generation_config.json``
and tokenizer entries are untrusted. Converting fields with ``int()``/``float()`` where they are
read let a string, NaN, ``1e400`` or 10**7 layers surface as a TypeError, an OverflowError, a
gigabyte-sized table of expected tensors, or a crash later in ``generate``. Every reader
(``ternary_file``, ``gguf``, ``hf``, ``arch``, ``model.qwen35.spec``) reads fields through
:class:`Fields` (type and sane range, message naming the file and the field), finishes with
:func:`validate_config` (relations between fields) and, before building anything per layer,
:func:`check_layer_count` against the file's own tensor table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from runtime.errors import ModelFormatError
from runtime.model.config import HadamardConfig, ModelConfig, RopeScaling

# Sane limits: an order of magnitude above the largest open models, far below what would make a
# per-layer table or a RoPE table expensive to build.
MAX_LAYERS = 1024
MAX_HIDDEN = 1 << 17
MAX_FFN = 1 << 20
MAX_HEADS = 1 << 12
MAX_HEAD_DIM = 1 << 12
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 24
MAX_JSON_DEPTH = 64  # tokenizer.json is ~6 levels deep, configs ~4

# generation defaults a model file may carry: (low, high, integer, low bound excluded); the same
# ranges the app's settings accept, so a file's default is always a value the user could set
GENERATION_LIMITS: dict[str, tuple[float, float, bool, bool]] = {
    "temperature": (0.0, 2.0, False, False),
    "top_p": (0.0, 1.0, False, True),
    "top_k": (0, 1000, True, False),
    "min_p": (0.0, 1.0, False, False),
    "repetition_penalty": (0.5, 2.0, False, False),
    "presence_penalty": (-2.0, 2.0, False, False),
    "frequency_penalty": (-2.0, 2.0, False, False),
    "max_new_tokens": (1, 262_144, True, False),
}
GENERATION_FLAGS = ("do_sample", "enable_thinking")

_MISSING = object()


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, str):
        return "text"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list | tuple | np.ndarray):
        return "a list"
    return type(v).__name__


def _show(v: Any) -> str:
    text = repr(v) if not isinstance(v, np.ndarray) else f"array of {v.size}"
    return text if len(text) <= 60 else text[:57] + "..."


# ------------------------------------------------------------------------------------------------
# JSON

def json_depth_ok(doc: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``doc`` nests at most ``limit`` containers deep (checked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            if d > limit:
                return False
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d > limit:
                return False
            stack.extend((x, d + 1) for x in v)
    return True


def load_json(data: str | bytes, source: str, *, depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse untrusted JSON; every failure (syntax, encoding, nesting) is a ModelFormatError naming ``source``."""
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise ModelFormatError(f"{source}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ModelFormatError(f"{source}: JSON nested too deeply (more than {depth} levels)") from None
    if not json_depth_ok(doc, depth):
        raise ModelFormatError(f"{source}: JSON nested too deeply (more than {depth} levels)")
    return doc


# ------------------------------------------------------------------------------------------------
# typed fields

class Fields:
    """Typed, range-checked reads from one untrusted mapping; errors name ``source`` and the field.

    ``prefix`` is prepended to key names in messages (e.g. ``"config."`` for a ``.ternary`` header
    or ``"qwen3."`` for GGUF keys that were looked up under it); ``names`` renames keys instead
    (a ModelConfig attribute -> the file's own field name).
    """

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "",
                 names: Mapping[str, str] | None = None) -> None:
        self.data, self.source, self.prefix, self.names = data, source, prefix, names or {}

    def fail(self, key: str, problem: str) -> ModelFormatError:
        return ModelFormatError(f"{self.source}: {self.names.get(key, self.prefix + key)} {problem}")

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        return self._get(key, default)[1]

    def _get(self, key: str, default: Any) -> tuple[bool, Any]:
        """(present, value); a missing key without a default is an error, null counts as missing."""
        if not self.has(key):
            if default is _MISSING:
                raise self.fail(key, "is missing")
            return False, default
        return True, self.data[key]

    def int(self, key: str, default: Any = _MISSING, *, lo: int = 0, hi: int = 1 << 62) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if isinstance(v, np.integer):
            v = int(v)
        if isinstance(v, float) and math.isfinite(v) and v == int(v):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float):
                raise self.fail(key, f"must be a whole number from {lo} to {hi}, got {_show(v)}")
            raise self.fail(key, f"must be a whole number, got {_type_name(v)} {_show(v)}")
        if not lo <= v <= hi:
            raise self.fail(key, f"must be a whole number from {lo} to {hi}, got {_show(v)}")
        return v

    def float(self, key: str, default: Any = _MISSING, *, lo: float = -math.inf, hi: float = math.inf,
              lo_open: bool = False) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if isinstance(v, np.floating | np.integer):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(key, f"must be a number, got {_type_name(v)} {_show(v)}")
        try:
            v = float(v)
        except OverflowError:
            raise self.fail(key, f"is a number too large to use ({_show(v)})") from None
        if not math.isfinite(v):
            raise self.fail(key, f"must be a finite number, got {v}")
        if v < lo or v > hi or (lo_open and v == lo):
            low = f"above {lo:g}" if lo_open else f"at least {lo:g}"
            rng = f"{low} and at most {hi:g}" if math.isfinite(hi) else low
            raise self.fail(key, f"must be {rng}, got {v:g}")
        return v

    def str(self, key: str, default: Any = _MISSING, *, choices: Iterable[str] | None = None) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if not isinstance(v, str):
            raise self.fail(key, f"must be text, got {_type_name(v)} {_show(v)}")
        if choices is not None and v not in set(choices):
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {_show(v)}")
        return v

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if isinstance(v, np.bool_):
            v = bool(v)
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {_type_name(v)} {_show(v)}")
        return v

    def mapping(self, key: str, default: Any = _MISSING) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if not isinstance(v, Mapping):
            raise self.fail(key, f"must be an object, got {_type_name(v)} {_show(v)}")
        return v

    def str_list(self, key: str, default: Any = _MISSING, *, max_len: int = 1 << 20) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if isinstance(v, np.ndarray) or not isinstance(v, list | tuple) or len(v) > max_len:
            raise self.fail(key, f"must be a list of text, got {_type_name(v)} {_show(v)}")
        for i, x in enumerate(v):
            if not isinstance(x, str):
                raise self.fail(key, f"must be a list of text; item {i} is {_type_name(x)} {_show(x)}")
        return list(v)

    def int_list(self, key: str, default: Any = _MISSING, *, lo: int = 0, hi: int = 1 << 62,
                 max_len: int = 1 << 24) -> Any:
        present, v = self._get(key, default)
        if not present:
            return v
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "iu":
                raise self.fail(key, f"must be a list of whole numbers, got an array of {v.dtype}")
            v = v.tolist()
        if not isinstance(v, list | tuple) or len(v) > max_len:
            raise self.fail(key, f"must be a list of whole numbers, got {_type_name(v)} {_show(v)}")
        out = []
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
                raise self.fail(key, f"item {i} must be a whole number from {lo} to {hi}, got {_show(x)}")
            out.append(x)
        return out


# ------------------------------------------------------------------------------------------------
# the model config

# ModelConfig attribute -> how .ternary headers name it (other formats pass their own names)
HEADER_NAMES = {f: f"config.{f}" for f in ModelConfig.__dataclass_fields__}
LAYER_TYPES = ("linear_attention", "full_attention")


def validate_config(c: ModelConfig, source: str, names: Mapping[str, str] | None = None) -> ModelConfig:
    """Ranges of every field and the relations between them; ``names`` maps attributes to the
    file's own field names for the message. Returns ``c`` for chaining."""
    names = names or {}

    def bad(attr: str, problem: str) -> ModelFormatError:
        return ModelFormatError(f"{source}: {names.get(attr, attr)} {problem}")

    f = Fields(vars(c), source, names=names)
    f.str("arch")
    f.int("vocab_size", lo=1, hi=MAX_VOCAB)
    f.int("hidden_size", lo=1, hi=MAX_HIDDEN)
    f.int("intermediate_size", lo=1, hi=MAX_FFN)
    f.int("num_layers", lo=1, hi=MAX_LAYERS)
    f.int("num_heads", lo=1, hi=MAX_HEADS)
    f.int("num_kv_heads", lo=1, hi=MAX_HEADS)
    f.int("head_dim", lo=2, hi=MAX_HEAD_DIM)
    f.float("rms_norm_eps", lo=0.0, hi=0.1, lo_open=True)
    f.float("rope_theta", lo=1.0, hi=1e12, lo_open=True)
    f.int("max_position_embeddings", lo=1, hi=MAX_CONTEXT)
    f.bool("tie_word_embeddings")
    f.float("partial_rotary_factor", lo=0.0, hi=1.0, lo_open=True)
    f.bool("attn_output_gate")
    if c.num_heads % c.num_kv_heads:
        raise bad("num_heads", f"({c.num_heads}) must be a multiple of "
                               f"{names.get('num_kv_heads', 'num_kv_heads')} ({c.num_kv_heads})")
    rot = c.head_dim * c.partial_rotary_factor
    if rot != int(rot) or int(rot) % 2 or rot < 2:
        raise bad("head_dim", f"{c.head_dim} with a rotary fraction of {c.partial_rotary_factor:g} does not give "
                              "an even number of rotary dimensions")
    rs = c.rope_scaling
    if rs is not None:
        r = Fields(vars(rs), source, prefix=names.get("rope_scaling", "rope_scaling") + ".")
        r.str("type", choices=("yarn", "linear", "llama3", "default"))
        r.float("factor", lo=0.0, hi=1024.0, lo_open=True)
        r.int("original_max_position_embeddings", lo=0, hi=MAX_CONTEXT)
        r.float("beta_fast", lo=0.0, hi=1e4)
        r.float("beta_slow", lo=0.0, hi=1e4)
        for k in ("attention_factor", "mscale", "mscale_all_dim"):
            r.float(k, None, lo=0.0, hi=100.0, lo_open=k == "attention_factor")
        r.bool("truncate")
        r.float("low_freq_factor", lo=0.0, hi=1e4, lo_open=True)
        r.float("high_freq_factor", lo=0.0, hi=1e4, lo_open=True)
        if rs.type == "llama3" and rs.high_freq_factor <= rs.low_freq_factor:
            raise r.fail("high_freq_factor", f"({rs.high_freq_factor}) must be above low_freq_factor "
                                             f"({rs.low_freq_factor})")
    if c.arch == "qwen35":
        f.int("linear_num_key_heads", lo=1, hi=MAX_HEADS)
        f.int("linear_num_value_heads", lo=1, hi=MAX_HEADS)
        f.int("linear_key_head_dim", lo=1, hi=MAX_HEAD_DIM)
        f.int("linear_value_head_dim", lo=1, hi=MAX_HEAD_DIM)
        f.int("linear_conv_kernel_dim", lo=1, hi=64)
        if c.linear_num_value_heads % c.linear_num_key_heads:
            raise bad("linear_num_value_heads", f"({c.linear_num_value_heads}) must be a multiple of "
                      f"{names.get('linear_num_key_heads', 'linear_num_key_heads')} ({c.linear_num_key_heads})")
        if c.layer_types is None:
            raise bad("layer_types", "is missing (a hybrid model needs each layer's kind)")
    if c.layer_types is not None:
        types = f.str_list("layer_types", max_len=MAX_LAYERS)
        if len(types) != c.num_layers:
            raise bad("layer_types", f"lists {len(types)} layers but {names.get('num_layers', 'num_layers')} "
                                     f"is {c.num_layers}")
        for i, t in enumerate(types):
            if t not in LAYER_TYPES:
                raise bad("layer_types", f"item {i} must be one of {', '.join(LAYER_TYPES)}, got {_show(t)}")
    if c.norm_weight_offset not in (0.0, 1.0) or isinstance(c.norm_weight_offset, bool):
        raise bad("norm_weight_offset", f"must be 0 or 1, got {_show(c.norm_weight_offset)}")
    return c


def config_from_header(d: Any, source: str, prefix: str = "config.") -> ModelConfig:
    """A ``.ternary`` header's ``config`` object -> ModelConfig, every field typed and ranged
    (replaces ``ModelConfig.from_dict`` for untrusted input: that one trusts every value)."""
    if not isinstance(d, Mapping):
        raise ModelFormatError(f"{source}: {prefix.rstrip('.')} must be an object, got {_type_name(d)}")
    f = Fields(d, source, prefix=prefix)
    rope_scaling = None
    rs = f.mapping("rope_scaling", None)
    if rs:
        r = Fields(rs, source, prefix=prefix + "rope_scaling.")
        rope_scaling = RopeScaling(
            type=r.str("type", "yarn"), factor=r.float("factor", 1.0), original_max_position_embeddings=r.int(
                "original_max_position_embeddings", 0, hi=MAX_CONTEXT), beta_fast=r.float("beta_fast", 32.0),
            beta_slow=r.float("beta_slow", 1.0), attention_factor=r.float("attention_factor", None),
            truncate=r.bool("truncate", True), mscale=r.float("mscale", None),
            mscale_all_dim=r.float("mscale_all_dim", None))
    hadamard = None
    hd = f.mapping("hadamard", None)
    if hd:
        h = Fields(hd, source, prefix=prefix + "hadamard.")
        signs_raw = h.mapping("signs", {})
        signs: dict[int, list[int]] = {}
        for k, v in signs_raw.items():
            if not str(k).isdigit() or len(str(k)) > 7:
                raise h.fail("signs", f"has a key {_show(k)} that is not a width")
            hv = Fields({str(k): v}, source, prefix=prefix + "hadamard.signs.")
            vals = hv.int_list(str(k), lo=-1, hi=1, max_len=1 << 20)
            if 0 in vals:
                raise hv.fail(str(k), "must hold only +1 and -1")
            signs[int(k)] = vals
        hadamard = HadamardConfig(
            block_size=h.int("block_size", 1024, lo=1, hi=1 << 20), transform=h.str("transform", HadamardConfig.transform),
            sign_widths=h.int_list("sign_widths", [], lo=1, hi=1 << 20, max_len=4096),
            weight_names=h.str_list("weight_names", []), inverse_weight_names=h.str_list("inverse_weight_names", []),
            gdn_v_grouped=h.bool("gdn_v_grouped", True), signs=signs, axis=h.str("axis", HadamardConfig.axis))
    c = ModelConfig(
        arch=f.str("arch"), vocab_size=f.int("vocab_size", lo=1, hi=MAX_VOCAB),
        hidden_size=f.int("hidden_size", lo=1, hi=MAX_HIDDEN), intermediate_size=f.int("intermediate_size", lo=1, hi=MAX_FFN),
        num_layers=f.int("num_layers", lo=1, hi=MAX_LAYERS), num_heads=f.int("num_heads", lo=1, hi=MAX_HEADS),
        num_kv_heads=f.int("num_kv_heads", lo=1, hi=MAX_HEADS), head_dim=f.int("head_dim", lo=2, hi=MAX_HEAD_DIM),
        rms_norm_eps=f.float("rms_norm_eps", 1e-6), rope_theta=f.float("rope_theta", 1_000_000.0),
        rope_scaling=rope_scaling, max_position_embeddings=f.int("max_position_embeddings", 32768, lo=1, hi=MAX_CONTEXT),
        tie_word_embeddings=f.bool("tie_word_embeddings", False),
        layer_types=f.str_list("layer_types", None, max_len=MAX_LAYERS),
        partial_rotary_factor=f.float("partial_rotary_factor", 1.0), attn_output_gate=f.bool("attn_output_gate", False),
        linear_num_key_heads=f.int("linear_num_key_heads", 0, hi=MAX_HEADS),
        linear_num_value_heads=f.int("linear_num_value_heads", 0, hi=MAX_HEADS),
        linear_key_head_dim=f.int("linear_key_head_dim", 0, hi=MAX_HEAD_DIM),
        linear_value_head_dim=f.int("linear_value_head_dim", 0, hi=MAX_HEAD_DIM),
        linear_conv_kernel_dim=f.int("linear_conv_kernel_dim", 4, hi=64),
        norm_weight_offset=f.float("norm_weight_offset", 0.0), hadamard=hadamard,
    )
    return validate_config(c, source, {k: prefix + k for k in ModelConfig.__dataclass_fields__})


def check_layer_count(num_layers: int, tensor_names: Iterable[str], source: str, *,
                      prefix: str = "model.layers.", field: str = "num_layers") -> None:
    """Refuse a layer count the tensor table does not have (before any per-layer table is built)."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= MAX_LAYERS:
        raise ModelFormatError(f"{source}: {field} must be a whole number from 1 to {MAX_LAYERS}, "
                               f"got {_show(num_layers)}")
    present: set[int] = set()
    for n in tensor_names:
        if n.startswith(prefix):
            idx = n[len(prefix):].partition(".")[0]
            if idx.isdigit() and len(idx) < 8:
                present.add(int(idx))
    if present != set(range(num_layers)):
        have = f"layers 0..{max(present)}" if present else "no layers"
        if present and len(present) != max(present) + 1:
            have = f"{len(present)} layers with gaps (up to layer {max(present)})"
        raise ModelFormatError(f"{source}: {field} says {num_layers} layers but the tensor table has {have}")


# ------------------------------------------------------------------------------------------------
# generation defaults and tokenizer entries

def check_generation_defaults(gd: Any, source: str, names: Mapping[str, str] | None = None,
                              field: str = "generation defaults") -> dict[str, Any]:
    """The sampling defaults a file carries, each checked; unknown keys are dropped (nothing reads them)."""
    names = names or {}
    if gd is None:
        return {}
    if not isinstance(gd, Mapping):
        raise ModelFormatError(f"{source}: {field} must be an object, got {_type_name(gd)}")
    out: dict[str, Any] = {}
    for key, (lo, hi, integer, lo_open) in GENERATION_LIMITS.items():
        if gd.get(key) is None:
            continue
        f = Fields(gd, source, names=names)
        out[key] = f.int(key, lo=int(lo), hi=int(hi)) if integer else f.float(key, lo=lo, hi=hi, lo_open=lo_open)
    for key in GENERATION_FLAGS:
        if gd.get(key) is not None:
            out[key] = Fields(gd, source, names=names).bool(key)
    return out


def check_token_id(v: Any, vocab_size: int, source: str, field: str) -> int:
    """One special-token id: a whole number inside the vocabulary."""
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelFormatError(f"{source}: {field} must be a token id (a whole number), got {_type_name(v)} {_show(v)}")
    if not 0 <= v < vocab_size:
        raise ModelFormatError(f"{source}: {field} = {v} is outside the vocabulary (0..{vocab_size - 1})")
    return v


def check_token_ids(v: Any, vocab_size: int, source: str, field: str) -> list[int]:
    """An id or a list of ids (HF ``eos_token_id`` takes both)."""
    if v is None:
        return []
    items = v if isinstance(v, list | tuple) else [v]
    if len(items) > 1024:
        raise ModelFormatError(f"{source}: {field} lists {len(items)} ids; at most 1024 are allowed")
    return [check_token_id(x, vocab_size, source, f"{field}[{i}]" if isinstance(v, list | tuple) else field)
            for i, x in enumerate(items)]


def check_tokenizer_json(text: Any, source: str) -> dict[str, Any]:
    """The document's outline (object, ``model`` object, ``added_tokens`` list of id/content); the
    full check is building it (:func:`runtime.tokenizer.check_tokenizer`)."""
    if not isinstance(text, str):
        raise ModelFormatError(f"{source}: the tokenizer must be a tokenizer.json document (text), "
                               f"got {_type_name(text)}")
    doc = load_json(text, source)
    if not isinstance(doc, dict):
        raise ModelFormatError(f"{source}: not a tokenizer.json document (expected an object, got {_type_name(doc)})")
    if not isinstance(doc.get("model"), dict):
        raise ModelFormatError(f"{source}: model must be an object (the tokenizer's vocabulary and merges)")
    added = doc.get("added_tokens", [])
    if not isinstance(added, list):
        raise ModelFormatError(f"{source}: added_tokens must be a list, got {_type_name(added)}")
    for i, a in enumerate(added):
        if (not isinstance(a, dict) or isinstance(a.get("id"), bool) or not isinstance(a.get("id"), int)
                or a["id"] < 0 or not isinstance(a.get("content"), str)):
            raise ModelFormatError(f"{source}: added_tokens[{i}] must have a whole-number id and text content")
    return doc
