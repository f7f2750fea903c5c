"""``ternary models``: the catalog and what is installed, with sizes, verification state and fit.

Also manages the user's own catalog entries (``add``/``remove``) and prints a recommendation for
this machine with the reason. ``--json`` gives the same data for scripts and the GUI.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="list catalog models and installed files; add/remove your own entries",
                       description="Without arguments: the catalog (sizes, minimum memory, fit on this machine), "
                                   "installed files with their verification state, and a recommendation.")
    p.add_argument("action", nargs="?", choices=["list", "add", "remove"], default="list")
    p.add_argument("id", nargs="?", help="entry id for add/remove")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--hf", metavar="REPO", help="add: a Hugging Face repo id (owner/name)")
    g.add_argument("--modelscope", metavar="REPO", help="add: a ModelScope repo id (owner/name)")
    g.add_argument("--local", metavar="PATH", help="add: a model file on this computer")
    p.add_argument("--file", help="add: the file inside the repo")
    p.add_argument("--sha256", help="add: expected sha256 (optional)")
    p.add_argument("--home", help="use this folder instead of the platform dirs (or set TERNARY_CHAT_HOME)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-detect", action="store_true", help="do not probe GPU/RAM (no fit column, no recommendation)")
    p.set_defaults(func=run)


def _add(args: argparse.Namespace, catalog) -> int:
    if not args.id:
        raise ValueError("models add needs an id, e.g. ternary models add my-model --hf owner/repo --file x.gguf")
    if args.local:
        from pathlib import Path

        m = catalog.add_user_model(model_id=args.id, file=Path(args.local).name, source="local",
                                   local_path=args.local, sha256=args.sha256)
    elif args.hf or args.modelscope:
        if not args.file:
            raise ValueError("--file is required with --hf/--modelscope")
        m = catalog.add_user_model(model_id=args.id, file=args.file, source="hf" if args.hf else "modelscope",
                                   repo=args.hf or args.modelscope, sha256=args.sha256)
    else:
        raise ValueError("models add needs --hf REPO, --modelscope REPO or --local PATH")
    print(f"added {m.id} to {catalog.paths.user_catalog_file}")
    return 0


def run(args: argparse.Namespace) -> int:
    from runtime.devices import format_bytes
    from runtime.hub.catalog import Catalog
    from runtime.hub.paths import HubPaths
    from runtime.hub.store import ModelStore, repo_slug

    paths = HubPaths.resolve(args.home)
    catalog = Catalog.load(paths)
    if args.action == "add":
        return _add(args, catalog)
    if args.action == "remove":
        if not args.id or not catalog.remove_user_model(args.id):
            print(f"error: no user entry {args.id!r}", file=sys.stderr)
            return 1
        print(f"removed {args.id}")
        return 0

    store = ModelStore(paths)
    installed = store.installed(include_unloadable=True)
    by_path = {(i.slug, i.filename): i for i in installed}
    mem = rec = None
    if not args.no_detect:
        from runtime.hub.recommend import MachineMemory, recommend_model

        mem = MachineMemory.detect()
        rec = recommend_model(catalog, mem)

    rows: list[dict[str, Any]] = []
    matched: set[tuple[str, str]] = set()
    for m in catalog.models:
        repo = (m.huggingface or m.modelscope).repo if (m.huggingface or m.modelscope) else None
        for f in m.files:
            key = (repo_slug(repo), f.file) if repo else None
            inst = by_path.get(key) if key else None
            if key and inst:
                matched.add(key)
            row = {
                "id": m.id, "name": m.name, "variant": f.variant, "file": f.file, "user": m.user,
                "architecture": m.architecture, "context_length": m.context_length,
                "size": f.size, "approx_size": f.approx_size, "sha256": f.sha256,
                "min_vram_bytes": f.min_vram_bytes, "min_ram_bytes": f.min_ram_bytes,
                "hf_repo": m.huggingface.repo if m.huggingface else None,
                "modelscope_repo": m.modelscope.repo if m.modelscope else None,
                "modelscope_verified": m.modelscope.verified if m.modelscope else None,
                "local_path": m.local_path, "default": f.default, "legacy": f.legacy,
                "installed": inst.state if inst else None, "path": str(inst.path) if inst else None,
                "role": m.role,
            }
            if mem is not None:
                from runtime.hub.recommend import fit_of

                fit = fit_of(f, mem)
                row["fit"] = fit.where if fit.need_bytes is not None else None
                row["fit_text"] = fit.describe()
            rows.append(row)
    extra = [{"file": i.filename, "slug": i.slug, "path": str(i.path), "state": i.state, "size": i.size,
              "sha256": i.sha256} for i in installed if (i.slug, i.filename) not in matched]
    quarantined = store.quarantined()

    if args.json:
        out = {"models": rows, "other_installed": extra, "quarantined": quarantined,
               "store": str(paths.models_dir), "recommendation": rec.to_dict() if rec else None}
        if mem is not None:
            out["machine"] = {"gpu": mem.gpu_name, "gpu_free_bytes": mem.gpu_free_bytes,
                              "ram_available_bytes": mem.ram_available_bytes}
        print(json.dumps(out, indent=2))
        return 0

    print(f"{'model':<20} {'variant':<14} {'size':>9} {'min VRAM':>9} {'min RAM':>9}  {'installed':<10} fit")
    for r in rows:
        size = r["size"] or r["approx_size"]
        size_text = ("~" if not r["size"] and size else "") + (format_bytes(size) if size else "?")
        vram = format_bytes(r["min_vram_bytes"]) if r["min_vram_bytes"] else "?"
        ram = format_bytes(r["min_ram_bytes"]) if r["min_ram_bytes"] else "?"
        state = r["installed"] or ("local" if r["local_path"] else "-")
        variant = r["variant"] + ("*" if r["default"] else "")
        role = "  [embedding model, for document search: not a chat model]" if r["role"] == "embedding" else ""
        print(f"{r['id']:<20} {variant:<14} {size_text:>9} {vram:>9} {ram:>9}  {state:<10} {r.get('fit_text', '')}{role}")
    print("(* = default file; sizes with ~ are approximate until the hub reports them; minimum memory at 4096 tokens)")
    if extra:
        print("\nother installed files:")
        for e in extra:
            print(f"  {e['slug']}/{e['file']}  {format_bytes(e['size'])}  {e['state']}")
    if quarantined:
        print(f"\nquarantined (failed verification, never loaded): {len(quarantined)} file(s) in {paths.quarantine_dir}")
    print(f"\nstore: {paths.models_dir}")
    if rec is not None:
        print(f"recommended: {rec.model.id + ' ' + rec.file.variant if rec.model else 'none'}: {rec.reason}")
    return 0
