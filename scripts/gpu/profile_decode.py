"""Where does a decode step (and a 512-token prefill) spend its time? Kernel-level profile on the GPU.

Usage (GPU machine, repo root): ``python3 scripts/gpu/profile_decode.py --model bonsai-8b --out DIR``

Builds the synthetic model the way ``ternary bench`` does, prefills a 512-token prompt, then:
(1) times graph-replayed decode steps (tok/s, as the bench measures them), (2) profiles 20 graph
replays and 3 eager steps with ``torch.profiler`` (CUDA kernel times, launch counts), (3) profiles one
512-token prefill. Prints the top kernels by total GPU time and writes the tables to ``DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.bench import _prefill, build_model, synthetic_model_cached  # noqa: E402
from runtime.generation import GenerationSettings  # noqa: E402
from runtime.gpu_decode import GraphDecoder, fused_qwen3_step  # noqa: E402
from runtime.kernels import triton_linear as tlin  # noqa: E402
from runtime.planner import plan_for_this_machine  # noqa: E402


def table(prof, n: int = 40) -> str:
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=n, max_name_column_width=90)


def kernel_sum_us(prof) -> tuple[float, int]:
    tot, cnt = 0.0, 0
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot += e.device_time_total
            cnt += e.count
    return tot, cnt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-8b")
    ap.add_argument("--out", default=os.environ.get("OUT", "prof_out"))
    ap.add_argument("--cache-dir", default="/dev/shm/ternary-synthetic")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda", 0)
    t0 = time.time()
    md = synthetic_model_cached(args.model, 0, args.cache_dir, workers=12)
    print(f"model ready in {time.time() - t0:.1f}s", flush=True)
    plan = plan_for_this_machine(md, device=str(dev), ctx_cap=args.ctx)
    model, graph_safe, notes = build_model(md, dev, plan)
    print("graph_safe", graph_safe, notes, flush=True)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, md.config.vocab_size, (args.prompt,), generator=g).tolist()
    ids = torch.tensor(prompt, device=dev)
    res: dict = {"model": args.model, "prompt": args.prompt, "ctx": plan.context_length}
    with torch.inference_mode():
        for _ in range(2):
            logits = _prefill(model, ids, plan.prefill_chunk)
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            logits = _prefill(model, ids, plan.prefill_chunk)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        res["prefill_ms"] = sorted(ts)[2] * 1e3
        step = fused_qwen3_step(model)
        res["fused"] = step is not None
        dec = GraphDecoder(step, model.vocab_size, dev, use_graph=True)
        dec.configure(GenerationSettings(temperature=0.0, max_new_tokens=args.steps), prompt)
        first = int(torch.argmax(logits))
        list(dec.tokens(first, len(prompt), 8))  # capture
        rates = []
        for _ in range(3):
            dec.configure(GenerationSettings(temperature=0.0, max_new_tokens=args.steps), prompt)
            torch.cuda.synchronize()
            t = time.perf_counter()
            n = len(list(dec.tokens(first, len(prompt), args.steps)))
            rates.append(n / (time.perf_counter() - t))
        res["decode_tok_s"] = sorted(rates)[1]
        # raw replay rate without the host loop
        graph = next(iter(dec._graphs.values()))
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dec.pos.fill_(len(prompt))
        a.record()
        for _ in range(100):
            graph.replay()
        b.record()
        b.synchronize()
        res["graph_replay_ms"] = a.elapsed_time(b) / 100
        print(json.dumps(res), flush=True)
        from torch.profiler import ProfilerActivity, profile
        dec.pos.fill_(len(prompt))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p_graph:
            for _ in range(20):
                graph.replay()
            torch.cuda.synchronize()
        tot, cnt = kernel_sum_us(p_graph)
        res["graph_kernels_per_step"] = cnt / 20
        res["graph_kernel_us_per_step"] = tot / 20
        tok = torch.tensor([first], device=dev)
        pos = torch.tensor([len(prompt)], device=dev)
        step(tok, pos)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p_eager:
            for _ in range(3):
                step(tok, pos)
            torch.cuda.synchronize()
        tot, cnt = kernel_sum_us(p_eager)
        res["eager_kernels_per_step"] = cnt / 3
        res["eager_kernel_us_per_step"] = tot / 3
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p_pre:
            _prefill(model, ids, plan.prefill_chunk)
            torch.cuda.synchronize()
        tot, cnt = kernel_sum_us(p_pre)
        res["prefill_kernel_us"] = tot
        res["prefill_kernels"] = cnt
    res["tuned"] = {k: v for k, v in tlin.dump_tuned().items()}
    (out / f"profile_{args.model}.json").write_text(json.dumps(res, indent=1, default=str))
    txt = ["== graph replays (20 steps)", table(p_graph), "== eager fused steps (3)", table(p_eager),
           "== prefill", table(p_pre)]
    (out / f"profile_{args.model}.txt").write_text("\n".join(txt))
    print(json.dumps({k: v for k, v in res.items() if k != "tuned"}, indent=1))
    print("\n".join(txt)[:20000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
