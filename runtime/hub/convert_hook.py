"""After a download: turn a verified GGUF into ``.ternary`` and install it with its provenance.

Why a separate step with its own checks: conversion reads the GGUF again (the converter hashes
its input), so we compare that hash with the sha256 verified at download time; a difference
means the file changed on disk in between and nothing is installed. The ``.ternary`` file
carries the original's sha256 in its own provenance header, and its store manifest records
``converted_from`` (file, sha256, hub, repo, revision). The original GGUF stays installed and
loadable; the user may delete it to save space.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import PurePosixPath

from runtime.hub.download import check_free_space
from runtime.hub.errors import VerificationError
from runtime.hub.store import InstalledFile, ModelStore
from runtime.hub.verify import check_structure, sha256_file


def converter_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("runtime.formats.convert") is not None


def convert_installed(item: InstalledFile, store: ModelStore, *, cancel: threading.Event | None = None,
                      progress: Callable[[str, int, int, str], None] | None = None) -> InstalledFile:
    """Convert an installed, verified GGUF to ``.ternary`` next to it in the store."""
    from runtime.formats.convert import convert

    out_name = str(PurePosixPath(item.filename).with_suffix(".ternary"))
    tmp = store.paths.partial_dir / f"{PurePosixPath(item.filename).stem}.{item.sha256[:16]}.ternary"
    store.paths.partial_dir.mkdir(parents=True, exist_ok=True)
    check_free_space(store.paths.partial_dir, item.size, f"converting {item.filename}")  # output ~ input size
    result = convert(item.path, tmp, progress=progress, cancel=(cancel.is_set if cancel is not None else None))
    if result.source_sha256 != item.sha256:
        tmp.unlink(missing_ok=True)
        raise VerificationError(
            f"{item.filename} changed on disk after it was verified (sha256 was {item.sha256}, the converter read "
            f"{result.source_sha256}); not converting. Run `ternary verify {item.path}`.")
    problems = check_structure(tmp, "ternary")
    record = {
        "source": "conversion",
        "converted_from": {"file": item.filename, "sha256": item.sha256, "source": item.record.get("source"),
                           "repo": item.record.get("repo"), "revision": item.record.get("revision")},
        "source_format": result.source_format,
        "max_quantization_error": result.max_quantization_error,
    }
    if problems:
        q = store.quarantine(tmp, out_name, problems, record)
        raise VerificationError(f"converted file failed its checks: {'; '.join(problems)} (quarantined: {q})", str(q))
    digest = sha256_file(tmp)
    return store.install(tmp, item.slug, out_name, size=tmp.stat().st_size, sha256=digest, record=record)
