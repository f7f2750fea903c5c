"""Run the GPU kernel tests, then time every kernel at Bonsai decode shapes on this GPU.

Usage (on the GPU machine, repo root): ``python3 scripts/gpu/bench_kernels.py --out DIR``

Method (why it is honest): device copy bandwidth is measured in the same run and every mat-vec
is compared with (a) bf16 cuBLAS on the dense weight of the same shape and (b) the roofline
``bytes that must be read / copy bandwidth``. Small launches are timed as CUDA-graph replays (no
Python launch cost) over enough *distinct* weight copies that nothing is served from the 60 MB
L2; the headline number is one graph of a whole token's mat-vecs (36 distinct layers + LM head).
Writes ``bench_kernels.json``, ``bench_kernels.md`` and the tuned launch configs to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("TERNARY_KERNELS_RETUNE", "1")  # don't trust shipped configs: measure again
os.environ.setdefault("TERNARY_KERNELS_TUNE", "full")  # ... over every candidate, not the quick set

from runtime.generation import GenerationSettings  # noqa: E402
from runtime.kernels import reference_ops as ref  # noqa: E402
from runtime.kernels.triton import gemm, matvec, tuning  # noqa: E402
from runtime.kernels.triton.attention import decode_attention  # noqa: E402
from runtime.kernels.triton.norm import rmsnorm  # noqa: E402
from runtime.model.config import SYNTHETIC_CONFIGS  # noqa: E402
from runtime.sampling import TokenSampler  # noqa: E402

DEV = "cuda"
REP = 20  # launches per graph for single small ops (one replay of a 1-launch graph costs ~15 us)
BF16 = torch.bfloat16


def packed_bytes(n: int, k: int, g: int = 128) -> int:
    return n * k // 4 + n * (k // g) * 2


def rand_weight(n: int, k: int, g: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    codes = torch.randint(0, 256, (n, k // 4), dtype=torch.uint8, device=DEV)
    scales = (torch.rand(n, k // g, device=DEV) * 0.02 + 0.005).half()
    return codes, scales


def graph_time_ms(calls: list, reps: int = 20) -> float:
    """Median ms of one replay of a CUDA graph holding ``calls`` in order (warmed up eagerly)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth() -> dict:
    """Device bandwidth three ways on 2 GiB buffers: copy in a graph and eagerly (read + write
    counted) and a read-only reduction. The roofline uses the highest (the least flattering)."""
    n = 1 << 30
    a = torch.ones(n, dtype=torch.uint16, device=DEV)
    b = torch.empty_like(a)
    ms_graph = graph_time_ms([lambda a=a, b=b: b.copy_(a)] * 5, reps=20) / 5
    ts = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ms_eager = sorted(ts)[5]
    ai = a.view(torch.int32)
    tot = torch.empty((), dtype=torch.int64, device=DEV)
    ms_read = graph_time_ms([lambda: torch.sum(ai, 0, dtype=torch.int64, out=tot)] * 5, reps=20) / 5
    res = {"copy_graph": 4 * n / (ms_graph * 1e-3) / 1e9, "copy_eager": 4 * n / (ms_eager * 1e-3) / 1e9,
           "read_only": 2 * n / (ms_read * 1e-3) / 1e9}
    res["roofline_GBps"] = max(res.values())
    return res


def run_tests(out: Path) -> dict:
    t0 = time.time()
    log_path = out / "gpu_tests.log"
    with open(log_path, "w") as f:  # written as it runs, so a timeout still leaves the log
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                            "-n", "4", "-rfE", "tests/gpu/test_gpu_kernels.py"], stdout=f, stderr=subprocess.STDOUT)
    log = log_path.read_text()
    tail = [ln for ln in log.strip().splitlines() if ln.strip()][-3:]
    print("\n".join(tail))
    return {"returncode": p.returncode, "summary": tail[-1] if tail else "", "seconds": round(time.time() - t0, 1)}


def bench_shapes(cfg, bw: float) -> list[dict]:
    """Per-op decode (batch 1) timings, fused as the decode step uses them."""
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    qkv_n = (cfg.num_heads + 2 * cfg.num_kv_heads) * hd
    ops = [  # name, N (rows read), K, kind
        ("qkv (rmsnorm fused)", qkv_n, h, "norm"),
        ("o_proj (+residual)", h, cfg.num_heads * hd, "resid"),
        ("gate_up (rmsnorm + SiLU*mul fused)", 2 * inter, h, "swiglu"),
        ("down (+residual)", h, inter, "resid"),
        ("lm_head (final norm fused)", cfg.vocab_size, h, "norm"),
    ]
    rows = []
    for name, n, k, kind in ops:
        nbytes = packed_bytes(n, k)
        copies = max(2, min(16, -(-256_000_000 // nbytes)))
        ws = [rand_weight(n, k) for _ in range(copies)]
        x = torch.randn(1, k, device=DEV, dtype=BF16)
        nw = torch.ones(k, device=DEV, dtype=BF16)
        out_n = n // 2 if kind == "swiglu" else n
        y = torch.empty(1, out_n, device=DEV, dtype=BF16)

        def mk(c, s, kind=kind, x=x, nw=nw, y=y):
            if kind == "norm":
                return lambda: matvec.fused_rmsnorm_matvec(x, nw, 1e-6, c, s, 128, out=y)
            if kind == "swiglu":
                return lambda: matvec.swiglu_matvec(x, c, s, 128, norm_weight=nw, out=y)
            return lambda: matvec.ternary_matvec(x, c, s, 128, out=y, residual=y)

        def mk_plain(c, s, x=x):
            yy = torch.empty(1, c.shape[0], device=DEV, dtype=BF16)
            return lambda: matvec.ternary_matvec(x, c, s, 128, out=yy)

        t_fused = graph_time_ms([mk(c, s) for c, s in ws]) / copies
        t_plain = graph_time_ms([mk_plain(c, s) for c, s in ws]) / copies
        key = "|".join(str(p) for p in ("gemv", 1, out_n if kind == "swiglu" else n, k, 128, "t2", kind in
                                         ("norm", "swiglu"), kind == "swiglu", kind == "resid", BF16))
        cfg_used = tuning._tuned.get(key + "|a8") if matvec.decode_activations() == "int8" else None
        cfg_used = cfg_used or tuning._tuned.get(key)
        del ws
        dense_bytes = n * k * 2
        dcopies = max(2, min(16, -(-256_000_000 // dense_bytes)))
        try:
            dws = [torch.randn(n, k, device=DEV, dtype=BF16) for _ in range(dcopies)]
            t_bf16 = graph_time_ms([lambda w=w, x=x: F.linear(x, w) for w in dws]) / dcopies
            del dws
        except torch.cuda.OutOfMemoryError:
            t_bf16 = float("nan")
        roof_ms = nbytes / bw * 1e3
        rows.append({"op": name, "N": n, "K": k, "bytes": nbytes, "fused_us": t_fused * 1e3,
                     "plain_us": t_plain * 1e3, "bf16_cublas_us": t_bf16 * 1e3, "roofline_us": roof_ms * 1e3,
                     "pct_roofline": 100 * roof_ms / t_fused, "GBps": nbytes / (t_fused * 1e-3) / 1e9,
                     "config": list(cfg_used) if cfg_used else None})
        torch.cuda.empty_cache()
    return rows


def bench_token_chain(cfg, bw: float, with_bf16: bool = True) -> dict:
    """One CUDA graph = every mat-vec of one decode token (distinct weights per layer)."""
    h, inter, hd, L = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.num_layers
    qkv_n = (cfg.num_heads + 2 * cfg.num_kv_heads) * hd
    x = torch.randn(1, h, device=DEV, dtype=BF16)
    nw = torch.ones(h, device=DEV, dtype=BF16)
    qkv = torch.empty(1, qkv_n, device=DEV, dtype=BF16)
    act = torch.empty(1, inter, device=DEV, dtype=BF16)
    attn = torch.randn(1, cfg.num_heads * hd, device=DEV, dtype=BF16)
    logits = torch.empty(1, cfg.vocab_size, device=DEV, dtype=BF16)
    layers = [(rand_weight(qkv_n, h), rand_weight(h, cfg.num_heads * hd), rand_weight(2 * inter, h),
               rand_weight(h, inter)) for _ in range(L)]
    lm = rand_weight(cfg.vocab_size, h)
    calls = []
    for (qc, qs), (oc, os_), (gc, gs), (dc, ds) in layers:
        calls += [lambda qc=qc, qs=qs: matvec.fused_rmsnorm_matvec(x, nw, 1e-6, qc, qs, 128, out=qkv),
                  lambda oc=oc, os_=os_: matvec.ternary_matvec(attn, oc, os_, 128, out=x, residual=x),
                  lambda gc=gc, gs=gs: matvec.swiglu_matvec(x, gc, gs, 128, norm_weight=nw, out=act),
                  lambda dc=dc, ds=ds: matvec.ternary_matvec(act, dc, ds, 128, out=x, residual=x)]
    calls.append(lambda lm=lm: matvec.fused_rmsnorm_matvec(x, nw, 1e-6, lm[0], lm[1], 128, out=logits))
    nbytes = L * (packed_bytes(qkv_n, h) + packed_bytes(h, cfg.num_heads * hd) + packed_bytes(2 * inter, h)
                  + packed_bytes(h, inter)) + packed_bytes(cfg.vocab_size, h)
    t = graph_time_ms(calls)
    del layers, lm, calls
    torch.cuda.empty_cache()
    res = {"kernels": 4 * L + 1, "bytes": nbytes, "ternary_ms": t, "roofline_ms": nbytes / bw * 1e3,
           "pct_roofline": 100 * nbytes / bw * 1e3 / t}
    if with_bf16:
        try:
            dl = [(torch.randn(qkv_n, h, device=DEV, dtype=BF16), torch.randn(h, cfg.num_heads * hd, device=DEV, dtype=BF16),
                   torch.randn(2 * inter, h, device=DEV, dtype=BF16), torch.randn(h, inter, device=DEV, dtype=BF16))
                  for _ in range(L)]
            dlm = torch.randn(cfg.vocab_size, h, device=DEV, dtype=BF16)
            gu = torch.empty(1, 2 * inter, device=DEV, dtype=BF16)
            dcalls = []
            for wq, wo, wg, wd in dl:
                dcalls += [lambda wq=wq: torch.matmul(x, wq.t(), out=qkv), lambda wo=wo: torch.matmul(attn, wo.t(), out=x),
                           lambda wg=wg: torch.matmul(x, wg.t(), out=gu), lambda wd=wd: torch.matmul(act, wd.t(), out=x)]
            dcalls.append(lambda: torch.matmul(x, dlm.t(), out=logits))
            tb = graph_time_ms(dcalls)
            res.update({"bf16_cublas_ms": tb, "speedup_vs_bf16": tb / t})
            del dl, dlm, dcalls
        except torch.cuda.OutOfMemoryError:
            res["bf16_cublas_ms"] = None
    torch.cuda.empty_cache()
    return res


def bench_norm(cfg) -> dict:
    h = cfg.hidden_size
    x = torch.randn(1, h, device=DEV, dtype=BF16)
    r = torch.randn(1, h, device=DEV, dtype=BF16)
    w = torch.ones(h, device=DEV, dtype=BF16)
    y = torch.empty_like(x)
    return {"rmsnorm_us": graph_time_ms([lambda: rmsnorm(x, w, 1e-6, out=y)] * REP) * 1e3 / REP,
            "add_rmsnorm_us": graph_time_ms([lambda: rmsnorm(x, w, 1e-6, residual=r, out=y)] * REP) * 1e3 / REP}


def bench_prefill(cfg) -> list[dict]:
    h, inter = cfg.hidden_size, cfg.intermediate_size
    rows = []
    for name, n, k in [("qkv", (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, h), ("gate_up", 2 * inter, h),
                       ("down", h, inter)]:
        c, s = rand_weight(n, k)
        for m in (64, 512):
            x = torch.randn(m, k, device=DEV, dtype=BF16)
            y = torch.empty(m, n, device=DEV, dtype=BF16)
            r = {"op": name, "M": m, "N": n, "K": k}
            for path in ("mm", "dequant"):
                r[path + "_us"] = graph_time_ms([lambda path=path, x=x, c=c, s=s, y=y: gemm.ternary_matmul(
                    x, c, s, 128, out=y, prefill_path=path)] * 5) * 1e3 / 5
            w = torch.randn(n, k, device=DEV, dtype=BF16)
            r["bf16_cublas_us"] = graph_time_ms([lambda w=w, x=x, y=y: torch.matmul(x, w.t(), out=y)] * 5) * 1e3 / 5
            gemm.ternary_matmul(x, c, s, 128, out=y)  # records the auto choice
            r["tflops_best"] = 2 * m * n * k / (min(r["mm_us"], r["dequant_us"]) * 1e-6) / 1e12
            rows.append(r)
            del w
    return rows


def bench_attention(cfg, bw: float) -> list[dict]:
    rows = []
    hkv, hq, d = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
    for length in (512, 4096, 32768):
        positions = 32768
        kc = torch.randn(hkv, positions, d, device=DEV, dtype=BF16)
        vc = torch.randn_like(kc)
        q = torch.randn(hq, d, device=DEV, dtype=BF16)
        seq = torch.tensor([length], device=DEV, dtype=torch.int32)
        out = torch.empty(hq, d, device=DEV, dtype=BF16)
        t = graph_time_ms([lambda q=q, kc=kc, vc=vc, seq=seq, out=out: decode_attention(
            q, kc, vc, seq, d ** -0.5, out=out)] * REP) * 1e3 / REP
        nbytes = 2 * hkv * length * d * 2
        row = {"len": length, "us": t, "bytes": nbytes, "pct_roofline": 100 * nbytes / bw * 1e6 / t}
        # int8 cache: speed and accuracy cost (vs the bf16 cache) on the same data
        k8, ks = ref.quantize_kv_int8(kc.transpose(0, 1))
        v8, vs = ref.quantize_kv_int8(vc.transpose(0, 1))
        k8, v8 = k8.transpose(0, 1).contiguous(), v8.transpose(0, 1).contiguous()
        ks, vs = ks.t().contiguous(), vs.t().contiguous()
        out8 = torch.empty_like(out)
        row["int8_us"] = graph_time_ms([lambda q=q, k8=k8, v8=v8, ks=ks, vs=vs, seq=seq, out8=out8: decode_attention(
            q, k8, v8, seq, d ** -0.5, k_scale=ks, v_scale=vs, out=out8)] * REP) * 1e3 / REP
        exact = ref.ref_decode_attention(q, kc, vc, length, d ** -0.5)
        row["bf16_rel_err"] = float((out.float() - exact.float()).norm() / exact.float().norm())
        row["int8_rel_err"] = float((out8.float() - exact.float()).norm() / exact.float().norm())
        rows.append(row)
        del kc, vc, k8, v8
    return rows


def bench_sampling(cfg) -> dict:
    """runtime.sampling.TokenSampler's graph-safe step (the decoder's sampler) at the model's vocabulary."""
    v = cfg.vocab_size
    lg = torch.randn(v, device=DEV)
    tok = torch.zeros(1, dtype=torch.int64, device=DEV)
    pos = torch.zeros(1, dtype=torch.int64, device=DEV)
    res = {"argmax_only_us": graph_time_ms([lambda: torch.argmax(lg, out=tok[0])] * REP) * 1e3 / REP}
    for name, s in [("greedy_fused", GenerationSettings(temperature=0.0, repetition_penalty=1.1)),
                    ("t0.7_topk40_topp0.9_minp0.05_rep1.1",
                     GenerationSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1)),
                    ("t1.0_topp0.95_full_sort", GenerationSettings(temperature=1.0, top_p=0.95))]:
        sampler = TokenSampler(v, DEV)
        sampler.configure(s, [], device_generator=True)
        res[name + "_us"] = graph_time_ms([lambda sampler=sampler: sampler.step(lg, tok, pos)] * REP) * 1e3 / REP
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--model", default="bonsai-8b", choices=sorted(SYNTHETIC_CONFIGS))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--no-bf16-chain", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = SYNTHETIC_CONFIGS[args.model]
    import triton
    res: dict = {"gpu": torch.cuda.get_device_name(), "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="minutes"),
                 "torch": torch.__version__, "triton": triton.__version__, "model_shapes": args.model,
                 "command": "python3 scripts/gpu/bench_kernels.py " + " ".join(sys.argv[1:])}
    if not args.skip_tests:
        res["tests"] = run_tests(out)
    bws = copy_bandwidth()
    bw = bws["roofline_GBps"] * 1e9
    res["bandwidth_GBps"] = bws
    res["copy_bandwidth_GBps"] = bws["roofline_GBps"]
    print(f"bandwidth GB/s {bws}")
    stages = [("shapes", lambda: bench_shapes(cfg, bw)), ("token_chain", lambda: bench_token_chain(cfg, bw, not args.no_bf16_chain)),
              ("attention", lambda: bench_attention(cfg, bw)), ("sampling", lambda: bench_sampling(cfg)),
              ("norm", lambda: bench_norm(cfg)),
              ("prefill", lambda: bench_prefill(cfg))]
    for name, fn in stages:
        t0 = time.time()
        try:
            res[name] = fn()
        except Exception as e:  # keep the other measurements; the failure is reported, not hidden
            res[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"[{name}] {time.time() - t0:.1f}s: {json.dumps(res[name], default=str)[:2000]}", flush=True)
        (out / "bench_kernels.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "tuned_configs.json").write_text(json.dumps(tuning.dump_tuned(), indent=1, default=str))
    md = [f"GPU {res['gpu']}, {res['date']}, torch {res['torch']}, triton {res['triton']}, shapes {args.model}",
          "bandwidth GB/s: " + ", ".join(f"{k} {v:.0f}" for k, v in res["bandwidth_GBps"].items()), ""]
    if isinstance(res.get("shapes"), list):
        md += ["| op | N×K | MB | fused µs | plain µs | bf16 cuBLAS µs | roofline µs | % roofline | config |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in res["shapes"]:
            md.append(f"| {r['op']} | {r['N']}×{r['K']} | {r['bytes'] / 1e6:.1f} | {r['fused_us']:.1f} | {r['plain_us']:.1f} | "
                      f"{r['bf16_cublas_us']:.1f} | {r['roofline_us']:.1f} | {r['pct_roofline']:.0f}% | {r['config']} |")
    ch = res.get("token_chain")
    if isinstance(ch, dict) and "ternary_ms" in ch:
        md += ["", f"one token's mat-vecs ({ch['kernels']} launches, {ch['bytes'] / 1e9:.3f} GB): "
               f"{ch['ternary_ms']:.3f} ms = {ch['pct_roofline']:.0f}% of roofline {ch['roofline_ms']:.3f} ms; "
               f"bf16 cuBLAS {ch.get('bf16_cublas_ms')} ms (speedup {ch.get('speedup_vs_bf16')})"]
    (out / "bench_kernels.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if res.get("tests", {}).get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
