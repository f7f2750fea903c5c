"""Per-kernel durations, in launch order, of one graph-captured decode step (diagnostic).

Usage: ``python3 scripts/gpu/diag_step_trace.py [--per-kernel]`` on the GPU machine. Prints the time
summed per kernel name over one replayed step (each kernel with ``--per-kernel``), and ablations that
replace the attention with a copy to see whether neighbouring kernels slow the mat-vecs down.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.bench import _prefill, build_model, synthetic_model_cached  # noqa: E402
from runtime.gpu_decode import fused_qwen3_step  # noqa: E402
from runtime.kernels import triton_attention as ta  # noqa: E402
from runtime.planner import plan_for_this_machine  # noqa: E402


def capture(step, tok, pos):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step(tok, pos)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(tok, pos)
    return g


def time_graph(g, n=50):
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def trace(g, out):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    p.export_chrome_trace(out)
    ev = json.load(open(out))["traceEvents"]
    ks = [e for e in ev if e.get("cat") == "kernel"]
    ks.sort(key=lambda e: e["ts"])
    return [(e["name"][:40], e["dur"], e.get("args", {}).get("grid"), e["ts"]) for e in ks]


def critical_path(ks):
    """Each kernel's share of the step's wall time: how far its end moves the latest end seen so far
    (with programmatic dependent launch kernels overlap, so summed durations overstate the step)."""
    share: dict[str, list[float]] = {}
    last_end = ks[0][3]
    for name, dur, _, ts in ks:
        end = ts + dur
        share.setdefault(name, []).append(max(0.0, end - last_end))
        last_end = max(last_end, end)
    return share


def main() -> int:
    dev = torch.device("cuda", 0)
    md = synthetic_model_cached("bonsai-8b", 0, "/dev/shm/ternary-synthetic", workers=12)
    plan = plan_for_this_machine(md, device=str(dev), ctx_cap=4096)
    model, _, _ = build_model(md, dev, plan)
    ids = torch.randint(0, md.config.vocab_size, (512,), generator=torch.Generator().manual_seed(0)).to(dev)
    res = {}
    with torch.inference_mode():
        _prefill(model, ids, 512)
        tok = ids[:1].clone()
        pos = torch.tensor([512], device=dev)
        step = fused_qwen3_step(model)
        g = capture(step, tok, pos)
        res["step_ms"] = time_graph(g)
        ks = trace(g, "/tmp/step_trace.json")
        print("kernels", len(ks), "sum us", sum(k[1] for k in ks))
        if "--per-kernel" in sys.argv:
            for i, k in enumerate(ks):
                print(i, k)
        by_name: dict[str, list[float]] = {}
        for name, dur, _, _ in ks:
            by_name.setdefault(name, []).append(dur)
        for name, durs in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {name:40s} n={len(durs):4d} sum={sum(durs):8.1f} us mean={sum(durs) / len(durs):6.2f}")
        res["by_kernel_us"] = {n: round(sum(d), 1) for n, d in by_name.items()}
        share = critical_path(ks)
        print("critical path (end increments), step wall", round(ks[-1][3] + ks[-1][1] - ks[0][3], 1), "us")
        for name, inc in sorted(share.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {name:40s} n={len(inc):4d} sum={sum(inc):8.1f} us mean={sum(inc) / len(inc):6.2f}")
        res["critical_path_us"] = {n: round(sum(d), 1) for n, d in share.items()}
        # one middle layer in launch order: start after the previous kernel's end, duration, end increment
        per_layer = (len(ks) - 4) // 36 if len(ks) > 40 else 0
        if per_layer:
            base = 2 + 10 * per_layer
            prev_end = ks[base - 1][3] + ks[base - 1][1]
            for name, dur, grid, ts in ks[base:base + per_layer + 1]:
                print(f"  L10 {name[:32]:32s} start={ts - prev_end:+6.2f} dur={dur:6.2f} end+={ts + dur - prev_end:6.2f} grid={grid}")
                prev_end = max(prev_end, ts + dur)
        # ablation: attention replaced by a copy of q (same shapes, no KV reads)
        orig = ta.decode_attention
        ta.decode_attention = lambda q, kc, vc, seq_len, sm, **kw: q.clone()
        step2 = fused_qwen3_step(model)
        g2 = capture(step2, tok, pos)
        res["step_no_attention_ms"] = time_graph(g2)
        ks2 = trace(g2, "/tmp/step_trace2.json")
        res["no_attention_gemv_us"] = sum(k[1] for k in ks2 if "gemv" in k[0])
        ta.decode_attention = orig
        res["gemv_us"] = sum(k[1] for k in ks if "gemv" in k[0])
        res["n_kernels"] = len(ks)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
