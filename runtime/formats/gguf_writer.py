"""GGUF v3 writer: a ModelData -> a GGUF file llama.cpp can load (for mainline types).

Why we write GGUF at all: tests need every GGUF type we read (including PrismML's 42-legacy, 142
and 143, which the ``gguf`` package cannot write), the llama.cpp comparisons need the same
weights in llama.cpp's format, and the benchmark writes synthetic Bonsai-shaped models as Q2_0
g64 for ``llama-bench``. Tensors are encoded and written one at a time into a temporary file
that replaces the target only when complete.

``ttype`` picks the storage of ternary tensors: a ternary GGML type (``Q2_0`` g64, ``Q2_0_LEGACY``
g128 under id 42, ``PQ2_0``, ``PTQ1_0``, ``TQ1_0``, ``TQ2_0``), or a dense one (``F32``, ``F16``,
``BF16``; ``Q8_0``/``Q4_0`` are lossy for ternary weights). 1-D tensors (norms) are always F32.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from runtime.atomic import atomic_output
from runtime.formats import gguf_codecs as gc
from runtime.formats.arch import get_arch
from runtime.formats.gguf_tokenizer import gguf_tokenizer_metadata
from runtime.formats.model_data import DenseTensor, ModelData, Tensor, TernaryTensor

_SCALAR_CODES = {"u8": (0, "<B"), "i8": (1, "<b"), "u16": (2, "<H"), "i16": (3, "<h"), "u32": (4, "<I"),
                 "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?"), "u64": (10, "<Q"), "i64": (11, "<q"),
                 "f64": (12, "<d")}
_STR, _ARR = 8, 9


def _w_str(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    out += struct.pack("<Q", len(b)) + b


def _w_value(out: bytearray, vtype: str, value: Any) -> None:
    if vtype == "str":
        out += struct.pack("<I", _STR)
        _w_str(out, value)
    elif vtype in _SCALAR_CODES:
        code, fmt = _SCALAR_CODES[vtype]
        out += struct.pack("<I", code) + struct.pack(fmt, value)
    elif vtype.startswith("arr_"):
        et = vtype[4:]
        values = list(value)
        if et == "str":
            out += struct.pack("<IIQ", _ARR, _STR, len(values))
            for v in values:
                _w_str(out, v)
        else:
            code, fmt = _SCALAR_CODES[et]
            out += struct.pack("<IIQ", _ARR, code, len(values))
            out += np.asarray(values, dtype=np.dtype(fmt)).tobytes()
    else:
        raise ValueError(f"unknown GGUF value type {vtype!r}")


def encode_tensor(t: Tensor, gtype: gc.GGMLType) -> np.ndarray:
    """A tensor -> the raw bytes of GGML type ``gtype`` (flat uint8)."""
    if gtype.ternary:
        if not isinstance(t, TernaryTensor):
            raise ValueError(f"cannot store a dense tensor as {gtype.name}")
        return gc.encode_ternary(t, gtype).reshape(-1)
    data = t.dequantize(torch.float32) if isinstance(t, TernaryTensor) else t.data
    return gc.encode_dense(data, gtype)


def write_gguf(model: ModelData, path: str | os.PathLike[str], ttype: str, *, name: str | None = None,
               alignment: int = 32, extra_metadata: dict[str, tuple[str, Any]] | None = None) -> Path:
    """Write ``model`` as GGUF v3 (atomically). See module docstring for ``ttype``."""
    arch = get_arch(model.config.arch)
    tensors, gguf_names = dict(model.tensors), None
    if arch.tensor_to_gguf is not None:  # architectures whose GGUF layout differs (qwen35)
        gguf_names = {}
        for n, t in model.tensors.items():
            gguf_names[n], tensors[n] = arch.tensor_to_gguf(n, t, model.config)
    return write_gguf_stream(model.config, model.tokenizer, model.generation_defaults,
                             ((n, t) for n, t in tensors.items()), path, ttype,
                             name=name or model.name, alignment=alignment, extra_metadata=extra_metadata,
                             shapes={n: t.shape for n, t in tensors.items()},
                             kinds={n: isinstance(t, TernaryTensor) for n, t in tensors.items()},
                             dense_dtypes={n: t.data.dtype for n, t in tensors.items()
                                           if isinstance(t, DenseTensor)}, gguf_names=gguf_names)


def write_gguf_stream(config, tokenizer, generation_defaults: dict[str, Any], tensors: Iterable[tuple[str, Tensor]],
                      path: str | os.PathLike[str], ttype: str, *, name: str, shapes: dict[str, tuple[int, ...]],
                      kinds: dict[str, bool], dense_dtypes: dict[str, torch.dtype] | None = None,
                      alignment: int = 32, extra_metadata: dict[str, tuple[str, Any]] | None = None,
                      gguf_names: dict[str, str] | None = None) -> Path:
    """Streaming form: ``shapes``/``kinds`` (is ternary) describe the tensors ``tensors`` yields in order.

    ``gguf_names`` overrides the architecture's canonical -> GGUF name mapping.
    """
    if ttype not in gc.TYPES_BY_NAME:
        raise ValueError(f"unknown GGUF tensor type {ttype!r} (known: {', '.join(gc.TYPES_BY_NAME)})")
    tt = gc.TYPES_BY_NAME[ttype]
    arch = get_arch(config.arch)
    dense_dtypes = dense_dtypes or {}
    meta: dict[str, tuple[str, Any]] = {
        "general.architecture": ("str", arch.gguf_arch),
        "general.name": ("str", name or "model"),
    }
    if alignment != 32:
        meta["general.alignment"] = ("u32", alignment)
    meta.update(arch.gguf_metadata(config))
    if tokenizer is not None:
        meta.update(gguf_tokenizer_metadata(tokenizer, config.vocab_size))
    sampling = {"temperature": ("general.sampling.temp", "f32"), "top_p": ("general.sampling.top_p", "f32"),
                "top_k": ("general.sampling.top_k", "i32"), "min_p": ("general.sampling.min_p", "f32"),
                "repetition_penalty": ("general.sampling.penalty_repeat", "f32")}
    for k, (key, vt) in sampling.items():
        v = generation_defaults.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            meta[key] = (vt, int(v) if vt == "i32" else float(v))
    meta.update(extra_metadata or {})

    plan = []  # (gguf name, ne, gtype, offset, nbytes)
    offset = 0
    for hf_name, shape in shapes.items():
        gname = gguf_names[hf_name] if gguf_names else arch.hf_to_gguf(hf_name)
        if gname is None:
            raise ValueError(f"no GGUF name for tensor {hf_name}")
        ternary_class = arch.is_ternary(hf_name, tuple(shape))
        if kinds[hf_name]:
            gtype = tt
        elif len(shape) == 1 or not ternary_class:
            gtype = gc.F32 if len(shape) == 1 else {torch.float16: gc.F16, torch.bfloat16: gc.BF16}.get(
                dense_dtypes.get(hf_name, torch.float32), gc.F32)
        else:
            gtype = gc.F32 if tt.ternary else tt
        n = int(np.prod(shape))
        if shape[-1] % gtype.block_size:
            raise ValueError(f"{hf_name}: width {shape[-1]} is not a multiple of the {gtype.name} block size "
                             f"{gtype.block_size}")
        nbytes = gtype.nbytes(n)
        plan.append((hf_name, gname, tuple(reversed(shape)), gtype, offset, nbytes))
        offset += (nbytes + alignment - 1) // alignment * alignment

    head = bytearray(b"GGUF")
    head += struct.pack("<IQQ", 3, len(plan), len(meta))
    for key, (vt, v) in meta.items():
        _w_str(head, key)
        _w_value(head, vt, v)
    for _hf, gname, ne, gtype, off, _nb in plan:
        _w_str(head, gname)
        head += struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", gtype.type_id, off)
    head += b"\0" * (-len(head) % alignment)

    path = Path(path)
    with atomic_output(path) as f:
        f.write(head)
        stream = iter(tensors)
        for hf_name, _gname, _ne, gtype, _off, nbytes in plan:
            got_name, t = next(stream, (None, None))
            if got_name != hf_name:
                raise ValueError(f"tensor stream out of order: expected {hf_name}, got {got_name}")
            data = encode_tensor(t, gtype)
            if data.nbytes != nbytes:
                raise AssertionError(f"{hf_name}: encoded {data.nbytes} bytes, planned {nbytes}")
            _write_all(f, data)
            f.write(b"\0" * (-nbytes % alignment))
    return path


def _write_all(f: BinaryIO, data: np.ndarray) -> None:
    f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
