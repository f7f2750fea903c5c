"""Any supported model -> ``.ternary``: lossless, streamed one tensor at a time, atomic.

Why streaming: a model is read through a memory map and written tensor by tensor, so peak RAM
is about one (decoded) tensor whatever the model size; the output appears only when complete.
The GUI calls :func:`convert` with a progress callback and a cancel check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from runtime.errors import ModelFormatError
from runtime.formats.gguf_codecs import regroup
from runtime.formats.loader import open_source, source_sha256
from runtime.formats.model_data import Provenance, Tensor, TernaryTensor
from runtime.formats.ternary_file import TernaryFile, write_ternary

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


def _regrouped(name: str, t: Tensor, group: int) -> Tensor:
    if not isinstance(t, TernaryTensor) or t.group_size == group:
        return t
    try:
        return regroup(t, group)
    except ValueError as exc:
        raise ModelFormatError(f"tensor {name}: {exc}") from None


def _verified_loader(source: TernaryFile, name: str) -> Callable[[str], Tensor]:
    """``source.load`` that first checks the tensor's checksum: a corrupt tensor stops the conversion."""
    def load(n: str) -> Tensor:
        if not source.checksum_ok(n):
            raise ModelFormatError(f"{name}: checksum mismatch in tensor {n}; the file is corrupt, so it was not "
                                   "converted (a new file would carry fresh checksums and hide the damage)")
        return source.load(n)

    return load


def convert(src: str | os.PathLike[str], out: str | os.PathLike[str], *, quantize: bool = False,
            group_size: int = 128, ternary_encoding: str | None = None, regroup_to: int | None = None,
            hash_source: bool = True, progress: Progress | None = None,
            cancel: Callable[[], bool] | None = None) -> ConvertResult:
    """Convert ``src`` (.gguf, HF folder or .ternary) to a ``.ternary`` file at ``out``.

    Non-ternary weights are refused unless ``quantize`` (then the max relative error is reported).
    ``regroup_to`` stores every ternary tensor with that many weights per scale, only where exact
    (e.g. a Q2_0 g64 file of a g128 model becomes the same file as its PQ2_0 sibling).
    Raises :class:`runtime.errors.CancelledError` when ``cancel()`` turns true; no output is left.
    """
    t0 = time.perf_counter()
    src_p, out_p = Path(src), Path(out)
    if out_p.exists() and src_p.exists() and out_p.resolve() == src_p.resolve():
        raise ModelFormatError(f"{out_p}: output would overwrite the source")
    if out_p.is_dir():
        raise ModelFormatError(f"{out_p}: output is a folder; give a file name like model.ternary")
    # strict: the .ternary header is written before the tensors, so each must be ternary as predicted
    source = open_source(src_p, group_size=group_size, quantize=quantize, ternary_encoding=ternary_encoding,
                         strict=True)
    try:
        digest = ""
        if hash_source:
            digest = source_sha256(src_p, cancel=cancel,
                                   progress=(lambda d, t: progress("hash", d, t, src_p.name)) if progress else None)
        if source.tokenizer is not None:  # embed only a tokenizer that builds and fits the vocabulary
            from runtime.tokenizer import check_tokenizer

            check_tokenizer(source.tokenizer, source.config.vocab_size, f"{src_p.name} (tokenizer)")
        names = source.tensor_names()
        specs = [source.tensor_spec(n) for n in names]
        base: Callable[[str], Tensor] = source.load
        if isinstance(source, TernaryFile):  # never launder corruption into fresh checksums
            base = _verified_loader(source, src_p.name)
        loader = base
        if regroup_to:
            specs = [replace(s, group_size=regroup_to) if s.group_size else s for s in specs]
            loader = lambda n: _regrouped(n, base(n), regroup_to)  # noqa: E731
        prov = Provenance(source_name=src_p.name, source_sha256=digest, source_format=source.source_format)
        if source.source_format == "ternary" and hasattr(source, "provenance"):
            old = source.provenance()  # re-conversion keeps the original source's identity
            prov = Provenance(source_name=old.source_name or src_p.name, source_sha256=old.source_sha256 or digest,
                              source_format=old.source_format or "ternary")
        write_ternary(
            out_p, config=source.config, specs=specs, tensors=((n, loader(n)) for n in names),
            tokenizer=source.tokenizer, generation_defaults=dict(source.generation_defaults), provenance=prov,
            name=source.model_name,
            progress=(lambda d, t, n: progress("convert", d, t, n)) if progress else None, cancel=cancel,
        )
        return ConvertResult(out_p, source.source_format, digest, len(names), out_p.stat().st_size,
                             time.perf_counter() - t0, float(getattr(source, "max_quant_error", 0.0)))
    finally:
        source.close()
