"""The native ``.ternary`` model file (format version 2): read with mmap, write atomically.

Why a native format: the canonical in-memory layout (model_data.py) is written verbatim, each
tensor 4096-byte aligned, so loading is a memory map plus zero-copy ``torch.frombuffer`` views
(and a direct GPU upload), with no decoding and no permutation at load time. Byte layout
(``docs/format.md`` is the full specification)::

    0   8 bytes  magic  b"BONSAI2\\0"
    8   u32 LE   format version = 2
    12  u64 LE   header length N
    20  N bytes  UTF-8 JSON header (config, tokenizer, chat template, generation defaults,
                 provenance, tensor table)
    ..  zero padding; tensor data at the absolute offsets of the table (multiples of 4096)

A ternary tensor's span is its codes (``rows x codes_per_row`` bytes) then zero padding to a
multiple of 64, then fp16 scales ``[rows, cols / group_size]`` at ``offset + scales_offset``.
Every tensor has a ``crc32`` of its whole span. Readers refuse with :class:`ModelFormatError`
(one clear line) anything inconsistent, before allocating anything from untrusted sizes.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime import __version__
from runtime.atomic import atomic_output
from runtime.errors import CancelledError, ModelFormatError
from runtime.formats.arch import check_tensor_set, get_arch
from runtime.formats.config_schema import (
    GENERATION_FLAGS,
    GENERATION_LIMITS,
    HEADER_NAMES,
    Fields,
    check_generation_defaults,
    config_from_header,
    load_json,
)
from runtime.formats.dtype_check import check_float_values
from runtime.formats.file_checks import require_file
from runtime.formats.mmap_pages import release
from runtime.formats.model_data import (
    T2,
    T3,
    DenseTensor,
    ModelData,
    Provenance,
    Tensor,
    TernaryTensor,
    TokenizerData,
    t3_bytes_per_group,
)
from runtime.formats.sniff import TERNARY_MAGIC, describe_bytes
from runtime.model.config import ModelConfig

FORMAT_VERSION = 2
PREAMBLE = struct.Struct("<8sIQ")  # magic, version, header length
ALIGNMENT = 4096
SCALES_ALIGNMENT = 64
MAX_HEADER_BYTES = 256 << 20
MAX_DIM = 1 << 40
MAX_ELEMENTS = 1 << 48
DENSE_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DENSE_DTYPES.items()}
ENCODINGS = (T2, T3, *DENSE_DTYPES)


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor will be, known before its data (the header precedes the data)."""

    name: str
    encoding: str  # t2 | t3 | f32 | f16 | bf16
    shape: tuple[int, ...]
    group_size: int = 0  # ternary only

    def layout(self) -> tuple[int, int, int]:
        """(codes_nbytes, scales_offset, nbytes) for ternary; (nbytes, nbytes, nbytes) for dense."""
        if self.encoding in (T2, T3):
            rows, cols = self.shape
            groups = cols // self.group_size
            codes = rows * (cols // 4 if self.encoding == T2 else groups * t3_bytes_per_group(self.group_size))
            so = _align(codes, SCALES_ALIGNMENT)
            return codes, so, so + rows * groups * 2
        n = 1
        for d in self.shape:
            n *= d
        nb = n * torch.tensor([], dtype=DENSE_DTYPES[self.encoding]).element_size()
        return nb, nb, nb


def spec_of(name: str, t: Tensor) -> TensorSpec:
    if isinstance(t, TernaryTensor):
        return TensorSpec(name, t.encoding, tuple(t.shape), t.group_size)
    if t.data.dtype not in DTYPE_NAMES:
        raise ValueError(f"tensor {name}: dtype {t.data.dtype} cannot be stored (f32, f16, bf16 only)")
    return TensorSpec(name, DTYPE_NAMES[t.data.dtype], tuple(t.shape))


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _bytes_of(t: torch.Tensor) -> memoryview:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


# ================================================================================================
# writer

def write_ternary(path: str | os.PathLike[str], *, config: ModelConfig, specs: list[TensorSpec],
                  tensors: Iterable[tuple[str, Tensor]], tokenizer: TokenizerData | None = None,
                  generation_defaults: dict[str, Any] | None = None, provenance: Provenance | None = None,
                  name: str = "", progress: Callable[[int, int, str], None] | None = None,
                  cancel: Callable[[], bool] | None = None) -> Path:
    """Stream ``tensors`` (in ``specs`` order) into a new ``.ternary`` file, atomically.

    ``progress(done_bytes, total_bytes, tensor_name)`` is called after each tensor; when
    ``cancel()`` returns true the write stops with :class:`CancelledError` and no file is left.
    """
    path = Path(path)
    prov = provenance or Provenance()
    if not prov.converter_version:
        prov = Provenance(**{**asdict(prov), "converter_version": f"ternary-chat {__version__}"})
    tok = None
    if tokenizer is not None:
        tok = {"tokenizer_json": tokenizer.tokenizer_json, "bos_token_id": tokenizer.bos_token_id,
               "eos_token_ids": list(tokenizer.eos_token_ids), "pad_token_id": tokenizer.pad_token_id,
               "add_bos_token": bool(tokenizer.add_bos_token)}
    base = {
        "format": "ternary", "version": FORMAT_VERSION, "alignment": ALIGNMENT, "name": name,
        "config": config.to_dict(), "tokenizer": tok,
        "chat_template": tokenizer.chat_template if tokenizer is not None else None,
        "generation_defaults": dict(generation_defaults or {}), "provenance": asdict(prov),
    }
    placeholder = "crc32:" + "0" * 8

    def header_for(data_start: int, checksums: dict[str, str]) -> tuple[bytes, list[dict[str, Any]], int]:
        table, off = [], data_start
        for s in specs:
            _codes, so, nb = s.layout()
            e: dict[str, Any] = {"name": s.name, "encoding": s.encoding, "shape": list(s.shape)}
            if s.encoding in (T2, T3):
                e["group_size"] = s.group_size
                e["scales_offset"] = so
            e.update(offset=off, nbytes=nb, checksum=checksums.get(s.name, placeholder))
            table.append(e)
            off = _align(off + nb, ALIGNMENT)
        end = table[-1]["offset"] + table[-1]["nbytes"] if table else data_start
        doc = dict(base, file_size=end, tensors=table)
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), table, end

    data_start = ALIGNMENT
    for _ in range(8):  # the header's length depends on the offsets it lists; iterate to a fixpoint
        hdr, table, total = header_for(data_start, {})
        need = _align(PREAMBLE.size + len(hdr), ALIGNMENT)
        if need == data_start:
            break
        data_start = need
    else:  # pragma: no cover - offsets only grow, so this converges in two or three steps
        raise AssertionError("header layout did not converge")

    total_bytes = sum(e["nbytes"] for e in table)
    done = 0
    checksums: dict[str, str] = {}
    with atomic_output(path) as f:
        stream = iter(tensors)
        for s, e in zip(specs, table, strict=True):
            if cancel is not None and cancel():
                raise CancelledError("conversion cancelled")
            got_name, t = next(stream, (None, None))
            if got_name != s.name or t is None:
                raise ValueError(f"tensor stream out of order: expected {s.name}, got {got_name}")
            actual = spec_of(s.name, t)
            if actual != s:
                raise ValueError(f"tensor {s.name}: planned {s}, got {actual}")
            f.seek(e["offset"])
            crc = 0
            if isinstance(t, TernaryTensor):
                codes_nb, so, _nb = s.layout()
                for chunk in (_bytes_of(t.codes), b"\0" * (so - codes_nb), _bytes_of(t.scales)):
                    f.write(chunk)
                    crc = zlib.crc32(chunk, crc)
            else:
                chunk = _bytes_of(t.data)
                f.write(chunk)
                crc = zlib.crc32(chunk, crc)
            checksums[s.name] = f"crc32:{crc:08x}"
            done += e["nbytes"]
            del t
            if progress is not None:
                progress(done, total_bytes, s.name)
        if next(stream, None) is not None:
            raise ValueError("tensor stream has more tensors than planned")
        final, _table, end = header_for(data_start, checksums)
        if len(final) != len(hdr):
            raise AssertionError("header length changed while writing")
        f.seek(0)
        f.write(PREAMBLE.pack(TERNARY_MAGIC, FORMAT_VERSION, len(final)))
        f.write(final)
        f.truncate(max(end, data_start))
    return path


def write_model(model: ModelData, path: str | os.PathLike[str], **kw: Any) -> Path:
    """Write an in-memory ModelData as ``.ternary``."""
    specs = [spec_of(n, t) for n, t in model.tensors.items()]
    return write_ternary(path, config=model.config, specs=specs, tensors=model.tensors.items(),
                         tokenizer=model.tokenizer, generation_defaults=model.generation_defaults,
                         provenance=model.provenance, name=model.name, **kw)


# ================================================================================================
# reader

def _fail(name: str, msg: str) -> ModelFormatError:
    return ModelFormatError(f"{name}: {msg}")


def _is_int(v: Any, lo: int = 0, hi: int = 1 << 62) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


class TernaryFile:
    """A validated, memory-mapped ``.ternary`` file. Tensors are zero-copy views of the mapping."""

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = False) -> None:
        self.path = require_file(path, ".ternary file")
        name = self.path.name
        self.size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            pre = f.read(PREAMBLE.size)
            if len(pre) < PREAMBLE.size or not pre.startswith(TERNARY_MAGIC):
                head = pre + f.read(512)
                if pre.startswith(TERNARY_MAGIC) or (len(pre) < 8 and TERNARY_MAGIC.startswith(pre) and pre):
                    raise _fail(name, f"truncated file: {self.size} bytes, too short for a .ternary header")
                raise _fail(name, f"not a .ternary file: this is {describe_bytes(head, self.size)}")
            _magic, version, hlen = PREAMBLE.unpack(pre)
            if version != FORMAT_VERSION:
                raise _fail(name, f"version mismatch: expected {FORMAT_VERSION}, got {version}")
            if hlen > MAX_HEADER_BYTES:
                raise _fail(name, f"header length {hlen} is absurd (limit {MAX_HEADER_BYTES}); the file is corrupt")
            if hlen > self.size - PREAMBLE.size:
                raise _fail(name, f"truncated file: the header needs {hlen} bytes, only "
                                  f"{self.size - PREAMBLE.size} follow")
            raw = f.read(hlen)
            if len(raw) != hlen:
                raise _fail(name, "truncated file while reading the header")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if self.size else None
        header = load_json(raw, f"{name}: corrupt header")
        if not isinstance(header, dict):
            raise _fail(name, "corrupt header: not a JSON object")
        self.header = header
        self.header_length = hlen
        self._validate()
        self._validate_extras()
        if verify:
            self.verify()

    # ---- validation ---------------------------------------------------------------------------
    def _validate(self) -> None:
        h, name = self.header, self.path.name
        if h.get("version") != FORMAT_VERSION:
            raise _fail(name, f"version mismatch: expected {FORMAT_VERSION}, got {h.get('version')!r} in the header")
        fsize = h.get("file_size")
        if not _is_int(fsize):
            raise _fail(name, "corrupt header: file_size missing")
        if fsize > self.size:
            raise _fail(name, f"truncated file: expected {fsize} bytes, got {self.size}")
        if fsize < self.size:
            raise _fail(name, f"file is {self.size} bytes but its header says {fsize} (trailing data; corrupt?)")
        cfg = h.get("config")
        if not isinstance(cfg, dict):
            raise _fail(name, "corrupt header: config missing")
        self.config = config_from_header(cfg, name)
        get_arch(self.config.arch)  # unsupported architecture -> UnsupportedModelError
        table = h.get("tensors")
        if not isinstance(table, list):
            raise _fail(name, "corrupt header: tensor table missing")
        data_start = PREAMBLE.size + self.header_length
        self.entries: dict[str, dict[str, Any]] = {}
        self.specs: dict[str, TensorSpec] = {}
        spans = []
        for i, e in enumerate(table):
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                raise _fail(name, f"corrupt header: tensor entry #{i} has no name")
            tn = e["name"]
            if tn in self.entries:
                raise _fail(name, f"corrupt header: tensor {tn} listed twice")
            enc = e.get("encoding")
            if enc not in ENCODINGS:
                raise _fail(name, f"unknown tensor encoding {enc!r} for tensor {tn} (known: {', '.join(ENCODINGS)})")
            shape = e.get("shape")
            if (not isinstance(shape, list) or not 1 <= len(shape) <= 4
                    or not all(_is_int(d, 1, MAX_DIM) for d in shape)):
                raise _fail(name, f"tensor {tn}: bad shape {shape!r}")
            n = 1
            for d in shape:
                n *= d
            if n > MAX_ELEMENTS:
                raise _fail(name, f"tensor {tn}: shape {shape} overflows")
            gs = e.get("group_size", 0)
            if enc in (T2, T3):
                if len(shape) != 2:
                    raise _fail(name, f"tensor {tn}: ternary tensors must be 2-D, got shape {shape}")
                if not _is_int(gs, 1, 1 << 20) or shape[1] % gs or (enc == T2 and gs % 4):
                    raise _fail(name, f"tensor {tn}: group size {gs!r} does not fit width {shape[1]}")
            spec = TensorSpec(tn, enc, tuple(shape), gs if enc in (T2, T3) else 0)
            _codes, so, nb = spec.layout()
            off = e.get("offset")
            if not _is_int(off) or off % ALIGNMENT or off < data_start:
                raise _fail(name, f"tensor {tn}: offset {off!r} is out of range or not {ALIGNMENT}-aligned")
            if e.get("nbytes") != nb or (enc in (T2, T3) and e.get("scales_offset") != so):
                raise _fail(name, f"tensor {tn}: byte size {e.get('nbytes')!r} does not match shape {shape} "
                                  f"and encoding {enc}")
            if off + nb > self.size:
                raise _fail(name, f"tensor {tn}: bytes {off}..{off + nb} are past the end of the "
                                  f"{self.size}-byte file (truncated?)")
            ck = e.get("checksum")
            if not isinstance(ck, str) or not (
                    (ck.startswith("crc32:") and len(ck) == 14) or (ck.startswith("sha256:") and len(ck) == 71)):
                raise _fail(name, f"tensor {tn}: missing or malformed checksum {ck!r}")
            spans.append((off, off + nb, tn))
            self.entries[tn] = e
            self.specs[tn] = spec
        spans.sort()
        for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:], strict=False):
            if b1 < e0:
                raise _fail(name, f"tensors {n0} and {n1} overlap")
        check_tensor_set(self.config, {n: s.shape for n, s in self.specs.items()}, source=name, names=HEADER_NAMES)
        expected = get_arch(self.config.arch).expected_shapes(self.config)
        extra = [n for n in self.specs if n not in expected]
        if extra:
            why = (" (config.tie_word_embeddings is true, so the file should have no lm_head.weight)"
                   if self.config.tie_word_embeddings and "lm_head.weight" in extra else "")
            raise _fail(name, f"tensors not part of a {self.config.arch} model: {', '.join(extra[:3])}{why}")

    def _validate_extras(self) -> None:
        """Tokenizer entry, generation defaults, name and provenance: typed, ids inside the vocabulary."""
        h, name = self.header, self.path.name
        self._generation_defaults = check_generation_defaults(
            h.get("generation_defaults"), name,
            {k: f"generation_defaults.{k}" for k in (*GENERATION_LIMITS, *GENERATION_FLAGS)}, "generation_defaults")
        f = Fields(h, name)
        self._name = f.str("name", "")
        prov = f.mapping("provenance", {})
        pf = Fields(prov, name, prefix="provenance.")
        self._provenance = Provenance(**{k: pf.str(k, "") for k in ("source_name", "source_sha256", "source_format",
                                                                    "converter_version")})
        self._tokenizer: TokenizerData | None = None
        tok = f.mapping("tokenizer", None)
        if tok is None:
            return
        t = Fields(tok, name, prefix="tokenizer.")
        if not isinstance(tok.get("tokenizer_json"), str):
            raise _fail(name, "corrupt header: tokenizer.tokenizer_json must be a tokenizer.json document (text)")
        vocab = self.config.vocab_size
        data = TokenizerData(
            tokenizer_json=tok["tokenizer_json"], bos_token_id=t.int("bos_token_id", None, hi=vocab - 1),
            eos_token_ids=t.int_list("eos_token_ids", [], hi=vocab - 1, max_len=1024),
            pad_token_id=t.int("pad_token_id", None, hi=vocab - 1), add_bos_token=t.bool("add_bos_token", False),
            chat_template=f.str("chat_template", None),
        )
        self._tokenizer = data

    # ---- data ---------------------------------------------------------------------------------
    def _view(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        if count == 0:
            return torch.empty(0, dtype=dtype)
        return torch.frombuffer(self._mm, dtype=dtype, count=count, offset=offset)

    def checksum_ok(self, tensor_name: str) -> bool:
        e = self.entries[tensor_name]
        data = np.frombuffer(self._mm, dtype=np.uint8, count=e["nbytes"], offset=e["offset"])
        algo, _, want = e["checksum"].partition(":")
        if algo == "crc32":
            crc = 0
            for i in range(0, data.size, 64 << 20):
                crc = zlib.crc32(data[i:i + (64 << 20)], crc)
            return f"{crc:08x}" == want.lower()
        import hashlib

        return hashlib.sha256(data).hexdigest() == want.lower()

    def verify(self, names: Iterable[str] | None = None) -> None:
        """Check tensor checksums (all by default); raises naming the first bad tensor."""
        for n in names if names is not None else self.entries:
            if not self.checksum_ok(n):
                raise _fail(self.path.name, f"checksum mismatch in tensor {n} (the file is corrupt)")

    def tensor(self, tensor_name: str) -> Tensor:
        """Zero-copy view of one tensor (copy-on-write: writing to it never touches the file)."""
        s, e = self.specs[tensor_name], self.entries[tensor_name]
        off = e["offset"]
        if s.encoding in (T2, T3):
            rows, cols = s.shape
            codes_nb, so, _ = s.layout()
            codes = self._view(off, codes_nb, torch.uint8).reshape(rows, codes_nb // rows)
            scales = self._view(off + so, rows * (cols // s.group_size), torch.float16).reshape(rows, cols // s.group_size)
            return TernaryTensor((rows, cols), s.group_size, codes, scales, s.encoding)
        dt = DENSE_DTYPES[s.encoding]
        n = int(np.prod(s.shape))
        if dt == torch.bfloat16:
            data = self._view(off, n, torch.int16).view(torch.bfloat16).reshape(s.shape)
        else:
            data = self._view(off, n, dt).reshape(s.shape)
        check_float_values(data, tensor_name, self.path.name, s.encoding.upper())  # a relabelled dtype
        return DenseTensor(data)

    @property
    def tokenizer(self) -> TokenizerData | None:
        return self._tokenizer

    def provenance(self) -> Provenance:
        return self._provenance

    def to_model_data(self) -> ModelData:
        return ModelData(config=self.config, tensors={n: self.tensor(n) for n in self.specs},
                         tokenizer=self.tokenizer, generation_defaults=dict(self._generation_defaults),
                         provenance=self.provenance(), name=self._name)

    # source protocol (so a .ternary can be re-converted or inspected like any other source)
    def tensor_names(self) -> list[str]:
        return list(self.specs)

    def tensor_shape(self, n: str) -> tuple[int, ...]:
        return self.specs[n].shape

    def tensor_spec(self, n: str) -> TensorSpec:
        return self.specs[n]

    def load(self, n: str) -> Tensor:
        return self.tensor(n)

    @property
    def generation_defaults(self) -> dict[str, Any]:
        return dict(self._generation_defaults)

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def source_format(self) -> str:
        return "ternary"

    def release_pages(self, name: str) -> None:
        """Give back the mapped pages of tensor ``name`` once a reader is done with it (export, convert)."""
        e = self.entries.get(name)
        if e is not None:
            release(self._mm, int(e.get("offset", 0)), int(e.get("nbytes", 0)))

    def close(self) -> None:
        """Drop this object's reference to the mapping (views keep it alive until they go)."""
        self._mm = None

    def __enter__(self) -> TernaryFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_ternary(path: str | os.PathLike[str], *, verify: bool = False) -> ModelData:
    """Open, validate (and with ``verify`` checksum) a ``.ternary`` file -> ModelData of zero-copy views."""
    return TernaryFile(path, verify=verify).to_model_data()
