"""Continuous batching on a GPU: aggregate decode tok/s at 1/4/8/16 concurrent streams, one process.

Usage (device machine, repo root):
    python3 scripts/gpu/bench_batched.py --model bonsai-8b --streams 1,4,8,16 --prompt 128 --gen 128 --runs 3 \\
        --write-gguf /dev/shm/gguf/bonsai-8b.gguf --out OUT.json

What it does, in order: a synthetic model with the exact shapes of ``--model`` (random ternary weights; written
as GGUF in a background thread for llama.cpp's ``llama-batched-bench`` on the very same weights),
``Engine.load`` on the GPU, then

1. **single**: the engine's own single-sequence path (CUDA-graph decode), greedy, ``--runs`` times after a warm-up:
   decode tok/s, and each of the first few prompts' greedy tokens (the reference for the batched streams);
2. **batched**: ``Engine.enable_batching(max streams)``; for each stream count n, a warm-up round and ``--runs``
   rounds of n threads each asking for ``--gen`` tokens of its own ``--prompt``-token prompt, all at once.

A round's aggregate decode rate is (tokens after each stream's first) / (last token - earliest first token):
prefill excluded, as llama-batched-bench's S_TG excludes it, and the staggered starts and ends of the streams
counted against us (later streams' prefills run inside the window, one per turn of the driver). The full-batch
rate is S_TG's own definition: streams x steps / time over the decode steps that ran all the round's streams
(``BatchDecoder.step_log``), the ramp up and down left out. Also reported: the sum of the streams' own decode rates, median TTFT, mean rows per step,
and how many streams' greedy tokens equal the single-sequence path's for the same prompt.
One JSON line per stream count on stdout; the whole list to ``--out``.
"""

from __future__ import annotations

import argparse
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


def run_stream(engine, prompt, settings, out: dict) -> None:
    from runtime.generation import DoneEvent

    start = time.perf_counter()
    for ev in engine.generate_tokens(prompt, settings):
        if isinstance(ev, DoneEvent):
            st = ev.stats
            out.update(start=start, first=start + st.ttft_s, end=start + st.total_s, tokens=st.token_ids,
                       ttft_s=st.ttft_s, decode_tok_s=st.decode_tok_s, finish=st.finish_reason)


def round_of(engine, prompts, settings) -> dict:
    from runtime.batching import full_batch_rate

    outs = [{} for _ in prompts]
    threads = [threading.Thread(target=run_stream, args=(engine, p, settings, o)) for p, o in zip(prompts, outs, strict=False)]
    batch = engine.batch
    steps0, rows0 = batch.steps, batch.step_rows
    batch.step_log = log_ = []
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = min(o["first"] for o in outs)
    last = max(o["end"] for o in outs)
    after_first = sum(len(o["tokens"]) - 1 for o in outs)
    steps = batch.steps - steps0
    batch.step_log = None
    # the steps that ran every stream (what llama-batched-bench's S_TG times: all B sequences decoding together)
    full_rate, full = full_batch_rate(log_, len(prompts))
    return {"aggregate_tok_s": after_first / (last - first), "full_batch_tok_s": full_rate, "full_steps": len(full),
            "sum_stream_tok_s": sum(o["decode_tok_s"] for o in outs),
            "ttft_ms_median": 1e3 * statistics.median(o["ttft_s"] for o in outs),
            "mean_rows_per_step": (batch.step_rows - rows0) / steps if steps else 0.0,
            "wall_s": last - min(o["start"] for o in outs), "tokens": [o["tokens"] for o in outs],
            "finish": sorted({o["finish"] for o in outs})}


def main() -> int:
    from runtime.engine import Engine
    from runtime.generation import DoneEvent, GenerationSettings
    from runtime.synthetic import synthetic_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-8b")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=1024, help="context of the engine and of each request")
    ap.add_argument("--references", type=int, default=4, help="prompts whose single-sequence tokens are compared")
    ap.add_argument("--write-gguf", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    streams = [int(x) for x in a.streams.split(",")]
    md = synthetic_model(a.model, seed=0, group_size=128)
    log(f"synthetic {a.model} generated")
    writer = None
    if a.write_gguf:
        from runtime.formats.gguf_writer import write_gguf

        Path(a.write_gguf).parent.mkdir(parents=True, exist_ok=True)

        def write() -> None:
            t = time.perf_counter()
            write_gguf(md, a.write_gguf, "Q2_0")
            log(f"wrote {a.write_gguf} in {time.perf_counter() - t:.0f} s")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
    engine = Engine.load(md, device="cuda", context_length=a.ctx)
    log(f"loaded: {engine.info.device}, ctx {engine.info.context_length}, backend {engine.info.backend}")
    g = torch.Generator().manual_seed(0)
    vocab = md.config.vocab_size
    prompts = [torch.randint(1000, vocab - 1000, (a.prompt,), generator=g).tolist() for _ in range(max(streams))]
    s = GenerationSettings(temperature=0.0, max_new_tokens=a.gen, ignore_eos=True, enable_thinking=False,
                           repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    gpu = torch.cuda.get_device_name()
    results = []

    # 1. the single-sequence path
    rates, refs = [], []
    for i in range(1 + a.runs):
        engine.reset()
        for ev in engine.generate_tokens(prompts[0], s):
            if isinstance(ev, DoneEvent) and i:
                rates.append(ev.stats.decode_tok_s)
    for p in prompts[:a.references]:
        engine.reset()
        for ev in engine.generate_tokens(p, s):
            if isinstance(ev, DoneEvent):
                refs.append(ev.stats.token_ids)
    single = {"path": "single", "streams": 1, "decode_tok_s": statistics.median(rates), "runs": rates, "gpu": gpu}
    print(json.dumps(single), flush=True)
    results.append(single)

    # 2. continuous batching
    t = time.perf_counter()
    batch = engine.enable_batching(max(streams), a.ctx)
    log(f"batching on: {batch.max_batch} slots x {batch.context} positions, buckets {batch.buckets}, "
        f"graphs captured in {time.perf_counter() - t:.1f} s; peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    for n in streams:
        runs = []
        for i in range(1 + a.runs):
            r = round_of(engine, prompts[:n], s)
            if i:
                runs.append(r)
        med = sorted(runs, key=lambda r: r["aggregate_tok_s"])[len(runs) // 2]
        same = [med["tokens"][j] == refs[j] for j in range(min(n, len(refs)))]
        prefix = [next((k for k, (x, y) in enumerate(zip(med["tokens"][j], refs[j], strict=False)) if x != y), len(refs[j]))
                  for j in range(min(n, len(refs)))]
        row = {"path": "batched", "streams": n, "aggregate_tok_s": med["aggregate_tok_s"],
               "full_batch_tok_s": statistics.median(r["full_batch_tok_s"] for r in runs),
               "full_batch_runs": [round(r["full_batch_tok_s"], 1) for r in runs],
               "full_steps": [r["full_steps"] for r in runs],
               "per_stream_tok_s": med["aggregate_tok_s"] / n,
               "runs": [round(r["aggregate_tok_s"], 1) for r in runs],
               "sum_stream_tok_s": med["sum_stream_tok_s"], "ttft_ms_median": med["ttft_ms_median"],
               "mean_rows_per_step": med["mean_rows_per_step"], "finish": med["finish"],
               "greedy_equal_single": f"{sum(same)}/{len(same)}", "equal_prefix_tokens": prefix,
               "prompt": a.prompt, "gen": a.gen, "ctx": batch.context, "gpu": gpu}
        print(json.dumps(row), flush=True)
        results.append(row)
    single_ratio = results[1]["aggregate_tok_s"] / single["decode_tok_s"] if streams[0] == 1 else None
    log(f"batched 1 stream / single path: {single_ratio}")
    mem = {"max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
           "device_used_gib": (torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]) / 2**30}
    print(json.dumps(mem), flush=True)
    results.append(mem)
    engine.enable_batching(1)
    if writer is not None:
        writer.join()
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
