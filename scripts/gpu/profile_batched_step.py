"""Where a batched decode step's time goes (continuous batching, ``runtime.batching``), on a GPU.

Usage (device machine, repo root):
    python3 scripts/gpu/profile_batched_step.py --model bonsai-8b --max-batch 16 --out OUT.json

For each bucket B of ``Engine.enable_batching(max_batch)`` (rows at position ``--pos``, each in its own slot):

1. **graph**: the captured model step replayed alone (ms per step, median of 5 timings of 20 replays), and the
   all-rows greedy pick (``greedy_rows``) replayed alone;
2. **kernels**: the same step run eagerly under ``torch.profiler``: GPU time per kernel family (mat-vec by
   variant, attention, RoPE/KV write, quantisation, embedding), summed over the step. Eager launches add host
   gaps between kernels but do not change a kernel's own time;
3. **rounds**: B threads decoding ``--gen`` tokens of their own ``--prompt``-token prompts through the real
   driver, every handed-out step time-stamped: the full-batch rate (tokens per second over the steps that ran
   all B rows, the figure llama-batched-bench's S_TG is) next to the whole-window aggregate (first token of
   the earliest stream to the last token of the latest, prefills of later arrivals and the ramp down inside).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def time_replays(fn, reps: int = 20) -> float:
    """ms per call of ``fn`` (already a graph replay), median of 5 timings of ``reps`` calls."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / reps)
    return statistics.median(ts)


def family(name: str) -> str:
    n = name.lower()
    for key, fam in (("q8t", "matvec q8t"), ("q8m", "matvec q8m"), ("q8p", "matvec q8p"), ("q8c", "matvec q8c"),
                     ("gemv_q8", "matvec q8"), ("dot", "matvec dot"), ("gemv", "matvec other"), ("quant_x", "quantise x"),
                     ("attention", "attention"), ("attn", "attention"), ("merge", "attention"),
                     ("rope", "qk-norm/rope/kv write"), ("sample", "sampling"), ("embed", "embedding")):
        if key in n:
            return fam
    return "other: " + name[:60]


def kernel_profile(batch, bucket: int, iters: int = 5) -> dict:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        batch._model_step(bucket)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            batch._model_step(bucket)
        torch.cuda.synchronize()
    fams: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None)
        if t is None:
            t = getattr(ev, "cuda_time_total", 0.0)
        if not t or ev.key.startswith(("cuda", "Memcpy", "Memset")) and "kernel" not in ev.key.lower():
            continue
        f = family(ev.key)
        fams[f] += t / 1e3 / iters  # us -> ms per step
        counts[f] += ev.count // iters
    return {k: {"ms": round(v, 4), "launches": counts[k]} for k, v in sorted(fams.items(), key=lambda kv: -kv[1])}


def main() -> int:
    from runtime.batching import full_batch_rate
    from runtime.engine import Engine
    from runtime.generation import DoneEvent, GenerationSettings
    from runtime.synthetic import synthetic_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-8b")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--pos", type=int, default=192, help="position of every row in the timed steps")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", default="1,4,8,16", help="stream counts of the driver rounds")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    md = synthetic_model(a.model, seed=0, group_size=128)
    engine = Engine.load(md, device="cuda", context_length=a.ctx)
    log(f"loaded {a.model}: {torch.cuda.get_device_name()}")
    t = time.perf_counter()
    batch = engine.enable_batching(a.max_batch, a.ctx)
    log(f"batching: buckets {batch.buckets}, graphs captured (tuning included) in {time.perf_counter() - t:.1f} s")
    results: dict = {"gpu": torch.cuda.get_device_name(), "model": a.model, "pos": a.pos, "buckets": {}}
    with torch.inference_mode():
        for b in batch.buckets:
            batch.slots[:b] = torch.arange(b, dtype=torch.int32, device=batch.device)
            batch.pos[:b] = a.pos
            step_ms = time_replays(batch._graphs[b].replay)
            batch._sample_greedy_rows(b)  # captures its graph
            batch.pos[:b] = a.pos
            greedy_ms = time_replays(batch._greedy_graphs[b].replay)
            batch.pos[:b] = a.pos
            kern = kernel_profile(batch, b)
            row = {"step_graph_ms": round(step_ms, 4), "greedy_rows_ms": round(greedy_ms, 4),
                   "kernel_ms_sum": round(sum(v["ms"] for v in kern.values()), 4), "kernels": kern}
            results["buckets"][b] = row
            log(f"bucket {b}: step {step_ms:.3f} ms, greedy {greedy_ms:.3f} ms, kernels {row['kernel_ms_sum']:.3f} ms")
            print(json.dumps({"bucket": b, **row}), flush=True)
        for r in range(a.max_batch):
            batch._park(r)

    # the real driver: every handed-out step stamped with its time and row count
    stamps: list[tuple[float, int]] = []
    batch.step_log = stamps
    g = torch.Generator().manual_seed(0)
    vocab = md.config.vocab_size
    s = GenerationSettings(temperature=0.0, max_new_tokens=a.gen, ignore_eos=True, enable_thinking=False,
                           repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    results["rounds"] = {}
    for n in [int(x) for x in a.rounds.split(",")]:
        prompts = [torch.randint(1000, vocab - 1000, (a.prompt,), generator=g).tolist() for _ in range(n)]
        per = []
        for i in range(4):  # the first a warm-up (graphs of the ramp's row counts captured)
            stamps.clear()
            outs: list[dict] = [{} for _ in range(n)]

            def run(p, o) -> None:
                t0 = time.perf_counter()
                for ev in engine.generate_tokens(p, s):
                    if isinstance(ev, DoneEvent):
                        o.update(first=t0 + ev.stats.ttft_s, end=t0 + ev.stats.total_s,
                                 tokens=len(ev.stats.token_ids), prefill_ms=1e3 * ev.stats.ttft_s)

            ths = [threading.Thread(target=run, args=(p, o)) for p, o in zip(prompts, outs, strict=True)]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            first, last = min(o["first"] for o in outs), max(o["end"] for o in outs)
            window = sum(o["tokens"] - 1 for o in outs) / (last - first)
            full_rate, full = full_batch_rate(stamps, n)
            gaps = [b - a_ for a_, b in zip(full, full[1:], strict=False)]
            if i == 0:
                continue
            per.append({"window_tok_s": window, "full_batch_tok_s": full_rate, "full_steps": len(full),
                        "all_steps": len(stamps), "full_step_ms_median": 1e3 * statistics.median(gaps) if gaps else 0,
                        "ramp_s": max(o["first"] for o in outs) - first,
                        "ttft_ms": sorted(o["prefill_ms"] for o in outs)})
        med = sorted(per, key=lambda r: r["full_batch_tok_s"])[1]
        results["rounds"][n] = {"median_run": med, "runs_full": [round(r["full_batch_tok_s"], 1) for r in per],
                                "runs_window": [round(r["window_tok_s"], 1) for r in per]}
        print(json.dumps({"streams": n, **results["rounds"][n]}), flush=True)
    engine.enable_batching(1)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
