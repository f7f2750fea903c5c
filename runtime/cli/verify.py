"""``ternary verify FILE [--sha256 HEX]``: size, sha256, format header and, for a ``.ternary``, every
tensor's checksum.

When FILE is in the model store its manifest's sha256 and size are the expectation (so a file
that changed on disk after download is caught); ``--sha256`` overrides or supplies one. Beyond
the bytes, the file is opened the way the runtime opens it (header, config, tokenizer), so
"OK" means it will load. A Hugging Face folder is checked file by file. A FIFO, a device or a
symbolic-link loop is named as such (reading one would hang or fail obscurely).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check a model file's size, sha256, format header and tensor checksums",
                       description="Hash FILE and check its magic bytes (GGUF, .ternary, safetensors), open it as "
                                   "the runtime would and, for a .ternary, check every tensor's checksum; compare "
                                   "with --sha256 or with the model store's record of it. FILE may also be a "
                                   "Hugging Face model folder.")
    p.add_argument("file")
    p.add_argument("--sha256", metavar="HEX", help="expected sha256")
    p.add_argument("--size", type=int, metavar="BYTES", help="expected size in bytes")
    p.add_argument("--home", help="model store root (default: platform dirs or TERNARY_CHAT_HOME)")
    p.set_defaults(func=run)


def deep_problems(path: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) from opening ``path`` as the runtime would; a .ternary's checksums included.

    Problems make verification fail; notes do not (e.g. a valid file of an architecture this
    runtime cannot run). A GGUF is checked as a container (any architecture); a ``.ternary`` fully."""
    from runtime.errors import TernaryError, UnsupportedModelError
    from runtime.formats.sniff import TERNARY_MAGIC

    with open(path, "rb") as f:
        head = f.read(8)
    problems: list[str] = []
    notes: list[str] = []
    try:
        if head == TERNARY_MAGIC:
            from runtime.formats.ternary_file import TernaryFile

            with TernaryFile(path) as tf:
                bad = [n for n in tf.entries if not tf.checksum_ok(n)]
                if bad:
                    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
                    problems.append(f"checksum: {len(bad)} of {len(tf.entries)} tensors do not match their "
                                    f"checksums ({', '.join(bad[:3])}{more}); the file is corrupt")
                for n in tf.specs:
                    tf.tensor(n)  # dense tensors: a relabelled dtype shows in the values
                if tf.tokenizer is not None:
                    from runtime.tokenizer import check_tokenizer

                    check_tokenizer(tf.tokenizer, tf.config.vocab_size, f"{path.name} (tokenizer)")
        elif head[:4] == b"GGUF":  # the container: metadata, tensor table, offsets (any architecture)
            from runtime.formats.gguf import GGUFFile, GGUFSource

            GGUFFile(path).close()
            try:  # the model in it: a note, not a failure (the bytes are what the publisher made)
                GGUFSource(path).close()
            except TernaryError as exc:
                notes.append(f"the runtime will refuse to load it: {exc}")
    except UnsupportedModelError as exc:
        notes.append(f"this runtime cannot run it: {exc}")
    except TernaryError as exc:
        problems.append(f"format: {exc}")
    return problems, notes


def verify_folder(path: Path) -> int:
    """A Hugging Face model folder: each safetensors shard's structure, then the folder opened as the
    runtime opens it (config, tokenizer, every tensor's values sampled for a mislabelled dtype)."""
    from runtime.errors import TernaryError, UnsupportedModelError
    from runtime.formats.dtype_check import check_float_values
    from runtime.formats.file_checks import require_file
    from runtime.formats.hf import HFSource, read_safetensors_header
    from runtime.formats.loader import detect_format, source_sha256
    from runtime.hub.verify import check_structure

    detect_format(path)  # a folder without config.json is refused here, by name
    problems: list[str] = []
    note = ""
    shards = sorted(f for f in path.glob("*.safetensors"))
    for shard in shards:
        require_file(shard, "safetensors shard")
        try:
            read_safetensors_header(shard)  # every entry typed and inside the file
        except UnsupportedModelError as exc:
            note = f"this runtime cannot run it: {exc}"
        except TernaryError as exc:
            problems.append(f"format: {exc}")
        problems.extend(f"{shard.name}: {p}" for p in check_structure(shard, "safetensors"))
    if not problems:
        try:
            with HFSource(path) as src:
                for n in src.tensor_names():
                    e = src.entries[n]
                    check_float_values(src.raw_tensor(n), n, e.file.name, e.dtype)
                if src.tokenizer is not None:
                    from runtime.tokenizer import check_tokenizer

                    check_tokenizer(src.tokenizer, src.config.vocab_size, f"{path.name}/tokenizer.json")
        except UnsupportedModelError as exc:
            note = f"this runtime cannot run it: {exc}"
        except TernaryError as exc:
            problems.append(f"format: {exc}")
    print(f"folder:  {path}")
    print(f"files:   {len(shards)} safetensors file(s)")
    print(f"sha256:  {source_sha256(path)} (of the folder's file listing)")
    if note:
        print(f"note:    {note}")
    if not problems:
        print("result:  OK")
        return 0
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("result:  FAILED (do not load this folder)")
    return 1


def run(args: argparse.Namespace) -> int:
    import os
    import time

    from runtime.atomic import read_json
    from runtime.devices import format_bytes
    from runtime.formats.file_checks import path_kind
    from runtime.hub.store import ModelStore
    from runtime.hub.verify import verify_file

    path = Path(args.file)
    if path_kind(path) == "folder":  # a FIFO, device or link loop is refused here, by name
        return verify_folder(path)
    expected_sha, expected_size, source = args.sha256, args.size, "--sha256" if args.sha256 else None
    manifest = read_json(ModelStore.manifest_path(path.resolve()))
    if isinstance(manifest, dict):
        expected_sha = expected_sha or manifest.get("sha256")
        expected_size = expected_size if expected_size is not None else manifest.get("size")
        source = source or "model store record"
    if expected_sha is not None:
        expected_sha = expected_sha.strip().lower()
        if len(expected_sha) != 64 or any(c not in "0123456789abcdef" for c in expected_sha):
            print("error: --sha256 must be 64 hex digits", file=sys.stderr)
            return 2
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if tty and (now - last[0] > 0.2 or done == total):
            last[0] = now
            print(f"\rhashing {format_bytes(done)} / {format_bytes(total)}", end="", file=sys.stderr, flush=True)

    report = verify_file(path, expected_size=expected_size, expected_sha256=expected_sha, progress=progress)
    if tty:
        print(file=sys.stderr)
    notes: list[str] = []
    if report.ok:  # the bytes are as expected: now open it as the runtime would
        deep, notes = deep_problems(path)
        report.problems.extend(deep)
    print(f"file:    {path}")
    print(f"size:    {report.size} bytes ({format_bytes(report.size)})")
    print(f"sha256:  {report.sha256}")
    if expected_sha:
        print(f"expected sha256 ({source}): {expected_sha}")
    else:
        print("expected sha256: none given (format checked only)")
    for note in notes:
        print(f"note:    {note}")
    if report.ok:
        print("result:  OK")
        return 0
    for problem in report.problems:
        print(f"PROBLEM: {problem}")
    print("result:  FAILED" + (" (do not load this file)" if os.path.exists(path) else ""))
    return 1
