"""Batched decode mat-vecs: every launch config of each variant at 1..16 rows, at one model's decode shapes.

Usage (GPU machine, repo root): ``python3 scripts/gpu/bench_batched_matvec.py --model bonsai-8b --out OUT.json``

Why: continuous batching runs each layer's mat-vecs on all running rows at once. The int8 ``dp4a`` variants
decode every weight once per row, the tensor-core ``dot``/``q8t``/``q8w`` variants and the batched int8 ``q8m`` once
per program for all rows, so which is faster depends on the rows; this times them side by side on one GPU. Each
config is timed by the tuner's own ``_bench`` (CUDA graphs, cold L2, median of 5). Also checked: every timed
``dot``, ``q8m``, ``q8t`` and ``q8w`` config's output against the fp32 reference (largest relative error printed). One
JSON line per (shape, rows) on stdout; the list to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.formats.codecs import pack_t2  # noqa: E402
from runtime.kernels import reference_ops as ref  # noqa: E402
from runtime.kernels.triton import matvec, tuning  # noqa: E402
from runtime.model.config import SYNTHETIC_CONFIGS  # noqa: E402


def weight(n: int, k: int, g: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    codes = pack_t2(torch.randint(0, 3, (n, k), dtype=torch.uint8, generator=gen))
    scales = (torch.rand(n, k // g, generator=gen) * 0.02 + 0.01).to(torch.float16)
    return codes.cuda(), scales.cuda()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-8b")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--full", action="store_true", help="every q8m candidate (default: the quick set)")
    ap.add_argument("--skip", default="", help="variants not to time, e.g. q8t,dot")
    ap.add_argument("--only", default="", help="the variants to time, e.g. q8p,q8m,q8w,dotp (default: all)")
    a = ap.parse_args()
    cfg = SYNTHETIC_CONFIGS[a.model]
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    g = 128
    qkv_n = (cfg.num_heads + 2 * cfg.num_kv_heads) * hd
    shapes = [("qkv+norm", qkv_n, h, "norm"), ("o+residual", h, cfg.num_heads * hd, "residual"),
              ("gate_up+norm+silu", inter, h, "dual"), ("down+residual", h, inter, "residual"),
              ("head+norm", cfg.vocab_size, h, "norm")]
    old = [c for c in tuning._QUICK_Q8 + tuning._QUICK_GEMV if c[0] != "dot"]
    dots = tuning._DOT_CANDIDATES
    q8m = tuning._Q8M_CANDIDATES if a.full else tuning._QUICK_Q8M
    q8t = tuning._Q8T_CANDIDATES
    q8w = tuning._Q8W_CANDIDATES
    skip, only = set(filter(None, a.skip.split(","))), set(filter(None, a.only.split(",")))
    old, dots, q8m, q8t, q8w = ([c for c in cs if c[0] not in skip and (not only or c[0] in only)]
                                for cs in (old, dots, q8m, q8t, q8w))
    results = []
    step = {}
    for name, n, k, kind in shapes:
        codes, scales = weight(n, k, g, 1)
        up = weight(n, k, g, 2) if kind == "dual" else (None, None)
        nw = (torch.rand(k, device="cuda") * 0.2 + 0.9).to(torch.bfloat16)
        for m in (int(r) for r in a.rows.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            resid = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) if kind == "residual" else None
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

            def call(c, y=y, x=x, codes=codes, scales=scales, up=up, nw=nw, kind=kind, resid=resid):
                if kind == "norm":
                    matvec.fused_rmsnorm_matvec(x, nw, 1e-6, codes, scales, g, out=y, config=c)
                elif kind == "dual":
                    matvec.swiglu_matvec(x, codes, scales, g, up_codes=up[0], up_scales=up[1], norm_weight=nw,
                                         out=y, config=c)
                else:
                    matvec.ternary_matvec(x, codes, scales, g, out=y, residual=resid, config=c)

            if kind == "norm":
                expect = ref.ref_fused_rmsnorm_matvec(x.float(), nw.float(), 1e-6, codes, scales, g)
            elif kind == "dual":
                expect = ref.ref_swiglu_matvec(x.float(), codes, scales, up[0], up[1], g, norm_weight=nw.float())
            else:
                expect = ref.ref_ternary_matmul(x.float(), codes, scales, g, residual=resid.float())
            times = {}
            errs = {}
            for c in old + dots + (q8m + q8t if m > 1 else []) + (q8w if 1 < m <= matvec.Q8W_MAX_ROWS else []):
                if str(c[0]).startswith("dot") and c[3] > k // g:
                    continue
                try:
                    times[str(c)] = tuning._bench(lambda c=c: call(c))
                except Exception as exc:  # a config the compiler rejects
                    print(f"  {name} m={m} {c}: {type(exc).__name__}", file=sys.stderr)
                    continue
                if c[0] in ("dot", "dotp", "q8m", "q8t", "q8w"):
                    call(c)
                    errs[str(c)] = float((y.float() - expect).norm() / expect.norm())
            best_old = min((v, c) for c, v in times.items() if not c.startswith(("('dot", "('q8m'", "('q8t'", "('q8w'")))
            best_dot = min((v, c) for c, v in times.items() if c.startswith("('dot"))
            best_q8m = min(((v, c) for c, v in times.items() if c.startswith("('q8m'")), default=(float("nan"), None))
            best_q8t = min(((v, c) for c, v in times.items() if c.startswith("('q8t'")), default=(float("nan"), None))
            best_q8w = min(((v, c) for c, v in times.items() if c.startswith("('q8w'")), default=(float("nan"), None))
            best_all = min(times.values())
            row = {"shape": name, "n": n, "k": k, "rows": m, "best_int8_or_exact_ms": best_old[0],
                   "best_int8_or_exact": best_old[1], "best_dot_ms": best_dot[0], "best_dot": best_dot[1],
                   "best_q8m_ms": best_q8m[0], "best_q8m": best_q8m[1], "best_q8t_ms": best_q8t[0],
                   "best_q8t": best_q8t[1], "best_q8w_ms": best_q8w[0], "best_q8w": best_q8w[1], "best_ms": best_all,
                   "rel_err_max": max(errs.values()), "all_ms": times}
            step.setdefault(m, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            step[m][0] += best_old[0]
            step[m][1] += best_dot[0]
            step[m][2] += min(best_old[0], best_dot[0])
            step[m][3] += best_q8m[0] if m > 1 else best_old[0]
            step[m][4] += best_all
            step[m][5] += best_q8w[0] if m > 1 else best_old[0]
            results.append(row)
            print(json.dumps({kk: v for kk, v in row.items() if kk != "all_ms"}), flush=True)
    layers = cfg.num_layers
    for m, (o, d, b, q, e, w) in sorted(step.items()):
        # per-layer shapes x layers + head once (the head is the last shape)
        print(f"rows={m}: one of each shape: int8/exact best {o:.4f} ms, dot best {d:.4f} ms, min of the two "
              f"{b:.4f} ms, batched int8 (q8m) best {q:.4f} ms, register-fed MMA (q8w) best {w:.4f} ms, fastest of all "
              f"{e:.4f} ms "
              f"(x{layers} layers, roughly)", flush=True)
    if a.out:
        a.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "model": a.model, "rows": results},
                                    indent=1))


if __name__ == "__main__":
    main()
