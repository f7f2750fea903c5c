# ruff: noqa: B023  (row() calls each lambda immediately, inside the loop)
"""Collect the JSON results of scripts/gpu/run_gpu_bench.sh into the tables of docs/benchmarks.md.

Usage: gpu_bench_summary.py RESULTS_DIR  (bench_*.json, offload_*.json, mem_*.json, llama_*.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(p: Path) -> dict:
    try:
        return json.loads(p.read_text())
    except Exception as exc:  # a failed stage leaves no/partial JSON: say so, keep going
        return {"error": f"{p.name}: {exc}"}


def gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def llama_numbers(d: Path, name: str) -> tuple[str, str]:
    p = d / f"llama_{name}.json"
    if not p.exists():
        return "n/a", "n/a"
    try:
        rows = json.loads(p.read_text())
    except Exception:
        return "parse error", "parse error"
    pp = next((r for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0), None)
    tg = next((r for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0), None)
    return _ts(pp), _ts(tg)


def _ts(row: dict | None) -> str:
    return f"{row['avg_ts']:.0f}" if row else "n/a"


def row(fn, what: str) -> None:
    try:
        fn()
    except Exception as exc:  # a stage that ran but produced an unexpected result: show, go on
        print(f"| {what} | {type(exc).__name__}: {exc} |")


def main() -> int:
    d = Path(sys.argv[1])
    print("| model | ours decode tok/s | % roofline | bf16 eager decode | ours/bf16 | llama.cpp decode | ours prefill tok/s | llama.cpp prefill | warm TTFT ms | cold start s | peak alloc / (weights+KV) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    full_tokens = {}
    for name in ("bonsai-1.7b", "bonsai-4b", "bonsai-8b"):
        r = load(d / f"bench_{name}.json")
        if "error" in r:
            print(f"| {name} | {r['error']} |")
            continue
        o, b = r["ours"], r.get("bf16", {})
        full_tokens[name] = o["tokens"]
        lp, lt = llama_numbers(d, name)
        row(lambda: print(f"| {name} | {o['decode_tok_s']:.0f} | {o.get('fraction_of_roofline', 0) * 100:.0f}% of {r['roofline_tok_s']:.0f} "
              f"| {b.get('decode_tok_s', float('nan')):.1f} | {o.get('speedup_vs_bf16', float('nan')):.1f}x | {lt} "
              f"| {o['prefill_tok_s']:.0f} | {lp} | {o['ttft_s'] * 1e3:.1f} | {o['cold_start_s']:.2f} "
              f"| {o['peak_vs_weights_plus_kv']:.3f} |"), name)
    print()
    print("| run | plan (GPU/CPU layers, mode, emb) | ctx | decode tok/s | peak alloc | device used | output identical to full-GPU |")
    print("|---|---|---|---|---|---|---|")
    for p in sorted(d.glob("offload_*.json")):
        r = load(p)
        if "error" in r:
            print(f"| {p.stem} | {r['error']} |")
            continue
        o, pl = r["ours"], r["plan"]
        ref = full_tokens.get(r["model"].replace("synthetic-", ""), [])
        same = o["tokens"] == ref[: len(o["tokens"])] if ref else "n/a"
        row(lambda: print(f"| {p.stem} (max-vram {gib(r['max_vram'])}) | {pl['layers_on_gpu']}/{pl['layers_on_cpu']} {pl['offload_mode']} "
              f"emb={pl['embedding_device']} | {pl['context_length']} | {o['decode_tok_s']:.1f} | {gib(o['peak_allocated_bytes'])} "
              f"| {gib(o.get('device_used_bytes'))} | {same} |"), p.stem)
    print()
    print("| ctx | predicted alloc | measured max_memory_allocated | ratio | predicted incl. context | device used (NVML) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for p in sorted(d.glob("mem_*.json"), key=lambda q: int(q.stem.split("_")[-1])):
        r = load(p)
        if "error" in r:
            print(f"| {p.stem} | {r['error']} |")
            continue
        o = r["ours"]
        used = o.get("device_used_bytes") or 0
        base = r.get("device_used_before_bytes") or 0  # NVML used before our CUDA init: other processes + driver-reserved
        row(lambda: print(f"| {r['ctx']} | {gib(r['predicted_allocated_bytes'])} | {gib(o['peak_allocated_bytes'])} "
              f"| {o['peak_allocated_bytes'] / r['predicted_allocated_bytes']:.3f} | {gib(r['predicted_total_bytes'])} "
              f"| {gib(used - base)} | {(used - base) / r['predicted_total_bytes']:.3f} |"), p.stem)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
