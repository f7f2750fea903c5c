"""Why are mat-vecs slower inside the engine's decode step than in the kernel bench? (diagnostic)

Times the same mat-vec chains (one token's 145 launches, CUDA-graph replays) with:
the engine's own weights and hidden state, clones of those weights, random codes of the same
shapes, and the shipped vs freshly measured launch configs. Usage: ``python3 scripts/gpu/diag_engine_matvec.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kernels import graph_time_ms  # noqa: E402

from runtime.bench import _prefill, build_model, synthetic_model_cached  # noqa: E402
from runtime.kernels import triton_linear as tlin  # noqa: E402
from runtime.planner import plan_for_this_machine  # noqa: E402


def chain(model, weights, x, act, attn, qkv_out, logits, eps):
    calls = []
    for b, (qc, qs), (oc, os_), (gc, gs), (dc, ds) in weights[:-1]:
        calls += [lambda b=b, qc=qc, qs=qs: tlin.fused_rmsnorm_matvec(x, b.input_norm, eps, qc, qs, 128, out=qkv_out),
                  lambda oc=oc, os_=os_: tlin.ternary_matvec(attn, oc, os_, 128, out=x, residual=x),
                  lambda b=b, gc=gc, gs=gs: tlin.swiglu_matvec(x, gc, gs, 128, norm_weight=b.post_norm, eps=eps, out=act),
                  lambda dc=dc, ds=ds: tlin.ternary_matvec(act, dc, ds, 128, out=x, residual=x)]
    hc, hs = weights[-1]
    calls.append(lambda: tlin.fused_rmsnorm_matvec(x, model.final_norm, eps, hc, hs, 128, out=logits))
    return calls


def main() -> int:
    dev = torch.device("cuda", 0)
    md = synthetic_model_cached("bonsai-8b", 0, "/dev/shm/ternary-synthetic", workers=12)
    plan = plan_for_this_machine(md, device=str(dev), ctx_cap=4096)
    model, _, _ = build_model(md, dev, plan)
    cfg = md.config
    eps = cfg.rms_norm_eps
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (64,), generator=g).to(dev)
    res = {}
    with torch.inference_mode():
        _prefill(model, ids, 512)
        eng = []
        for b in model.layers:
            eng.append((b, (b.qkv.fused.codes, b.qkv.fused.scales), (b.o_proj.codes, b.o_proj.scales),
                        (b.gate_up.fused.codes, b.gate_up.fused.scales), (b.down_proj.codes, b.down_proj.scales)))
        eng.append((model.lm_head.codes, model.lm_head.scales))
        res["ptr_mod_256"] = sorted({int(t.data_ptr()) % 256 for e in eng[:-1] for p in e[1:] for t in p})
        res["codes_stats"] = {"min": int(eng[0][1][0].min()), "max": int(eng[0][1][0].max()),
                              "contig": bool(eng[0][1][0].is_contiguous()), "dtype": str(eng[0][1][0].dtype)}
        res["scales_stats"] = {"absmax": float(eng[0][1][1].abs().max()), "dtype": str(eng[0][1][1].dtype)}
        h = cfg.hidden_size
        xr = model.embed(ids[:1], model.dtype).clone()
        x = xr.clone()
        act = torch.randn(1, cfg.intermediate_size, device=dev, dtype=model.dtype)
        attn = torch.randn(1, cfg.num_heads * cfg.head_dim, device=dev, dtype=model.dtype)
        qkv_out = torch.empty(1, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, device=dev, dtype=model.dtype)
        logits = torch.empty(1, cfg.vocab_size, device=dev, dtype=model.dtype)

        def timed(name, weights):
            x.copy_(xr)
            t = graph_time_ms(chain(model, weights, x, act, attn, qkv_out, logits, eps))
            res[name] = round(t, 3)
            print(name, round(t, 3), "ms", flush=True)

        timed("engine_weights_shipped_cfg", eng)
        clones = [(e[0],) + tuple((c.clone(), s.clone()) for c, s in e[1:]) for e in eng[:-1]]
        clones.append((eng[-1][0].clone(), eng[-1][1].clone()))
        timed("cloned_weights_shipped_cfg", clones)
        del clones
        rnd = [(e[0],) + tuple((torch.randint_like(c, 0, 256), s.clone()) for c, s in e[1:]) for e in eng[:-1]]
        rnd.append((torch.randint_like(eng[-1][0], 0, 256), eng[-1][1].clone()))
        timed("random_codes_shipped_cfg", rnd)
        rs = [(e[0],) + tuple((c, (torch.rand_like(s.float()) * 0.02 + 0.005).half()) for c, s in e[1:]) for e in rnd[:-1]]
        rs.append((rnd[-1][0], (torch.rand_like(rnd[-1][1].float()) * 0.02 + 0.005).half()))
        timed("random_codes_random_scales_shipped_cfg", rs)
        del rnd, rs
        xr.copy_(torch.randn(1, h, device=dev, dtype=model.dtype))
        timed("engine_weights_randn_x_shipped_cfg", eng)
        # freshly measured configs (x3), if passed
        if len(sys.argv) > 1:
            tlin._tuned.clear()
            tlin.load_tuned(sys.argv[1])
            timed("engine_weights_new_cfg", eng)
        # one op in isolation: layer 0 qkv, 16 distinct layers
        t0 = time.time()
        ops = [lambda b=e[0], qc=e[1][0], qs=e[1][1]: tlin.fused_rmsnorm_matvec(x, b.input_norm, eps, qc, qs, 128, out=qkv_out)
               for e in eng[:16]]
        res["qkv_us_engine"] = graph_time_ms(ops) / 16 * 1e3
        print("qkv us", res["qkv_us_engine"], time.time() - t0)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
