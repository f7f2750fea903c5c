"""Any supported model -> ``.ternary``: lossless, streamed one tensor at a time, atomic.

Why streaming: a model is read through a memory map and written tensor by tensor, so peak RAM
is about one (decoded) tensor whatever the model size; the output appears only when complete.
The GUI calls :func:`convert` with a progress callback and a cancel check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import ModelFormatError
from runtime.formats.loader import open_source, source_sha256
from runtime.formats.model_data import Provenance
from runtime.formats.ternary_file import write_ternary

# progress(stage, done, total, detail): stage is "hash" or "convert"; done/total in bytes
Progress = Callable[[str, int, int, str], None]


@dataclass
class ConvertResult:
    output: Path
    source_format: str
    source_sha256: str
    tensors: int
    output_bytes: int
    seconds: float
    max_quantization_error: float  # 0.0 for an exactly ternary source


def convert(src: str | os.PathLike[str], out: str | os.PathLike[str], *, quantize: bool = False,
            group_size: int = 128, ternary_encoding: str | None = None, hash_source: bool = True,
            progress: Progress | None = None, cancel: Callable[[], bool] | None = None) -> ConvertResult:
    """Convert ``src`` (.gguf, HF folder or .ternary) to a ``.ternary`` file at ``out``.

    Non-ternary weights are refused unless ``quantize`` (then the max relative error is reported).
    Raises :class:`runtime.errors.CancelledError` when ``cancel()`` turns true; no output is left.
    """
    t0 = time.perf_counter()
    src_p, out_p = Path(src), Path(out)
    if out_p.exists() and src_p.exists() and out_p.resolve() == src_p.resolve():
        raise ModelFormatError(f"{out_p}: output would overwrite the source")
    if out_p.is_dir():
        raise ModelFormatError(f"{out_p}: output is a folder; give a file name like model.ternary")
    source = open_source(src_p, group_size=group_size, quantize=quantize, ternary_encoding=ternary_encoding)
    try:
        digest = ""
        if hash_source:
            digest = source_sha256(src_p, cancel=cancel,
                                   progress=(lambda d, t: progress("hash", d, t, src_p.name)) if progress else None)
        names = source.tensor_names()
        specs = [source.tensor_spec(n) for n in names]
        prov = Provenance(source_name=src_p.name, source_sha256=digest, source_format=source.source_format)
        if source.source_format == "ternary" and hasattr(source, "provenance"):
            old = source.provenance()  # re-conversion keeps the original source's identity
            prov = Provenance(source_name=old.source_name or src_p.name, source_sha256=old.source_sha256 or digest,
                              source_format=old.source_format or "ternary")
        write_ternary(
            out_p, config=source.config, specs=specs, tensors=((n, source.load(n)) for n in names),
            tokenizer=source.tokenizer, generation_defaults=dict(source.generation_defaults), provenance=prov,
            name=source.model_name,
            progress=(lambda d, t, n: progress("convert", d, t, n)) if progress else None, cancel=cancel,
        )
        return ConvertResult(out_p, source.source_format, digest, len(names), out_p.stat().st_size,
                             time.perf_counter() - t0, float(getattr(source, "max_quant_error", 0.0)))
    finally:
        source.close()
