"""``ternary download NAME|REPO[:FILE]``: fetch, verify and install a model file.

The transfer runs in a worker thread so Ctrl-C in the main thread can set the cancel event and
wait for a clean stop (the partial file stays and the next run resumes). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("download", help="download a model from Hugging Face or ModelScope (resumable, verified)",
                       description="NAME is a catalog id (see `ternary models`), or use owner/repo:FILE for any repo. "
                                   "The file is checked (size, sha256, format) before it enters the model store.")
    p.add_argument("spec", metavar="NAME|REPO[:FILE]")
    p.add_argument("--file", help="variant (e.g. PQ2_0, PTQ1_0) or file name")
    p.add_argument("--source", choices=["auto", "hf", "modelscope"], help="default: auto (HF, then ModelScope)")
    p.add_argument("--endpoint", metavar="URL",
                   help="mirror endpoint: for Hugging Face (like HF_ENDPOINT), or ModelScope with --source modelscope")
    p.add_argument("--modelscope-endpoint", metavar="URL", help="ModelScope domain (default https://modelscope.cn)")
    p.add_argument("--home", help="use this folder instead of the platform dirs (or set TERNARY_CHAT_HOME)")
    p.add_argument("--convert", action=argparse.BooleanOptionalAction, default=None,
                   help="convert a downloaded GGUF to .ternary (default: on for GGUF when the converter exists)")
    p.set_defaults(func=run)


class _ProgressPrinter:
    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.last_pct = -10.0

    def __call__(self, p) -> None:
        from runtime.devices import format_bytes

        now = time.monotonic()
        if p.phase != "downloading":
            print(f"\r{p.phase}...{' ' * 40}", end="" if self.tty else "\n", file=sys.stderr, flush=True)
            return
        pct = 100.0 * p.done / p.total if p.total else 0.0
        if self.tty:
            if now - self.last < 0.2 and p.done != p.total:
                return
            width = 28
            filled = int(width * pct / 100)
            eta = _fmt_eta(p.eta_s)
            line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {pct:5.1f}% {format_bytes(p.done)}/"
                    f"{format_bytes(p.total)} {format_bytes(p.speed_bps)}/s ETA {eta}   ")
            print(line, end="", file=sys.stderr, flush=True)
        elif pct - self.last_pct >= 10 or p.done == p.total:
            self.last_pct = pct
            print(f"{pct:5.1f}% {format_bytes(p.done)}/{format_bytes(p.total)}", file=sys.stderr, flush=True)
        self.last = now


def _fmt_eta(s: float | None) -> str:
    if s is None:
        return "--"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run(args: argparse.Namespace) -> int:
    from runtime.hub.catalog import Catalog
    from runtime.hub.fetch import ModelFetcher, resolve_target
    from runtime.hub.logs import configure_hub_logging
    from runtime.hub.paths import HubPaths
    from runtime.hub.settings import HubSettings

    paths = HubPaths.resolve(args.home).ensure()
    configure_hub_logging(paths)
    hf_endpoint = ms_endpoint = None
    if args.endpoint:
        if args.source == "modelscope":
            ms_endpoint = args.endpoint
        else:
            hf_endpoint = args.endpoint
    ms_endpoint = args.modelscope_endpoint or ms_endpoint
    settings = HubSettings.load(paths, source=args.source, hf_endpoint=hf_endpoint, modelscope_endpoint=ms_endpoint)
    target = resolve_target(args.spec, Catalog.load(paths, with_memory=False), args.file)
    fetcher = ModelFetcher(paths, settings)

    cancel = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = fetcher.fetch(target, cancel=cancel, progress=_ProgressPrinter(),
                                              notice=lambda m: print(f"\nnote: {m}", file=sys.stderr))
        except BaseException as exc:  # re-raised in the main thread
            outcome["error"] = exc

    print(f"downloading {target.label} (source: {settings.source})", file=sys.stderr)
    worker = threading.Thread(target=work, name="download", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        cancel.set()
        print("\ncancelling...", file=sys.stderr)
        worker.join(10)
        print("cancelled: the partial download is kept; run the same command again to resume", file=sys.stderr)
        return 130
    print(file=sys.stderr)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    item = result.installed
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    verb = "already installed" if result.already_installed else "installed"
    print(f"{verb}: {item.path}")
    print(f"sha256:    {item.sha256} ({item.size} bytes, verified)")
    if result.resumed_from:
        print(f"resumed from byte {result.resumed_from}")
    _maybe_convert(item, paths, args)
    return 0


def _maybe_convert(item, paths, args: argparse.Namespace) -> None:
    """Convert a downloaded GGUF to .ternary (default on for GGUF when the converter exists).

    A failed conversion does not undo the download: the verified GGUF stays installed and loads
    directly, and we say why the conversion did not happen.
    """
    from runtime.errors import TernaryError
    from runtime.hub.convert_hook import convert_installed, converter_available
    from runtime.hub.store import ModelStore

    is_gguf = item.path.name.lower().endswith(".gguf")
    wanted = args.convert if args.convert is not None else is_gguf
    if not wanted:
        return
    if not is_gguf:
        print("note: only GGUF downloads are converted; this file is used as downloaded", file=sys.stderr)
        return
    if not converter_available():
        print("note: the .ternary converter is not in this build; the GGUF is loaded directly", file=sys.stderr)
        return
    tty = sys.stderr.isatty()

    def progress(stage: str, done: int, total: int, detail: str) -> None:
        if tty:
            pct = 100.0 * done / total if total else 0.0
            print(f"\r{stage} {pct:5.1f}%  {detail[:40]:<40}", end="", file=sys.stderr, flush=True)

    print(f"converting {item.filename} to .ternary (use --no-convert to skip)...", file=sys.stderr)
    try:
        out = convert_installed(item, ModelStore(paths), progress=progress)
    except TernaryError as exc:
        print(f"\nnote: conversion to .ternary failed ({exc}); the verified GGUF is installed and loads directly",
              file=sys.stderr)
        return
    if tty:
        print(file=sys.stderr)
    print(f"converted: {out.path} (provenance: original sha256 {item.sha256})")
