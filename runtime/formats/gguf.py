"""GGUF v2/v3 reader, written by us (the ``gguf`` package does not know PrismML's types).

Why our own: we must read types 42 (g64 and legacy g128), 142 and 143, and we must refuse hostile
files before allocating anything. Every count and length is checked against the bytes left in
the file *before* it is used; tensor dims are checked for overflow, offsets for alignment and
range, byte spans for overlap. The file is memory-mapped and tensors are decoded one at a time,
on request (:meth:`GGUFFile.load_tensor`), so a converter's peak memory is about one tensor.

Tensor names are mapped to canonical Hugging Face names through the architecture registry
(:mod:`runtime.formats.arch`). GGUF dims are reversed (``ne[0]`` is the input / last dim); here
every ``shape`` is in torch order.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.errors import ModelFormatError, UnsupportedModelError
from runtime.formats import gguf_codecs as gc
from runtime.formats.arch import (
    ArchSpec,
    arch_for_gguf,
    check_tensor_set,
    dense_matrices_notice,
    gguf_config_names,
)
from runtime.formats.config_schema import MAX_LAYERS, Fields, check_generation_defaults
from runtime.formats.dtype_check import check_float_values
from runtime.formats.file_checks import require_file
from runtime.formats.mmap_pages import release
from runtime.formats.model_data import T2, T3, DenseTensor, ModelData, Provenance, Tensor, TernaryTensor
from runtime.formats.ternary_file import TensorSpec

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ELEMENTS = 1 << 50
MAX_ARRAY_DEPTH = 3

# value types
(T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64) = range(13)
_SCALAR = {
    T_U8: ("<B", 1, np.uint8), T_I8: ("<b", 1, np.int8), T_U16: ("<H", 2, np.uint16),
    T_I16: ("<h", 2, np.int16), T_U32: ("<I", 4, np.uint32), T_I32: ("<i", 4, np.int32),
    T_F32: ("<f", 4, np.float32), T_BOOL: ("<?", 1, np.uint8), T_U64: ("<Q", 8, np.uint64),
    T_I64: ("<q", 8, np.int64), T_F64: ("<d", 8, np.float64),
}


@dataclass
class GGUFTensorInfo:
    name: str  # GGUF name
    shape: tuple[int, ...]  # torch order (GGUF ne reversed)
    gtype: gc.GGMLType
    offset: int  # absolute file offset
    nbytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Cursor:
    """Bounds-checked little-endian reads over a buffer."""

    def __init__(self, buf: Any, size: int, what: str) -> None:
        self.buf, self.size, self.pos, self.what = buf, size, 0, what

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.left():
            raise ModelFormatError(
                f"{self.what}: truncated or corrupt GGUF: {what} needs {n} bytes at offset {self.pos}, "
                f"only {self.left()} left"
            )

    def unpack(self, fmt: str, n: int, what: str) -> Any:
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(f"{what} length")
        self.need(n, f"{what} ({n} bytes)")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            fmt, size, _ = _SCALAR[vtype]
            v = self.unpack(fmt, size, what)
            if vtype == T_F32:  # shortest decimal that is this f32 (1e-6, not 9.99999997e-07)
                return float(repr(np.float32(v)).removeprefix("np.float32(").removesuffix(")"))
            return bool(v) if vtype == T_BOOL else v
        if vtype == T_STR:
            return self.string(what)
        if vtype == T_ARR:
            if depth >= MAX_ARRAY_DEPTH:
                raise ModelFormatError(f"{self.what}: {what}: arrays nested too deeply")
            etype = self.u32(f"{what} element type")
            count = self.u64(f"{what} element count")
            if etype in _SCALAR:
                _, size, dt = _SCALAR[etype]
                self.need(count * size, f"{what} ({count} elements)")
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
                self.pos += count * size
                return arr.astype(bool) if etype == T_BOOL else arr
            if etype == T_STR:
                self.need(count * 8, f"{what} ({count} strings)")
                return [self.string(f"{what}[{i}]") for i in range(count)]
            if etype == T_ARR:
                self.need(count * 12, f"{what} ({count} arrays)")
                return [self.value(T_ARR, f"{what}[{i}]", depth + 1) for i in range(count)]
            raise ModelFormatError(f"{self.what}: {what}: unknown array element type {etype}")
        raise ModelFormatError(f"{self.what}: {what}: unknown metadata value type {vtype}")


class GGUFFile:
    """A validated, memory-mapped GGUF file. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = require_file(path, "GGUF file")
        self.size = self.path.stat().st_size
        self._file = open(self.path, "rb")  # noqa: SIM115 - lives as long as the mapping
        try:
            if self.size < 24:
                raise ModelFormatError(f"{self.path.name}: truncated GGUF ({self.size} bytes)")
            self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                self._parse()
            except BaseException:
                with contextlib.suppress(BufferError):
                    self._mm.close()
                raise
        except BaseException:
            self._file.close()
            raise

    # ---- parsing --------------------------------------------------------------------------------
    def _parse(self) -> None:
        name = self.path.name
        c = _Cursor(self._mm, self.size, name)  # no memoryview: it would pin the mapping on errors
        if c.buf[:4] != GGUF_MAGIC:
            raise ModelFormatError(f"{name}: not a GGUF file (bad magic)")
        c.pos = 4
        version = c.u32("version")
        if version in (1,):
            raise ModelFormatError(f"{name}: GGUF version 1 is not supported (re-convert with a current llama.cpp)")
        if version not in (2, 3):
            if version & 0xFFFF == 0 and (version >> 24) in (2, 3):
                raise ModelFormatError(f"{name}: big-endian GGUF files are not supported")
            raise ModelFormatError(f"{name}: GGUF version mismatch: expected 2 or 3, got {version}")
        self.version = version
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("metadata count")
        if n_kv > c.left() // 13:
            raise ModelFormatError(f"{name}: corrupt GGUF: metadata count {n_kv} cannot fit in {self.size} bytes")
        if n_tensors > c.left() // 24:
            raise ModelFormatError(f"{name}: corrupt GGUF: tensor count {n_tensors} cannot fit in {self.size} bytes")
        meta: dict[str, Any] = {}
        for i in range(n_kv):
            key = c.string(f"metadata key #{i}")
            if key in meta:
                raise ModelFormatError(f"{name}: corrupt GGUF: duplicate metadata key {key!r}")
            vtype = c.u32(f"type of {key!r}")
            meta[key] = c.value(vtype, f"metadata {key!r}")
        self.metadata = meta
        align = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if (not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align & (align - 1)
                or align > 1 << 20):
            raise ModelFormatError(f"{name}: corrupt GGUF: general.alignment {align!r} is not a power of two")
        self.alignment = align
        raw_infos = []
        seen: set[str] = set()
        for i in range(n_tensors):
            tname = c.string(f"tensor #{i} name")
            if tname in seen:
                raise ModelFormatError(f"{name}: corrupt GGUF: duplicate tensor name {tname!r}")
            seen.add(tname)
            ndims = c.u32(f"tensor {tname!r} dim count")
            if ndims == 0 or ndims > MAX_DIMS:
                raise ModelFormatError(f"{name}: corrupt GGUF: tensor {tname!r} has {ndims} dims (1..{MAX_DIMS} allowed)")
            ne = [c.u64(f"tensor {tname!r} dim") for _ in range(ndims)]
            n = 1
            for d in ne:
                if d == 0 or d > MAX_ELEMENTS:
                    raise ModelFormatError(f"{name}: corrupt GGUF: tensor {tname!r} has dims {ne}")
                n *= d
                if n > MAX_ELEMENTS:
                    raise ModelFormatError(f"{name}: corrupt GGUF: tensor {tname!r} dims {ne} overflow")
            type_id = c.u32(f"tensor {tname!r} type")
            offset = c.u64(f"tensor {tname!r} offset")
            raw_infos.append((tname, ne, type_id, offset, n))
        data_start = (c.pos + align - 1) // align * align
        if data_start > self.size:
            raise ModelFormatError(f"{name}: truncated GGUF: no tensor data after the header")
        self.data_start = data_start
        data_size = self.size - data_start
        # byte spans: end of each tensor = next tensor's offset (for type-42 layout detection)
        by_offset = sorted(raw_infos, key=lambda r: r[3])
        span_end = {}
        for j, r in enumerate(by_offset):
            span_end[r[0]] = by_offset[j + 1][3] if j + 1 < len(by_offset) else data_size
        q2_layout = self._detect_q2_layout(raw_infos, span_end)
        infos: dict[str, GGUFTensorInfo] = {}
        for tname, ne, type_id, offset, n in raw_infos:
            gtype = gc.TYPES_BY_ID.get(type_id)
            if gtype is None:
                raise UnsupportedModelError(
                    f"{name}: tensor {tname!r} uses GGML type {gc.type_name(type_id)}, which this runtime does not read"
                )
            if gtype is gc.Q2_0:
                gtype = q2_layout
            if ne[0] % gtype.block_size:
                raise ModelFormatError(
                    f"{name}: corrupt GGUF: tensor {tname!r} row width {ne[0]} is not a multiple of the "
                    f"{gtype.name} block size {gtype.block_size}"
                )
            if offset % align:
                raise ModelFormatError(f"{name}: corrupt GGUF: tensor {tname!r} offset {offset} is not {align}-aligned")
            nbytes = gtype.nbytes(n)
            if offset > data_size or nbytes > data_size - offset:
                raise ModelFormatError(
                    f"{name}: truncated or corrupt GGUF: tensor {tname!r} needs bytes {offset}..{offset + nbytes} "
                    f"of a {data_size}-byte data section"
                )
            if nbytes > span_end[tname] - offset:
                raise ModelFormatError(f"{name}: corrupt GGUF: tensor {tname!r} overlaps the next tensor")
            infos[tname] = GGUFTensorInfo(tname, tuple(reversed(ne)), gtype, data_start + offset, nbytes)
        self.tensors = infos

    def _detect_q2_layout(self, raw_infos: list, span_end: dict[str, int]) -> gc.GGMLType:
        """Type 42 is g64 (18-byte blocks) upstream but g128 (34-byte) in legacy Prism files."""
        q2 = [r for r in raw_infos if r[2] == gc.Q2_0.type_id]
        if not q2:
            return gc.Q2_0

        for r in q2:
            if r[1][0] % gc.Q2_0.block_size:
                raise ModelFormatError(f"{self.path.name}: corrupt GGUF: tensor {r[0]!r} row width {r[1][0]} is "
                                       f"not a multiple of the Q2_0 block size {gc.Q2_0.block_size}")

        def fits(gt: gc.GGMLType) -> bool:
            return all(r[1][0] % gt.block_size == 0 and r[3] + gt.nbytes(r[4]) <= span_end[r[0]] for r in q2)

        if fits(gc.Q2_0):
            return gc.Q2_0
        if fits(gc.Q2_0_LEGACY):
            return gc.Q2_0_LEGACY
        raise ModelFormatError(f"{self.path.name}: type-42 (Q2_0) tensors fit neither the 64-weight nor "
                               "the legacy 128-weight block layout (truncated or corrupt file)")

    # ---- access -------------------------------------------------------------------------------
    def raw(self, gguf_name: str) -> np.ndarray:
        """Zero-copy uint8 view of a tensor's bytes (valid while the file is open)."""
        info = self.tensors[gguf_name]
        return np.frombuffer(self._mm, dtype=np.uint8, count=info.nbytes, offset=info.offset)

    def decode(self, gguf_name: str, *, ternary_encoding: str | None = None) -> Tensor:
        """Decode one tensor in its stored form (ternary types -> TernaryTensor, else DenseTensor)."""
        info = self.tensors[gguf_name]
        raw = self.raw(gguf_name)
        if info.gtype.ternary:
            if len(info.shape) != 2:
                raise ModelFormatError(f"{self.path.name}: ternary tensor {gguf_name!r} is not 2-D")
            rows, cols = info.shape
            return gc.decode_ternary(raw, rows, cols, info.gtype, ternary_encoding)
        return gc.decode_dense(raw, info.shape, info.gtype)

    def close(self) -> None:
        try:
            self._mm.close()
        except BufferError:
            pass  # numpy views still alive; the mapping is released when they go
        self._file.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _int_or_none(v: Any) -> int | None:
    return int(v) if isinstance(v, int | np.integer) and not isinstance(v, bool) else None


GGUF_SAMPLING_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
                      "general.sampling.top_k": "top_k", "general.sampling.min_p": "min_p",
                      "general.sampling.penalty_repeat": "repetition_penalty"}


def generation_defaults_from_gguf(meta: dict[str, Any], source: str = "GGUF metadata") -> dict[str, Any]:
    """Sampling defaults from ``general.sampling.*``, each checked (a NaN or a string is refused by name)."""
    gd = {name: meta[k] for k, name in GGUF_SAMPLING_KEYS.items() if k in meta}
    return check_generation_defaults(gd, source, {v: k for k, v in GGUF_SAMPLING_KEYS.items()})


class GGUFSource:
    """A GGUF model as a stream of canonical tensors (what ``convert`` and ``load_model`` use).

    ``non_ternary``: what to do with a ternary-class tensor stored in a dense type (F16/F32/BF16/
    Q8_0/Q4_0, e.g. PrismML's F16 "re-quantization source" GGUF): ``"auto"`` recovers exact ternary
    codes and keeps a tensor whose values are not ternary dense (listed in ``dense_names``),
    ``"error"`` refuses such a tensor instead, ``"quantize"`` quantizes it anyway (reporting the
    error), ``"dense"`` keeps every such tensor dense without trying.
    """

    def __init__(self, path: str | os.PathLike[str], *, group_size: int = 128, non_ternary: str = "auto",
                 ternary_encoding: str | None = None) -> None:
        self.path = Path(path)
        self.file = GGUFFile(path)
        try:
            self._init(group_size, non_ternary, ternary_encoding)
        except BaseException:
            self.file.close()
            raise

    def _init(self, group_size: int, non_ternary: str, ternary_encoding: str | None) -> None:
        from runtime.formats.gguf_tokenizer import tokenizer_from_gguf
        from runtime.tokenizer import check_tokenizer_ids

        meta = self.file.metadata
        name = self.path.name
        gguf_arch = meta.get("general.architecture")
        if not isinstance(gguf_arch, str):
            raise ModelFormatError(f"{name}: GGUF has no general.architecture")
        self.arch: ArchSpec = arch_for_gguf(gguf_arch)
        self.names: dict[str, str] = {}  # canonical -> gguf
        unknown = []
        f = Fields(meta, name)
        # bounded before anything is built per block (a hostile 2**32 - 1 would loop for hours)
        n_blocks = f.int(f"{gguf_arch}.block_count", lo=1, hi=MAX_LAYERS + 64)
        n_mtp = f.int(f"{gguf_arch}.nextn_predict_layers", 0, lo=0, hi=n_blocks - 1)
        total = n_blocks
        if 0 < n_mtp < n_blocks:
            n_blocks -= n_mtp  # llama.cpp counts the MTP head's layers in block_count; they sit at the end
        present = {int(i) for g in self.file.tensors if g.startswith("blk.")
                   and (i := g.split(".")[1]).isdigit() and len(i) < 8}
        if present not in (set(range(n_blocks)), set(range(total))):  # MTP blocks may be stripped
            have = f"blocks 0..{max(present)}" if present else "no blocks"
            if present and len(present) != max(present) + 1:
                have = f"{len(present)} blocks with gaps (up to block {max(present)})"
            raise ModelFormatError(f"{name}: {gguf_arch}.block_count says {total} blocks but the tensor table "
                                   f"has {have}")
        for gname in self.file.tensors:
            if self.arch.gguf_name_fn is not None:
                hf = self.arch.gguf_name_fn(gname, n_blocks)
                if hf is not None:
                    self.names[hf] = gname
                continue
            hf = self.arch.gguf_to_hf(gname)
            if hf is None:
                unknown.append(gname)
            else:
                self.names[hf] = gname
        if unknown:
            raise UnsupportedModelError(
                f"{name}: tensors this runtime does not know for {gguf_arch}: {', '.join(unknown[:5])}"
                + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            )
        shapes = {hf: self.tensor_shape(hf) for hf in self.names}
        self.config = self.arch.config_from_gguf(meta, shapes, source=name)
        check_tensor_set(self.config, shapes, source=name, names=gguf_config_names(gguf_arch))
        self.tokenizer = tokenizer_from_gguf(meta, source=name) if "tokenizer.ggml.model" in meta else None
        if self.tokenizer is not None:
            check_tokenizer_ids(self.tokenizer, self.config.vocab_size, name)
        self.generation_defaults = generation_defaults_from_gguf(meta, source=name)
        types = sorted({self.file.tensors[g].gtype.name for hf, g in self.names.items()
                        if self.arch.is_ternary(hf, shapes[hf])})
        self.source_format = "gguf:" + "+".join(types)
        self.model_name = f.str("general.name", self.path.stem)
        self.group_size = group_size
        if non_ternary not in ("auto", "error", "quantize", "dense"):
            raise ValueError(f"non_ternary must be auto, error, quantize or dense, got {non_ternary!r}")
        self.non_ternary = non_ternary
        self.dense_names: list[str] = []
        self.ternary_encoding = ternary_encoding
        self.max_quant_error = 0.0

    def tensor_names(self) -> list[str]:
        return list(self.names)

    def tensor_shape(self, hf_name: str) -> tuple[int, ...]:
        """Canonical shape (the architecture may change the GGUF layout, see ArchSpec.shape_from_gguf)."""
        shape = self.file.tensors[self.names[hf_name]].shape
        return self.arch.shape_from_gguf(hf_name, shape) if self.arch.shape_from_gguf else shape

    def tensor_spec(self, hf_name: str) -> TensorSpec:
        """What :meth:`load` will return, without decoding (the .ternary header needs it first)."""
        info = self.file.tensors[self.names[hf_name]]
        shape = self.tensor_shape(hf_name)
        ternary_class = self.arch.is_ternary(hf_name, info.shape)
        if info.gtype.ternary and ternary_class:
            enc = self.ternary_encoding or (T3 if info.gtype is gc.PTQ1_0 else T2)
            return TensorSpec(hf_name, enc, shape, info.gtype.block_size)
        if not info.gtype.ternary and ternary_class and self.non_ternary != "dense":
            return TensorSpec(hf_name, self.ternary_encoding or T2, shape, self.group_size)
        enc = {gc.F16.name: "f16", gc.BF16.name: "bf16"}.get(info.gtype.name, "f32")
        return TensorSpec(hf_name, enc, shape)

    def load(self, hf_name: str) -> Tensor:
        """Decode one tensor into its canonical form (ternary-class tensors become TernaryTensor)."""
        from runtime.formats.hf import NotTernaryError, ternarize

        gname = self.names[hf_name]
        t = self.file.decode(gname, ternary_encoding=self.ternary_encoding)
        info = self.file.tensors[gname]
        if isinstance(t, DenseTensor) and info.gtype in (gc.F16, gc.BF16, gc.F32):
            check_float_values(t.data, gname, self.path.name, info.gtype.name)  # e.g. F16 bytes typed BF16
        if isinstance(t, DenseTensor) and self.arch.is_ternary(hf_name, info.shape) and self.non_ternary != "dense":
            try:
                t, err = ternarize(t.data, hf_name, self.group_size, quantize=self.non_ternary == "quantize",
                                   encoding=self.ternary_encoding or "t2", source=self.path.name)
                self.max_quant_error = max(self.max_quant_error, err)
            except NotTernaryError:
                if self.non_ternary == "error":
                    raise
                self.dense_names.append(hf_name)
        elif isinstance(t, TernaryTensor) and not self.arch.is_ternary(hf_name, info.shape):
            t = DenseTensor(t.dequantize(torch.float32))
        if self.arch.tensor_from_gguf is not None:
            t = self.arch.tensor_from_gguf(hf_name, t, self.config)
        release(self.file._mm, info.offset, info.nbytes)  # decoded tensors are copies
        return t

    def iter_tensors(self) -> Iterator[tuple[str, Tensor]]:
        for n in self.names:
            yield n, self.load(n)

    def provenance(self) -> Provenance:
        return Provenance(source_name=self.path.name, source_format=self.source_format)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> GGUFSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_gguf(path: str | os.PathLike[str], **kw: Any) -> ModelData:
    """Whole GGUF -> ModelData (decoded tensors are copies; the file is closed afterwards)."""
    with GGUFSource(path, **kw) as src:
        tensors = dict(src.iter_tensors())
        notice = None if src.non_ternary == "dense" else dense_matrices_notice(src.config, tensors)
        return ModelData(config=src.config, tensors=tensors, tokenizer=src.tokenizer,
                         generation_defaults=src.generation_defaults, provenance=src.provenance(),
                         name=src.model_name, notices=[notice] if notice else [])
