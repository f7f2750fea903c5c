"""``ternary plan``: how a model would be placed on this (or a hypothetical) GPU, and why.

Works on a CPU-only machine: ``--gpu-memory 8GiB`` plans for a card you do not have, and
``--synthetic NAME`` plans from the exact Bonsai shapes without any file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtime.cli.generate import add_kv_cache_option, planner_kv_name


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="show how much context fits and what would be offloaded",
                       description="Plan GPU memory for a model: context length, layers on GPU/CPU, "
                                   "where the embedding lives, predicted peak memory, and why.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("model", nargs="?", help="model file or folder (.ternary, .gguf, Hugging Face folder)")
    src.add_argument("--synthetic", metavar="NAME", help="exact shapes of a Bonsai model (bonsai-1.7b, -4b, -8b, -27b, -27b-ptq1)")
    p.add_argument("--max-vram", metavar="BYTES", help="behave like a card with this much memory (e.g. 6GiB)")
    p.add_argument("--gpu-memory", metavar="BYTES", help="plan for a hypothetical GPU of this size (works without a GPU)")
    p.add_argument("--ctx", type=int, metavar="N", help="cap the context length")
    add_kv_cache_option(p)
    p.add_argument("--offload", choices=["auto", "stream", "mapped", "cpu"], default="auto",
                   help="how host-resident layers run: streamed to the GPU, mapped (read by the GPU in place) "
                        "or computed on the CPU (default: the fastest one for this machine)")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def model_sizes_for(args: argparse.Namespace) -> Any:
    """ModelSizes of ``--synthetic NAME`` (no weights generated) or of a model file's header."""
    from runtime.planner import ModelSizes

    if args.synthetic:
        from runtime.formats.model_data import T2, T3
        from runtime.synthetic import synthetic_config

        cfg = synthetic_config(args.synthetic)
        return ModelSizes.from_config(cfg, encoding=T3 if args.synthetic.endswith("ptq1") else T2)
    return sizes_from_file(args.model)


def sizes_from_file(path: str) -> Any:
    """ModelSizes from a model file's header only (no tensor data is read)."""
    from runtime.formats.loader import open_source
    from runtime.formats.model_data import t3_bytes_per_group
    from runtime.planner import ModelSizes

    src = open_source(path)
    try:
        sizes: dict[str, tuple[int, int]] = {}
        for name in src.tensor_names():
            spec = src.tensor_spec(name)
            elems = 1
            for d in spec.shape:
                elems *= d
            if spec.encoding in ("t2", "t3"):
                rows, cols = spec.shape
                groups = cols // spec.group_size
                codes = rows * (cols // 4 if spec.encoding == "t2" else groups * t3_bytes_per_group(spec.group_size))
                sizes[name] = (codes + rows * groups * 2, elems)
            else:
                sizes[name] = (elems * (4 if spec.encoding == "f32" else 2), elems)
        return ModelSizes.from_tensor_sizes(src.config, sizes)
    finally:
        src.close()


def load_model_data(path: str) -> Any:
    """Read a model through the formats package's reader (whatever it is called when present)."""
    import importlib

    from runtime.errors import UnsupportedModelError

    for mod_name, fn_name in (("runtime.formats", "load_model"), ("runtime.formats.reader", "load_model"),
                              ("runtime.formats.loader", "load_model")):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        fn = getattr(mod, fn_name, None)
        if fn is not None:
            return fn(path)
    raise UnsupportedModelError("reading model files is not available in this build; use --synthetic NAME")


def run(args: argparse.Namespace) -> int:
    from runtime.devices import parse_bytes
    from runtime.planner import plan_for_this_machine

    sizes = model_sizes_for(args)
    kw: dict[str, Any] = {"ctx_cap": args.ctx, "kv_dtype": planner_kv_name(args.kv_cache)}
    if args.offload != "auto":
        kw["offload_mode"] = args.offload
    max_vram = parse_bytes(args.max_vram) if args.max_vram else None
    gpu_memory = parse_bytes(args.gpu_memory) if args.gpu_memory else None
    device = args.device
    if max_vram is not None and gpu_memory is None and device == "auto":
        from runtime import devices

        if not devices.detect().gpus:  # --max-vram on a CPU-only machine: plan for a card of that size
            gpu_memory = max_vram
    plan = plan_for_this_machine(sizes, device=device, max_vram=max_vram, gpu_memory=gpu_memory, **kw)
    if args.json:
        json.dump(plan.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        name = args.synthetic or args.model
        print(f"model:             {name} ({sizes.config.arch}, {sizes.config.num_layers} layers)")
        print(plan.describe())
    return 0
