"""``ternary inspect FILE [--json] [--stats]``: what a model file contains.

Shows format and version, architecture and dimensions, tokenizer and defaults, provenance and
the tensor table; ``--stats`` adds per-tensor fractions of -1/0/+1 and scale statistics.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a model file's format, architecture and tensors",
                       description="Inspect a .ternary, .gguf or Hugging Face model folder.")
    p.add_argument("file", help="model file or folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stats", action="store_true", help="decode every tensor: -1/0/+1 fractions, scale stats")
    p.set_defaults(func=run)


def describe(path: str, stats: bool = False) -> dict[str, Any]:
    """Everything ``inspect`` shows, as a JSON-ready dict."""
    from runtime.formats.loader import detect_format, open_source
    from runtime.formats.model_data import TernaryTensor
    from runtime.formats.stats import tensor_stats

    fmt = detect_format(path)
    src = open_source(path, quantize=True)
    try:
        info: dict[str, Any] = {"path": str(path), "format": fmt}
        if fmt == "ternary":
            info["version"] = src.header["version"]
            info["provenance"] = src.header.get("provenance")
        elif fmt == "gguf":
            info["version"] = src.file.version
            info["gguf_types"] = src.source_format.removeprefix("gguf:")
        info["name"] = src.model_name
        info["config"] = src.config.to_dict()
        tok = src.tokenizer
        info["tokenizer"] = None if tok is None else {
            "bos_token_id": tok.bos_token_id, "eos_token_ids": tok.eos_token_ids, "pad_token_id": tok.pad_token_id,
            "add_bos_token": tok.add_bos_token, "has_chat_template": bool(tok.chat_template)}
        info["generation_defaults"] = dict(src.generation_defaults)
        rows = []
        total = 0
        for n in src.tensor_names():
            s = src.tensor_spec(n)
            _c, _so, nbytes = s.layout()
            total += nbytes
            row: dict[str, Any] = {"name": n, "shape": list(s.shape), "encoding": s.encoding, "nbytes": nbytes}
            if s.group_size:
                row["group_size"] = s.group_size
            if fmt == "gguf":
                row["gguf_type"] = src.file.tensors[src.names[n]].gtype.name
            if stats:
                t = src.load(n)
                row["stats"] = tensor_stats(t)
                if isinstance(t, TernaryTensor):
                    row["stats"]["ternary"] = True
            rows.append(row)
        info["tensors"] = rows
        info["tensor_bytes"] = total
        if stats and getattr(src, "max_quant_error", 0.0):
            info["max_quantization_error_if_converted"] = src.max_quant_error
        return info
    finally:
        src.close()


def _layer_of(name: str) -> str:
    m = re.search(r"layers\.(\d+)\.", name)
    return f"layer {m.group(1)}" if m else "global"


def run(args: argparse.Namespace) -> int:
    info = describe(args.file, stats=args.stats)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    c = info["config"]
    print(f"file:          {info['path']}")
    print(f"format:        {info['format']}" + (f" version {info['version']}" if "version" in info else "")
          + (f" ({info['gguf_types']})" if "gguf_types" in info else ""))
    print(f"name:          {info['name']}")
    print(f"architecture:  {c['arch']}: {c['num_layers']} layers, hidden {c['hidden_size']}, "
          f"ffn {c['intermediate_size']}, heads {c['num_heads']}/{c['num_kv_heads']} x {c['head_dim']}, "
          f"vocab {c['vocab_size']}, tied {c['tie_word_embeddings']}")
    rs = c.get("rope_scaling")
    print(f"rope:          theta {c['rope_theta']:g}" + (
        f", {rs['type']} x{rs['factor']:g} from {rs['original_max_position_embeddings']}" if rs else "")
          + f", context {c['max_position_embeddings']}, rms eps {c['rms_norm_eps']:g}")
    if info.get("tokenizer"):
        t = info["tokenizer"]
        print(f"tokenizer:     bos {t['bos_token_id']}, eos {t['eos_token_ids']}, pad {t['pad_token_id']}, "
              f"chat template {'yes' if t['has_chat_template'] else 'no'}")
    else:
        print("tokenizer:     none")
    if info["generation_defaults"]:
        print("defaults:      " + ", ".join(f"{k}={v}" for k, v in info["generation_defaults"].items()))
    if info.get("provenance"):
        p = info["provenance"]
        print(f"provenance:    {p.get('source_name')} ({p.get('source_format')}) sha256 {p.get('source_sha256') or '-'}")
    print(f"tensors:       {len(info['tensors'])}, {info['tensor_bytes'] / (1 << 20):.1f} MiB")
    print()
    last_layer = None
    for r in info["tensors"]:
        layer = _layer_of(r["name"])
        if args.stats and layer != last_layer:
            print(f"-- {layer}")
            last_layer = layer
        enc = r["encoding"] + (f"/g{r['group_size']}" if "group_size" in r else "")
        if "gguf_type" in r:
            enc += f" ({r['gguf_type']})"
        line = f"{r['name']:52s} {str(r['shape']):16s} {enc:22s} {r['nbytes']:>12,d}"
        st = r.get("stats")
        if st and st.get("ternary"):
            line += (f"  -1 {st['minus']:.3f}  0 {st['zero']:.3f}  +1 {st['plus']:.3f}"
                     + (f"  +2 {st['two']:.3f}" if st["two"] else "")
                     + f"  scale {st['scale_min']:.3g}/{st['scale_mean']:.3g}/{st['scale_max']:.3g}")
        elif st:
            line += f"  min {st['min']:.3g} mean {st['mean']:.3g} max {st['max']:.3g}"
        print(line)
    return 0
