"""Where the 27B hybrid's fused decode step spends its time (diagnostic, one device call).

For each synthetic model named (default ``bonsai-27b-ptq1`` (t3) and ``bonsai-27b`` (t2)): build it
on the GPU (bf16, Triton linears), capture :func:`runtime.gpu_decode_qwen35.fused_qwen35_step` at
position ``--pos`` of a ``--ctx`` cache (the KV contents do not matter for timing), replay it, and
print the step time, the kernels grouped by name (count, total us) and the weight bytes read per
step against the time (effective bandwidth). ``--modes int8,exact`` repeats the t2 model with
exact activations. Usage (device machine, repo root):

    python3 scripts/gpu/diag_step_trace_27b.py --out $OUT
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diag_step_trace import capture, time_graph  # noqa: E402  (the 8B trace's capture and timing)

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def trace(g, path: str) -> list[tuple[str, float, object]]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    p.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    ks = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    return [(e["name"], float(e["dur"]), e.get("args", {}).get("grid")) for e in ks]


def one(name: str, mode: str, ctx: int, pos: int, out: Path) -> dict:
    from runtime.gpu_decode_qwen35 import fused_qwen35_step
    from runtime.kernels import triton_linear as tlin
    from runtime.model.qwen35 import Qwen35Model
    from runtime.model.qwen35_synthetic import qwen35_synthetic_model

    tlin.set_decode_activations(mode)
    dev = torch.device("cuda", 0)
    gc.collect()
    torch.cuda.empty_cache()
    data = qwen35_synthetic_model(name, seed=0, group_size=128, device=dev)
    m = Qwen35Model.from_model_data(data, dev, dtype=torch.bfloat16, max_positions=ctx, backend="auto")
    del data
    gc.collect()
    torch.cuda.empty_cache()
    r: dict = {"model": name, "mode": mode, "ctx": ctx, "pos": pos, "weight_bytes": m.weight_bytes()}
    emb = getattr(m, "embed", None)
    r["embedding_bytes"] = int(sum(t.numel() * t.element_size() for t in emb.buffers())) if emb is not None else None
    step = fused_qwen35_step(m)
    if step is None:
        r["error"] = "no fused step"
        return r
    tok = torch.tensor([1], device=dev)
    p = torch.tensor([pos], device=dev)
    with torch.inference_mode():
        t = time.perf_counter()
        step(tok, p)
        torch.cuda.synchronize()
        r["first_step_s_incl_tuning"] = round(time.perf_counter() - t, 1)
        g = capture(step, tok, p)
        r["step_ms"] = round(time_graph(g), 3)
        ks = trace(g, str(out / f"trace_{name}_{mode}.json"))
    r["tok_s"] = round(1000.0 / r["step_ms"], 1)
    r["n_kernels"] = len(ks)
    r["kernel_sum_ms"] = round(sum(k[1] for k in ks) / 1000, 3)
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for k in ks:
        per[k[0][:60]][0] += 1
        per[k[0][:60]][1] += k[1]
    r["by_kernel"] = sorted(([n, c, round(us, 1)] for n, (c, us) in per.items()), key=lambda x: -x[2])[:20]
    # the launches of one DeltaNet layer + MLP and one attention layer + MLP (first 2 layers... 4)
    r["first_layers"] = [[n[:40], round(d, 1), gr] for n, d, gr in ks[:40]]
    log(f"{name}/{mode}: step {r['step_ms']} ms = {r['tok_s']} tok/s, {len(ks)} kernels")
    del g, step, m
    gc.collect()
    torch.cuda.empty_cache()
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/diag27b")
    ap.add_argument("--models", default="bonsai-27b-ptq1,bonsai-27b")
    ap.add_argument("--modes", default="int8")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--pos", type=int, default=4000)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = []
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            if mode == "exact" and name.endswith("ptq1"):
                continue  # t3 has only the exact kernel
            try:
                r = one(name, mode, a.ctx, a.pos, out)
            except Exception as e:  # keep going: the next model may still answer
                import traceback
                traceback.print_exc()
                r = {"model": name, "mode": mode, "error": repr(e)[:500]}
            print(json.dumps(r), flush=True)
            res.append(r)
    (out / "diag27b.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
