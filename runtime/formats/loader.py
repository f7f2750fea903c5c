"""One entry point for every model file: detect the format, open it as a source, load it.

Why: the CLI, the engine and the GUI accept "a model" -- a ``.ternary`` file, a ``.gguf`` file or a
Hugging Face folder -- and must say clearly what a path is when it is none of those.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import CancelledError, ModelFormatError
from runtime.formats.arch import dense_matrices_notice
from runtime.formats.file_checks import optional_file, path_kind
from runtime.formats.model_data import ModelData, Provenance, Tensor, TokenizerData
from runtime.formats.sniff import TERNARY_MAGIC, describe_file
from runtime.formats.ternary_file import TensorSpec
from runtime.model.config import ModelConfig

HASH_CHUNK = 8 << 20


class ModelSource(Protocol):
    """A model opened for streaming, one tensor at a time (GGUFSource, HFSource, TernaryFile)."""

    config: ModelConfig
    tokenizer: TokenizerData | None
    generation_defaults: dict[str, Any]
    model_name: str
    source_format: str

    def tensor_names(self) -> list[str]: ...
    def tensor_spec(self, name: str) -> TensorSpec: ...
    def load(self, name: str) -> Tensor: ...
    def close(self) -> None: ...


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"ternary"``, ``"gguf"`` or ``"hf"``; otherwise ModelFormatError saying what the path is."""
    p = Path(path)
    if path_kind(p) == "folder":  # refuses a FIFO, a device or a link loop by name, before opening
        if optional_file(p / "config.json", "config.json") is not None:
            return "hf"
        raise ModelFormatError(f"{p}: a folder without config.json is not a Hugging Face model folder")
    with open(p, "rb") as f:
        head = f.read(8)
    if head == TERNARY_MAGIC:
        return "ternary"
    if head[:4] == b"GGUF":
        return "gguf"
    what = describe_file(p)
    if what == "a safetensors file":
        raise ModelFormatError(f"{p.name}: this is a single safetensors file; give the Hugging Face model "
                               "folder that holds it (with config.json and tokenizer.json) instead")
    raise ModelFormatError(f"{p.name}: not a model file this runtime reads (.ternary, .gguf or a Hugging Face "
                           f"folder): it is {what}")


def open_source(path: str | os.PathLike[str], *, group_size: int = 128, quantize: bool = False,
                ternary_encoding: str | None = None, verify: bool = False, keep_dense: bool = False,
                strict: bool = False) -> ModelSource:
    """Open any supported model for streaming. A float matrix whose values are ternary is recovered
    as ternary; one whose values are not stays dense, unless ``quantize`` (lossy) or ``strict``
    (refused: what ``convert`` wants). ``keep_dense`` keeps every float weight dense without trying
    (dense models: embeddings)."""
    fmt = detect_format(path)
    if fmt == "ternary":
        from runtime.formats.ternary_file import TernaryFile

        return TernaryFile(path, verify=verify)
    if fmt == "gguf":
        from runtime.formats.gguf import GGUFSource

        non_ternary = "dense" if keep_dense else "quantize" if quantize else "error" if strict else "auto"
        return GGUFSource(path, group_size=group_size, non_ternary=non_ternary, ternary_encoding=ternary_encoding)
    from runtime.formats.hf import HFSource

    return HFSource(path, group_size=group_size, quantize=quantize, ternary_encoding=ternary_encoding or "t2",
                    keep_dense=keep_dense, strict=strict)


def load_model(path: str | os.PathLike[str], *, verify: bool = False, quantize: bool = False,
               group_size: int = 128, ternary_encoding: str | None = None, keep_dense: bool = False) -> ModelData:
    """Load a whole model. ``.ternary`` tensors are zero-copy views of a memory map.

    Matrices held dense (not ternary in the file) are named, with their cost, in ``notices``."""
    src = open_source(path, group_size=group_size, quantize=quantize, ternary_encoding=ternary_encoding,
                      verify=verify, keep_dense=keep_dense)
    try:
        tensors = {n: src.load(n) for n in src.tensor_names()}
        prov = src.provenance() if hasattr(src, "provenance") else Provenance()
        notice = None if keep_dense else dense_matrices_notice(src.config, tensors)
        return ModelData(config=src.config, tensors=tensors, tokenizer=src.tokenizer,
                         generation_defaults=dict(src.generation_defaults), provenance=prov,
                         name=src.model_name, notices=[notice] if notice else [])
    finally:
        src.close()


def _hash_file(p: Path, h: Any, done: int, total: int, progress: Callable[[int, int], None] | None,
               cancel: Callable[[], bool] | None) -> int:
    with open(p, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if cancel is not None and cancel():
                raise CancelledError("cancelled")
            if progress is not None:
                progress(done, total)
    return done


def source_sha256(path: str | os.PathLike[str], *, progress: Callable[[int, int], None] | None = None,
                  cancel: Callable[[], bool] | None = None) -> str:
    """Streaming sha256 of a model file; for a folder, sha256 of its ``sha256sum``-style listing.

    The folder listing covers every regular file at the top level (sorted), one line
    ``<hex sha256>  <name>\\n`` each, so it changes when any weight or tokenizer file changes.
    """
    p = Path(path)
    if p.is_file():
        h = hashlib.sha256()
        _hash_file(p, h, 0, p.stat().st_size, progress, cancel)
        return h.hexdigest()
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
    total = sum(f.stat().st_size for f in files)
    done, lines = 0, []
    for f in files:
        h = hashlib.sha256()
        done = _hash_file(f, h, done, total, progress, cancel)
        lines.append(f"{h.hexdigest()}  {f.name}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
