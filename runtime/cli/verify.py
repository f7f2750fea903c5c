"""``ternary verify FILE [--sha256 HEX]``: size, sha256 and magic-byte check of a model file.

When FILE is in the model store its manifest's sha256 and size are the expectation (so a file
that changed on disk after download is caught); ``--sha256`` overrides or supplies one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check a model file's size, sha256 and format header",
                       description="Hash FILE and check its magic bytes (GGUF, .ternary, safetensors); compare with "
                                   "--sha256 or with the model store's record of it.")
    p.add_argument("file")
    p.add_argument("--sha256", metavar="HEX", help="expected sha256")
    p.add_argument("--size", type=int, metavar="BYTES", help="expected size in bytes")
    p.add_argument("--home", help="model store root (default: platform dirs or TERNARY_CHAT_HOME)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import time
    from pathlib import Path

    from runtime.atomic import read_json
    from runtime.hub.download import format_bytes
    from runtime.hub.store import ModelStore
    from runtime.hub.verify import verify_file

    path = Path(args.file)
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
    print(f"file:    {path}")
    print(f"size:    {report.size} bytes ({format_bytes(report.size)})")
    print(f"sha256:  {report.sha256}")
    if expected_sha:
        print(f"expected sha256 ({source}): {expected_sha}")
    else:
        print("expected sha256: none given (format checked only)")
    if report.ok:
        print("result:  OK")
        return 0
    for problem in report.problems:
        print(f"PROBLEM: {problem}")
    print("result:  FAILED" + (" (do not load this file)" if os.path.exists(path) else ""))
    return 1
