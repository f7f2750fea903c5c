"""``ternary convert SRC -o OUT.ternary``: any supported model -> the native file, losslessly.

Progress goes to stderr as a plain text bar (no tqdm); the output appears only when complete.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("convert", help="convert a .gguf / Hugging Face folder / .ternary to .ternary",
                       description="Convert a model to the native .ternary file: ternary weights are kept "
                                   "bit-exactly (codes and fp16 scales); the file is written atomically.")
    p.add_argument("src", help="source: .gguf file, Hugging Face folder, or .ternary file")
    p.add_argument("-o", "--output", required=True, help="output .ternary file")
    p.add_argument("--quantize", action="store_true",
                   help="allow weights that are not exactly ternary and quantize them (reports the error)")
    p.add_argument("--group-size", type=int, default=128,
                   help="group size for recovering ternary codes from dense weights (default 128)")
    p.add_argument("--encoding", choices=["t2", "t3"], default=None,
                   help="ternary encoding: t2 (2-bit, default) or t3 (base-3, ~1.6 bit; default for PTQ1_0)")
    p.add_argument("--regroup", type=int, default=None, metavar="N",
                   help="store N weights per scale where that is exact (e.g. 128 for a Q2_0 g64 source)")
    p.add_argument("--no-hash", action="store_true", help="skip the source sha256 (faster; no provenance hash)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


class TextProgress:
    """A one-line text progress bar on stderr, redrawn at most ~10 times a second."""

    def __init__(self, stream: Any = None, width: int = 30, label: str | None = None) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.label = label  # None: by stage ("hashing" / "converting")
        self.last = 0.0
        self.t0 = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int, detail: str) -> None:
        now = time.perf_counter()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        frac = done / total if total else 1.0
        fill = int(frac * self.width)
        label = self.label or ("hashing" if stage == "hash" else "converting")
        mb = 1 << 20
        line = (f"\r{label} [{'#' * fill}{'-' * (self.width - fill)}] {frac * 100:5.1f}% "
                f"{done / mb:8.1f}/{total / mb:.1f} MiB  {detail[:40]:40s}")
        self.stream.write(line)
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from runtime.formats.convert import convert

    progress = None if args.quiet or not sys.stderr else TextProgress()
    res = convert(args.src, args.output, quantize=args.quantize, group_size=args.group_size,
                  ternary_encoding=args.encoding, regroup_to=args.regroup, hash_source=not args.no_hash,
                  progress=progress)
    msg = (f"wrote {res.output} ({res.output_bytes / (1 << 20):.1f} MiB, {res.tensors} tensors, "
           f"from {res.source_format}) in {res.seconds:.1f} s")
    if args.quantize:
        msg += f"; max relative quantization error {res.max_quantization_error:.3g}"
    print(msg)
    return 0
