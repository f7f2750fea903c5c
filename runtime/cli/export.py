"""``ternary export MODEL --format hf OUT/``: a plain Hugging Face folder for vLLM, SGLang, transformers.

Progress goes to stderr; Ctrl-C cancels cleanly (nothing is left behind). See docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

FORMATS = ("hf",)
DTYPES = ("bf16", "fp16", "fp32")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="export a model as a plain Hugging Face folder (for vLLM, SGLang, transformers)",
        description="Write MODEL (.ternary, .gguf or Hugging Face folder) as a standard Hugging Face folder: "
                    "safetensors (sharded with an index when large), config.json, generation_config.json, "
                    "tokenizer and chat template. Ternary weights are dequantised exactly and Bonsai 2's "
                    "Hadamard rotation is folded back, so the folder runs as a plain Qwen3 / Qwen3.5 / Llama "
                    "model with no custom code. The folder appears only when complete.")
    p.add_argument("model", help="source: .ternary file, .gguf file or Hugging Face folder")
    p.add_argument("output", metavar="OUT", help="output folder (must be empty or missing unless --force)")
    p.add_argument("--format", choices=FORMATS, default="hf", help="output format (hf: Hugging Face; the default)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16",
                   help="weight precision: bf16 (default), fp16 (exact for unrotated ternary weights, whose "
                        "scales are fp16) or fp32")
    p.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                   help="largest safetensors file, e.g. 5GB (default) or 2GiB; bigger models are sharded")
    p.add_argument("--force", action="store_true", help="replace a non-empty OUT folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtime.cli.convert import TextProgress
    from runtime.devices import parse_bytes
    from runtime.errors import CancelledError
    from runtime.formats.export_hf import export_hf
    from runtime.generation import CancelToken

    try:
        shard = parse_bytes(args.max_shard_size)
    except ValueError as exc:
        print(f"error: --max-shard-size: {exc}", file=sys.stderr)
        return 2
    cancel = CancelToken()
    bar = None if args.quiet else TextProgress(sys.stderr, label="exporting")
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    try:
        res = export_hf(args.model, args.output, dtype=args.dtype, force=args.force, max_shard_bytes=shard,
                        progress=None if bar is None else lambda done, total, name: bar("export", done, total, name),
                        cancel=cancel)
    except CancelledError:
        print("\nexport cancelled; nothing was written", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    rot = "; Hadamard rotation folded back" if res.rotation_folded else ""
    err = (f"; largest {res.dtype} rounding error {res.max_rounding_error:.2e} of a tensor's max "
           f"({res.worst_tensor})" if res.max_rounding_error else f"; {res.dtype} values exact")
    print(f"wrote {res.output} ({res.architecture}, {res.tensors} tensors in {res.shards} shard"
          f"{'s' if res.shards != 1 else ''}, {res.output_bytes / (1 << 20):.1f} MiB, from {res.source_format}) "
          f"in {res.seconds:.1f} s{rot}{err}")
    return 0
