"""Does closing an engine give all of its GPU memory back? Loads the same synthetic model several
times in one process (one short greedy answer each, then ``Engine.close``), and after each close
prints ``torch.cuda.memory_allocated`` and the CUDA tensors still reachable from Python (grouped by
shape and dtype, largest first, with the type of one referrer), so a leak names its owner.
Usage (device machine, repo root): python3 scripts/gpu/diag_engine_leak.py --model bonsai-1.7b --loads 4
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def live_cuda_tensors() -> list[torch.Tensor]:
    out = []
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.is_cuda:
                out.append(o)
        except Exception:  # objects that fail isinstance/attribute access
            continue
    return out


def describe(tensors: list[torch.Tensor], top: int = 12) -> str:
    groups: dict[tuple, list[torch.Tensor]] = collections.defaultdict(list)
    for t in tensors:
        groups[(tuple(t.shape), str(t.dtype))].append(t)
    rows = sorted(groups.items(), key=lambda kv: -sum(x.untyped_storage().nbytes() for x in kv[1]))
    lines = []
    for (shape, dtype), ts in rows[:top]:
        nbytes = sum(x.untyped_storage().nbytes() for x in ts)
        refs = [type(r).__name__ for r in gc.get_referrers(ts[0]) if r is not ts and not isinstance(r, list)][:3]
        lines.append(f"    {len(ts):4d} x {shape} {dtype}: {nbytes / 2**20:8.2f} MiB, referrers {refs}")
    return "\n".join(lines)


def main() -> int:
    from runtime.engine import CancelToken, Engine
    from runtime.generation import GenerationSettings
    from runtime.synthetic import synthetic_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-1.7b")
    ap.add_argument("--loads", type=int, default=4)
    ap.add_argument("--gen", type=int, default=16)
    a = ap.parse_args()
    md = synthetic_model(a.model, seed=0, group_size=128)
    prompt = list(range(1000, 1064))
    s = GenerationSettings(temperature=0.0, max_new_tokens=a.gen, ignore_eos=True, enable_thinking=False)
    base = torch.cuda.memory_allocated()
    print(f"{a.model}: allocated before any load {base / 2**20:.1f} MiB", flush=True)
    for i in range(a.loads):
        eng = Engine.load(md, device="cuda", context_length=2048)
        loaded = torch.cuda.memory_allocated()
        list(eng._generate(prompt, s, CancelToken(), 0.0))
        eng.close()
        del eng
        gc.collect()
        torch.cuda.empty_cache()
        now = torch.cuda.memory_allocated()
        live = live_cuda_tensors()
        live_bytes = sum(t.untyped_storage().nbytes() for t in live)
        print(f"load {i}: loaded {loaded / 2**20:.1f} MiB, after close {now / 2**20:.1f} MiB "
              f"(+{(now - base) / 2**20:.1f} over start), reserved {torch.cuda.memory_reserved() / 2**20:.1f} MiB, "
              f"{len(live)} live CUDA tensors reachable from Python ({live_bytes / 2**20:.1f} MiB)", flush=True)
        if live:
            print(describe(live), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
