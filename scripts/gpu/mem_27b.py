"""Where the 27B's peak VRAM goes: the live CUDA allocations at the moment of the peak.

Loads a synthetic 27B through ``Engine.load`` (weights generated on the GPU, moved to host memory
first so the load is the engine's own), answers one prompt with the allocator's history recorded,
then replays the trace to find the moment ``max_memory_allocated`` was reached and prints the live
blocks at that moment grouped by the repository frames that allocated them. Usage (device machine,
repo root):

    python3 scripts/gpu/mem_27b.py --model bonsai-27b-ptq1 --out $OUT
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def where(frames: list[dict]) -> str:
    """The innermost three frames inside this repository (the allocation site that explains it)."""
    own = [f for f in frames if "/runtime/" in f.get("filename", "") or "/scripts/" in f.get("filename", "")]
    return " < ".join(f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in own[:3]) or "?"


def peak_breakdown(trace: list[dict], base: int) -> tuple[int, int, list[tuple[str, int, int]]]:
    """(peak bytes, event index, [(site, bytes, count)]) of the live blocks at the trace's peak."""
    live: dict[int, tuple[int, int]] = {}
    cur = peak = base
    peak_i = -1
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], i)
            cur += e["size"]
            if cur > peak:
                peak, peak_i = cur, i
        elif e["action"] == "free_requested" and e["addr"] in live:
            cur -= live.pop(e["addr"])[0]
    live = {}
    for i, e in enumerate(trace[: peak_i + 1]):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], i)
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for size, i in live.values():
        g = groups[where(trace[i].get("frames", []))]
        g[0] += size
        g[1] += 1
    rows = sorted(((k, v[0], v[1]) for k, v in groups.items()), key=lambda r: -r[1])
    return peak, peak_i, rows


def main() -> int:
    from engine_27b import synthetic_on_host  # same folder

    from runtime.devices import parse_bytes
    from runtime.engine import CancelToken, Engine
    from runtime.generation import GenerationSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/mem27b")
    ap.add_argument("--model", default="bonsai-27b-ptq1")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--max-vram", default="")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    md = synthetic_on_host(a.model)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    cap = parse_bytes(a.max_vram) if a.max_vram else None
    t = time.perf_counter()
    eng = Engine.load(md, device="cuda", context_length=a.ctx, max_vram_bytes=cap)
    load_s = time.perf_counter() - t
    after_load = torch.cuda.memory_allocated()
    load_peak = torch.cuda.max_memory_allocated()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(1000, md.config.vocab_size - 1000, (a.prompt_tokens,), generator=g).tolist()
    s = GenerationSettings(temperature=0.0, max_new_tokens=a.gen, ignore_eos=True, enable_thinking=False)
    phases = {}
    for i in range(2):
        eng.reset()
        torch.cuda.reset_peak_memory_stats()
        done = list(eng._generate(prompt, s, CancelToken(), 0.0))[-1]
        phases[f"answer{i}_peak"] = torch.cuda.max_memory_allocated()
        phases[f"answer{i}_decode_tok_s"] = round(done.stats.decode_tok_s, 1)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][torch.cuda.current_device()]
    peak, peak_i, rows = peak_breakdown(trace, base)
    r = {"model": a.model, "ctx": a.ctx, "max_vram": a.max_vram or None, "load_s": round(load_s, 1),
         "base_before_load": base, "after_load": after_load, "load_peak": load_peak, **phases,
         "trace_events": len(trace), "trace_peak": peak, "trace_peak_event": peak_i,
         "trace_peak_action_site": where(trace[peak_i].get("frames", [])) if peak_i >= 0 else None,
         "plan": {k: v for k, v in (eng.info.plan or {}).items() if not isinstance(v, (dict, list))},
         "live_at_peak": [{"site": k, "MB": round(b / 1e6, 2), "n": n} for k, b, n in rows[:40]]}
    print(json.dumps(r, indent=1), flush=True)
    (out / f"mem_{a.model}{'_' + a.max_vram if a.max_vram else ''}.json").write_text(json.dumps(r, indent=1))
    eng.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
