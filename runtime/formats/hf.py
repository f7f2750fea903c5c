"""Hugging Face model folders (PrismML ``-unpacked`` style) -> canonical ternary tensors.

Why this is more than ``safetensors.load_file``: the unpacked repos store ternary weights as
plain fp16 values ``t * s``; we recover ``(t, s)`` per 128-group exactly and *verify* every group
really is ternary (a non-ternary checkpoint is refused, naming the tensor, row and group, unless
``quantize=True``, which reports the error instead). Safetensors headers are parsed and validated
here (length, dtype, shape vs byte span, span inside the file, no overlap) and the data is
memory-mapped, so one tensor at a time is in memory during a conversion.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.errors import ModelFormatError, UnsupportedModelError
from runtime.formats.arch import (
    HF_CONFIG_NAMES,
    ArchSpec,
    arch_for_hf,
    check_tensor_set,
    dense_matrices_notice,
)
from runtime.formats.config_schema import (
    Fields,
    check_generation_defaults,
    check_token_id,
    check_token_ids,
    check_tokenizer_json,
    load_json,
)
from runtime.formats.dtype_check import check_float_values
from runtime.formats.file_checks import optional_file, path_kind, require_file
from runtime.formats.mmap_pages import release
from runtime.formats.model_data import (
    T2,
    DenseTensor,
    ModelData,
    Provenance,
    Tensor,
    TernaryTensor,
    TokenizerData,
    t3_bytes_per_group,
)
from runtime.formats.ternary_file import TensorSpec

MAX_JSON_BYTES = 64 << 20  # tokenizer.json of a 250k vocab is ~12 MB
MAX_SAFETENSORS_HEADER = 100 << 20
CHUNK_WEIGHTS = 1 << 20  # fp32 temporaries of ternary recovery stay ~tens of MB
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

_ST_DTYPES = {
    "F32": (np.float32, torch.float32), "F16": (np.float16, torch.float16), "BF16": (np.int16, torch.bfloat16),
    "F64": (np.float64, torch.float64),
}


# ------------------------------------------------------------------------------------------------
# ternary recovery

class NotTernaryError(ModelFormatError):
    """A float matrix whose values are not ``t * s`` per group: the loader keeps it dense instead."""


def ternarize(w: torch.Tensor, name: str, group_size: int = 128, *, quantize: bool = False, encoding: str = T2,
              source: str = "") -> tuple[TernaryTensor, float]:
    """Exact (t, s) per group of a dense 2-D weight, in row chunks (bounded temporary memory).

    Same rule and tolerance as :func:`runtime.formats.codecs.quantize_ternary` (``s = max|w|``,
    ``t = round(w / s)``, every ``|t * fp16(s) - w| <= 1e-3 s``), vectorized in numpy so a
    1.7B-parameter checkpoint takes seconds, not minutes. Returns the tensor and the max relative
    reconstruction error (0 for a ternary weight). Raises :class:`ModelFormatError` naming the
    tensor, row and group if a group is not ternary and ``quantize`` is false.
    """
    from runtime.formats.gguf_codecs import _pack2, _pack_t3_trits

    if w.ndim != 2:
        raise ModelFormatError(f"{source}: tensor {name} is not 2-D")
    rows, cols = w.shape
    if cols % group_size:
        raise NotTernaryError(f"{source}: tensor {name} width {cols} is not a multiple of group size {group_size}")
    groups = cols // group_size
    step = max(1, CHUNK_WEIGHTS // cols)
    ncodes = cols // 4 if encoding == T2 else groups * t3_bytes_per_group(group_size)
    codes = np.empty((rows, ncodes), dtype=np.uint8)
    scales = np.empty((rows, groups), dtype=np.float16)
    max_err = 0.0
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        x = w[r0:r1].detach().to(torch.float32).numpy().reshape(r1 - r0, groups, group_size)
        ax = np.abs(x)
        s = ax.max(-1, keepdims=True)
        s16 = s.astype(np.float16)
        nz = ax > s * np.float32(0.5)  # |round(x / s)| == 1
        # error |t * s16 - x| > tol  <=>  tol < |x| < s16 - tol   (as |x| <= s < s16 + tol)
        tol = s * np.float32(1e-3) + np.float32(1e-12)
        bad = (ax > tol) & (ax < s16.astype(np.float32) - tol)
        if quantize or bad.any():
            err = np.abs(ax - nz * s16.astype(np.float32))
            safe = np.where(s > 0, s, np.float32(1))
            max_err = max(max_err, float((err / safe).max()))
            if not quantize:
                r, g = (int(v) for v in np.argwhere(bad.any(-1))[0])
                raise NotTernaryError(
                    f"{source}: tensor {name} is not ternary: row {r0 + r}, group {g} has values other than "
                    f"{{-s, 0, +s}} (max relative error {max_err:.3g}); use --quantize to quantize it explicitly")
        nzu = nz.view(np.uint8)
        c = (nzu + np.uint8(1) - ((nzu & (x < 0).view(np.uint8)) << np.uint8(1))).reshape(r1 - r0, cols)
        codes[r0:r1] = _pack2(c) if encoding == T2 else _pack_t3_trits(c, group_size)
        scales[r0:r1] = s16.reshape(r1 - r0, groups)
    return TernaryTensor((rows, cols), group_size, torch.from_numpy(codes), torch.from_numpy(scales), encoding), max_err


# ------------------------------------------------------------------------------------------------
# safetensors

@dataclass
class _STEntry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute file offsets
    end: int


def read_safetensors_header(path: Path) -> dict[str, _STEntry]:
    """Validated tensor table of one ``.safetensors`` file (nothing allocated from untrusted sizes)."""
    path = require_file(path, "safetensors file")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelFormatError(f"{path.name}: truncated safetensors file ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_SAFETENSORS_HEADER or n > size - 8:
            raise ModelFormatError(f"{path.name}: corrupt safetensors: header length {n} does not fit the "
                                   f"{size}-byte file")
        raw = f.read(n)
    header = load_json(raw, f"{path.name}: corrupt safetensors header")
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path.name}: corrupt safetensors header (not an object)")
    data_start, data_size = 8 + n, size - 8 - n
    out: dict[str, _STEntry] = {}
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict):
            raise ModelFormatError(f"{path.name}: corrupt safetensors entry for {name!r} (not an object)")
        f = Fields(e, path.name, prefix=f"tensor {name} ")
        dtype = f.str("dtype")
        shape = tuple(f.int_list("shape", lo=0, hi=1 << 40, max_len=8))
        offsets = f.int_list("data_offsets", lo=0, hi=1 << 62, max_len=2)
        if len(offsets) != 2:
            raise f.fail("data_offsets", f"must be [begin, end], got {offsets}")
        b, en = offsets
        if dtype not in _ST_DTYPES:
            raise UnsupportedModelError(f"{path.name}: tensor {name} has dtype {dtype}, not a float type this reader takes")
        if any(d < 0 for d in shape) or len(shape) > 8:
            raise ModelFormatError(f"{path.name}: tensor {name} has a bad shape {list(shape)}")
        count = 1
        for d in shape:
            count *= d
        itemsize = np.dtype(_ST_DTYPES[dtype][0]).itemsize
        if not 0 <= b <= en <= data_size or en - b != count * itemsize:
            raise ModelFormatError(f"{path.name}: tensor {name} byte span {b}..{en} does not match its shape "
                                   f"{list(shape)} or the {data_size}-byte data section")
        spans.append((b, en, name))
        out[name] = _STEntry(path, dtype, shape, data_start + b, data_start + en)
    spans.sort()
    for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise ModelFormatError(f"{path.name}: tensors {n0} and {n1} overlap")
    return out


def has_bare_base_names(names: Iterable[str]) -> bool:
    """True for a checkpoint of the bare base model (``AutoModel.save_pretrained``, e.g.
    Qwen3-Embedding): ``embed_tokens.weight``, ``layers.N....``, ``norm.weight`` without the
    ``model.`` prefix the causal-LM checkpoints (and our canonical names) carry."""
    names = set(names)
    return "embed_tokens.weight" in names and "model.embed_tokens.weight" not in names


def base_model_name(stored: str) -> str:
    """The canonical name of a bare base-model tensor (``lm_head`` sits outside the base model)."""
    return stored if stored.startswith(("model.", "lm_head.")) else "model." + stored


def _read_text(path: Path) -> str:
    """A small text file, refusing absurd sizes and special files (a FIFO) before reading."""
    path = require_file(path, path.name)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise ModelFormatError(f"{path.name} is {size} bytes, too large for a model metadata file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{path.name}: not UTF-8 text ({exc.reason})") from None


def _read_json(path: Path, what: str) -> Any:
    return load_json(_read_text(path), f"{path.parent.name}/{what}")


def _token_id(tok_doc: dict[str, Any] | None, token: Any) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    if not isinstance(token, str) or tok_doc is None:
        return None
    for a in tok_doc.get("added_tokens", []):
        if a.get("content") == token:
            return int(a["id"])
    v = (tok_doc.get("model") or {}).get("vocab", {})
    tid = v.get(token) if isinstance(v, dict) else None
    return tid if isinstance(tid, int) and not isinstance(tid, bool) else None


def tokenizer_data_from_hf(tokenizer_json: str | None, tokenizer_config: Mapping[str, Any] | None,
                           chat_template: str | None, generation_config: Mapping[str, Any] | None,
                           config: Mapping[str, Any] | None = None, *, vocab_size: int | None = None,
                           folder: str = "") -> TokenizerData | None:
    """TokenizerData from the folder's files, every field checked against ``vocab_size`` (the
    embedding rows) with messages naming the file and field (``folder`` prefixes the file names)."""
    if tokenizer_json is None:
        return None
    pre = f"{folder}/" if folder else ""
    doc = check_tokenizer_json(tokenizer_json, f"{pre}tokenizer.json")
    tc = dict(tokenizer_config or {})
    gen = dict(generation_config or {})
    tcf = Fields(tc, f"{pre}tokenizer_config.json")
    if chat_template is None:
        ct = tc.get("chat_template")
        if isinstance(ct, list):  # [{"name": "default", "template": ...}, ...]
            ct = next((c.get("template") for c in ct if isinstance(c, dict) and c.get("name") == "default"), None)
        chat_template = ct if isinstance(ct, str) else None
    limit = vocab_size if vocab_size is not None else 1 << 62
    eos: list[int] = []
    sources = ((gen.get("eos_token_id"), f"{pre}generation_config.json", "eos_token_id"),
               (_token_id(doc, tc.get("eos_token")), f"{pre}tokenizer_config.json", "eos_token"),
               ((config or {}).get("eos_token_id"), f"{pre}config.json", "eos_token_id"))
    for value, where, field in sources:
        for v in check_token_ids(value, limit, where, field):
            if v not in eos:
                eos.append(v)
    bos = _token_id(doc, tc.get("bos_token"))
    pad = _token_id(doc, tc.get("pad_token"))
    for where, d in ((f"{pre}generation_config.json", gen), (f"{pre}config.json", config or {})):
        for field in ("pad_token_id", "bos_token_id"):  # checked even where another file's value wins
            check_token_ids(d.get(field), limit, where, field)
    if pad is None and isinstance(gen.get("pad_token_id"), int):
        pad = gen["pad_token_id"]
    for v, field in ((bos, "bos_token"), (pad, "pad_token")):
        if v is not None:
            check_token_id(v, limit, f"{pre}tokenizer_config.json", field)
    return TokenizerData(tokenizer_json=tokenizer_json, bos_token_id=bos, eos_token_ids=eos, pad_token_id=pad,
                         add_bos_token=tcf.bool("add_bos_token", False), chat_template=chat_template)


GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "do_sample", "max_new_tokens")


def generation_defaults_from_hf(gen: Mapping[str, Any] | None, source: str = "generation_config.json") -> dict[str, Any]:
    """The sampling defaults of ``generation_config.json``, each checked (NaN temperature is refused)."""
    return check_generation_defaults({k: v for k, v in (gen or {}).items() if k in GENERATION_KEYS}, source)


class HFSource:
    """A Hugging Face folder as a stream of canonical tensors (see module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], *, group_size: int = 128, quantize: bool = False,
                 ternary_encoding: str = T2, keep_dense: bool = False, strict: bool = False) -> None:
        """``keep_dense`` keeps every float tensor as stored (no ternary recovery): for dense
        models such as Qwen3-Embedding, which run on plain floating-point matmuls. Otherwise a
        matrix whose values are ternary per group is recovered as ternary, and one whose values
        are not stays dense (listed in ``dense_names``) unless ``quantize`` (lossy) or ``strict``
        (refused, naming tensor, row and group: what ``convert`` wants)."""
        self.path = Path(folder)
        self.keep_dense = keep_dense
        self.strict = strict
        self.dense_names: list[str] = []
        p = self.path
        if path_kind(p) != "folder":
            raise ModelFormatError(f"{p}: a Hugging Face model is a folder, not a file")
        if optional_file(p / "config.json", "config.json") is None:
            raise ModelFormatError(f"{p}: not a Hugging Face model folder (no config.json)")
        cfg_src = f"{p.name}/config.json"
        cfg = _read_json(p / "config.json", "config.json")
        if not isinstance(cfg, dict):
            raise ModelFormatError(f"{cfg_src}: not a JSON object")
        top = Fields(cfg, cfg_src)
        text_config = top.mapping("text_config", None)
        if text_config is not None and "hidden_size" not in cfg:
            cfg = {**text_config, "model_type": text_config.get("model_type", cfg.get("model_type"))}
        self.hf_config = cfg
        self.arch: ArchSpec = arch_for_hf(Fields(cfg, cfg_src).str("model_type"), top.raw("architectures", None))
        self.entries = self._index()
        names = [n for n in self.entries if not n.endswith(IGNORED_SUFFIXES)]
        if cfg.get("tie_word_embeddings") is True and "lm_head.weight" in names:
            names.remove("lm_head.weight")  # a duplicate of the embedding
        shapes = {n: self.entries[n].shape for n in names}
        self.config = self.arch.config_from_hf(cfg, shapes, source=cfg_src)
        check_tensor_set(self.config, shapes, source=p.name, names=HF_CONFIG_NAMES)
        expected = self.arch.expected_shapes(self.config)
        unknown = [n for n in names if n not in expected]
        if unknown:
            raise UnsupportedModelError(f"{p.name}: tensors this runtime does not know for "
                                        f"{cfg.get('model_type')}: {', '.join(unknown[:5])}")
        self.names = names

        def opt(fn: str) -> Path | None:
            return optional_file(p / fn, fn)

        tok_json = _read_text(p / "tokenizer.json") if opt("tokenizer.json") else None
        tc = _read_json(p / "tokenizer_config.json", "tokenizer_config.json") if opt("tokenizer_config.json") else {}
        gen = _read_json(p / "generation_config.json", "generation_config.json") if opt("generation_config.json") else {}
        tmpl = _read_text(p / "chat_template.jinja") if opt("chat_template.jinja") else None
        for doc, fn in ((tc, "tokenizer_config.json"), (gen, "generation_config.json")):
            if not isinstance(doc, dict):
                raise ModelFormatError(f"{p.name}/{fn}: not a JSON object")
        self.tokenizer = tokenizer_data_from_hf(tok_json, tc, tmpl, gen, cfg, vocab_size=self.config.vocab_size,
                                                folder=p.name)
        self.generation_defaults = generation_defaults_from_hf(gen, f"{p.name}/generation_config.json")
        self.group_size = group_size
        self.quantize = quantize
        self.ternary_encoding = ternary_encoding
        self.max_quant_error = 0.0
        self.model_name = p.name
        self._maps: dict[Path, mmap.mmap] = {}
        self._files: list[Any] = []

    def _index(self) -> dict[str, _STEntry]:
        p = self.path
        idx = p / "model.safetensors.index.json"
        if idx.is_file():
            doc = _read_json(idx, "model.safetensors.index.json")
            wm = doc.get("weight_map") if isinstance(doc, dict) else None
            if not isinstance(wm, dict):
                raise ModelFormatError(f"{idx.name}: no weight_map")
            for fn in wm.values():
                if not isinstance(fn, str) or os.path.basename(fn) != fn or not fn.endswith(".safetensors"):
                    raise ModelFormatError(f"{idx.name}: bad shard file name {str(fn)[:60]!r}")
            files = sorted(set(wm.values()))
            for fn in files:
                if optional_file(p / fn, f"shard {fn}") is None:
                    raise ModelFormatError(f"{p.name}: shard {fn} listed in {idx.name} is missing")
        else:
            files = sorted(f.name for f in p.glob("*.safetensors"))
            if not files:
                raise ModelFormatError(f"{p.name}: no .safetensors files (PyTorch .bin checkpoints are not read)")
        stored_entries: dict[str, _STEntry] = {}
        for fn in files:
            for stored, e in read_safetensors_header(p / fn).items():
                if stored in stored_entries:
                    raise ModelFormatError(f"{p.name}: tensor {stored} appears in two shards")
                stored_entries[stored] = e
        bare = has_bare_base_names(stored_entries)
        entries: dict[str, _STEntry] = {}
        for stored, e in stored_entries.items():
            full = base_model_name(stored) if bare else stored
            name = self.arch.hf_name_fn(full) if self.arch.hf_name_fn is not None else full
            if name is None:
                continue  # e.g. a vision tower the text model does not use
            if name in entries:
                raise ModelFormatError(f"{p.name}: tensor {name} appears in two shards")
            entries[name] = e
        return entries

    def _map(self, path: Path) -> mmap.mmap:
        if path not in self._maps:
            f = open(path, "rb")  # noqa: SIM115 - closed in close()
            self._files.append(f)
            self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        return self._maps[path]

    def raw_tensor(self, name: str) -> torch.Tensor:
        """Zero-copy torch view of a stored tensor (copy-on-write mapping)."""
        e = self.entries[name]
        npdt, tdt = _ST_DTYPES[e.dtype]
        count = (e.end - e.begin) // np.dtype(npdt).itemsize
        if count == 0:
            return torch.empty(e.shape, dtype=tdt)
        t = torch.frombuffer(self._map(e.file), dtype=torch.int16 if e.dtype == "BF16" else tdt,
                             count=count, offset=e.begin)
        return (t.view(torch.bfloat16) if e.dtype == "BF16" else t).reshape(e.shape)

    def tensor_names(self) -> list[str]:
        return list(self.names)

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    def tensor_spec(self, name: str) -> TensorSpec:
        e = self.entries[name]
        if self.arch.is_ternary(name, e.shape) and not self.keep_dense:
            return TensorSpec(name, self.ternary_encoding, e.shape, self.group_size)
        return TensorSpec(name, {"F16": "f16", "BF16": "bf16"}.get(e.dtype, "f32"), e.shape)

    def load(self, name: str) -> Tensor:
        w = self.raw_tensor(name)
        check_float_values(w, name, self.entries[name].file.name, self.entries[name].dtype)  # F16 bytes typed BF16?
        if self.arch.is_ternary(name, tuple(w.shape)) and not self.keep_dense:
            try:
                t, err = ternarize(w, name, self.group_size, quantize=self.quantize,
                                   encoding=self.ternary_encoding, source=self.path.name)
                self.max_quant_error = max(self.max_quant_error, err)
            except NotTernaryError:
                if self.strict:
                    raise
                t = DenseTensor(w.to(torch.float32) if w.dtype == torch.float64 else w.clone())
                self.dense_names.append(name)
        else:
            t = DenseTensor(w.to(torch.float32) if w.dtype == torch.float64 else w.clone())
        if self.arch.tensor_from_hf is not None:
            t = self.arch.tensor_from_hf(name, t, self.config)
        e = self.entries[name]
        del w  # the result is a copy: the mapped pages are no longer needed
        release(self._maps.get(e.file), e.begin, e.end - e.begin)
        return t

    def iter_tensors(self) -> Iterator[tuple[str, Tensor]]:
        for n in self.names:
            yield n, self.load(n)

    @property
    def source_format(self) -> str:
        return "hf-safetensors"

    def provenance(self) -> Provenance:
        return Provenance(source_name=self.path.name, source_format=self.source_format)

    def close(self) -> None:
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:
                pass  # views still alive; released with them
        for f in self._files:
            f.close()
        self._maps.clear()
        self._files.clear()

    def __enter__(self) -> HFSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_hf_folder(folder: str | os.PathLike[str], **kw: Any) -> ModelData:
    with HFSource(folder, **kw) as src:
        tensors = dict(src.iter_tensors())
        notice = None if src.keep_dense else dense_matrices_notice(src.config, tensors)
        return ModelData(config=src.config, tensors=tensors, tokenizer=src.tokenizer,
                         generation_defaults=src.generation_defaults, provenance=src.provenance(),
                         name=src.model_name, notices=[notice] if notice else [])


def model_data_from_state_dict(config_dict: Mapping[str, Any], state: Mapping[str, torch.Tensor], *,
                               group_size: int = 128, quantize: bool = False, tokenizer_json: str | None = None,
                               tokenizer_config: Mapping[str, Any] | None = None, chat_template: str | None = None,
                               generation_config: Mapping[str, Any] | None = None, name: str = "",
                               keep_dense: bool = False) -> ModelData:
    """In-memory variant of :func:`read_hf_folder` (for tests and tools that hold a model)."""
    arch = arch_for_hf(str(config_dict.get("model_type")), config_dict.get("architectures"))
    if has_bare_base_names(state):
        state = {base_model_name(k): v for k, v in state.items()}
    if arch.hf_name_fn is not None:
        state = {c: v for k, v in state.items() if (c := arch.hf_name_fn(k)) is not None}
    state = {k: v for k, v in state.items() if not k.endswith(IGNORED_SUFFIXES)}
    if config_dict.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    config = arch.config_from_hf(config_dict, shapes, source=name or "config")
    check_tensor_set(config, shapes, source=name or "state dict", names=HF_CONFIG_NAMES)
    tensors: dict[str, Tensor] = {}
    for k, v in state.items():
        if arch.is_ternary(k, tuple(v.shape)) and not keep_dense:
            tensors[k], _ = ternarize(v, k, group_size, quantize=quantize, source=name or "state dict")
        else:
            tensors[k] = DenseTensor(v.detach().clone())
        if arch.tensor_from_hf is not None:
            tensors[k] = arch.tensor_from_hf(k, tensors[k], config)
    tok = tokenizer_data_from_hf(tokenizer_json, tokenizer_config, chat_template, generation_config, config_dict,
                                 vocab_size=config.vocab_size)
    return ModelData(config=config, tensors=tensors, tokenizer=tok,
                     generation_defaults=generation_defaults_from_hf(generation_config),
                     provenance=Provenance(source_name=name, source_format="hf-state-dict"), name=name)
