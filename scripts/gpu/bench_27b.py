"""One device call: synthetic bonsai-27b-ptq1 (t3) and bonsai-27b (t2) at 4K context on one GPU.

Per model: synthetic weights generated on the GPU, prepared with the default CUDA path (bf16,
Triton linears, fla when installed), a 3584-token prefill in 512-token chunks (the engine's
default chunk), then decoding up to position ~4090 of the 4096-position cache:

* ``fused_vs_forward_rel_err``: ``||step - forward|| / ||forward||`` of the next-token logits, both
  from the same DeltaNet state (``runtime.gpu_decode_qwen35.snapshot_state``);
* ``greedy_common_prefix``: of 16 greedy tokens, eager forward vs eager fused step (bf16: the two
  round differently, a random-weight model has near-ties, so this is informative, not a pass/fail);
* ``decode_eager_forward_tok_s``: ``Qwen35Model.forward`` one token at a time (synced each step);
* ``decode_graph_tok_s``: the fused step in one CUDA graph (``StatefulGraphDecoder``), greedy;
* ``peak_*_max_allocated``: ``torch.cuda.max_memory_allocated`` after loading (the load peak is
  reported separately), over prefill + checks and over graph decode.

Prints one JSON line per model as it finishes and one for all at the end (also
``$OUT/bench_27b.json``). On a fresh machine most of the time is Triton compiling / tuning the
mat-vec and prefill kernels on first use; if 240 s is tight, run ``--models bonsai-27b-ptq1``
and ``--models bonsai-27b`` as two calls. Device machine, repo root:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl
    PYTHONPATH=/tmp/site:$PWD python3 scripts/gpu/bench_27b.py --out $OUT

``--dry-cpu`` (with ``TRITON_INTERPRET=1``) runs the same code on a tiny config to catch script bugs.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "hybrid"))

T_START = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:6.1f}s] {msg}", file=sys.stderr, flush=True)


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def bench_model(name: str, dev: str, ctx: int, prefill: int, chunk: int, graph_steps: int, n_greedy: int = 16) -> dict:
    import runtime.kernels.triton_linear  # noqa: F401  (the "triton" backend, also under the interpreter)
    from runtime.generation import GenerationSettings
    from runtime.gpu_decode_qwen35 import fused_qwen35_step, graph_decoder_for, snapshot_state
    from runtime.model.qwen35 import Qwen35Model
    from runtime.model.qwen35_synthetic import qwen35_synthetic_model

    cuda = dev == "cuda"
    r: dict = {"ctx": ctx, "prefill_tokens": prefill}
    cfg, group, backend = None, 128, "auto"
    if not cuda:
        from test_hybrid_synthetic import tiny_hybrid_config
        cfg, group, backend = tiny_hybrid_config(), 64, "triton"
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    data = qwen35_synthetic_model(name, seed=0, config=cfg, group_size=group, device=dev)
    sync(dev)
    r["generate_s"] = round(time.perf_counter() - t0, 1)
    r["encoding"] = next(t.encoding for t in data.tensors.values() if hasattr(t, "encoding"))
    log(f"{name}: generated ({r['generate_s']} s)")
    t0 = time.perf_counter()
    m = Qwen35Model.from_model_data(data, dev, dtype=torch.bfloat16 if cuda else torch.float32, max_positions=ctx,
                                    backend=backend)
    del data
    gc.collect()
    sync(dev)
    r["load_s"] = round(time.perf_counter() - t0, 1)
    r["uses_fla"], r["fused_kernels"] = m.uses_fla, m.fused_kernels
    r["linear_backend"] = type(m.layers[0].down_proj).__name__
    r["weight_bytes"], r["kv_bytes"], r["state_bytes"] = m.weight_bytes(), m.cache.nbytes, m.state_bytes()
    if cuda:
        r["load_peak_max_allocated"] = torch.cuda.max_memory_allocated()
        torch.cuda.empty_cache()
        r["resident_after_load"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    log(f"{name}: loaded ({r['load_s']} s)")
    step = fused_qwen35_step(m)
    r["fused_step"] = step is not None
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, m.vocab_size, (prefill,), generator=g).to(dev)
    with torch.no_grad():
        sync(dev)
        t0 = time.perf_counter()
        for s0 in range(0, prefill, chunk):
            e = min(prefill, s0 + chunk)
            logits = m(ids[s0:e], torch.arange(s0, e, device=dev), kv_len=e, last_only=True)
        sync(dev)
        r["prefill_s_incl_first_call_tuning"] = round(time.perf_counter() - t0, 2)
        log(f"{name}: prefilled {prefill} ({r['prefill_s_incl_first_call_tuning']} s)")
        tok0 = int(logits[-1].argmax())
        restore = snapshot_state(m)

        def greedy(fn, n: int) -> tuple[list[int], list[float]]:
            tok, out, times = tok0, [], []
            for i in range(n):
                sync(dev)
                t = time.perf_counter()
                lg = fn(torch.tensor([tok], device=dev), torch.tensor([prefill + i], device=dev))
                tok = int(lg.argmax())
                sync(dev)
                times.append(time.perf_counter() - t)
                out.append(tok)
            return out, times

        def fwd(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
            return m(t, p, kv_len=int(p[0]) + 1)[-1]

        eager_toks, eager_times = greedy(fwd, n_greedy)
        timed = eager_times[n_greedy // 4:]  # the first calls compile / tune kernels
        r["decode_eager_forward_tok_s"] = round(len(timed) / sum(timed), 2)
        log(f"{name}: eager forward {r['decode_eager_forward_tok_s']} tok/s")
        if step is None:
            return r
        restore()
        tok_t, pos_t = torch.tensor([tok0], device=dev), torch.tensor([prefill], device=dev)
        want = fwd(tok_t, pos_t).float()
        restore()
        got = step(tok_t, pos_t)
        r["fused_vs_forward_rel_err"] = float((got - want).norm() / want.norm().clamp_min(1e-30))
        r["fused_vs_forward_same_argmax"] = int(got.argmax()) == int(want.argmax())
        restore()
        fused_toks, fused_times = greedy(step, n_greedy)
        timed = fused_times[n_greedy // 4:]
        r["decode_eager_fused_tok_s"] = round(len(timed) / sum(timed), 2)
        r["greedy_common_prefix"] = next((i for i, (a, b) in enumerate(zip(eager_toks, fused_toks, strict=True))
                                          if a != b), n_greedy)
        log(f"{name}: fused check rel err {r['fused_vs_forward_rel_err']:.3g}, common prefix "
            f"{r['greedy_common_prefix']}/{n_greedy}")
        if cuda:
            r["peak_prefill_checks_max_allocated"] = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        restore()
        dec = graph_decoder_for(m, step, dev)
        dec.configure(GenerationSettings(temperature=0.0, max_new_tokens=graph_steps), [])
        t0 = time.perf_counter()
        first = list(dec.tokens(tok0, prefill, 4))  # captures the graph (warm-up runs keep the state)
        r["graph_capture_s"] = round(time.perf_counter() - t0, 2)
        # the decoder yields the tokens *after* tok0, like greedy() above
        r["graph_first_tokens_equal_fused_eager"] = first == fused_toks[:4]
        t0 = time.perf_counter()
        n = 0
        for _ in dec.tokens(first[-1], prefill + 4, graph_steps):
            n += 1
        dt = time.perf_counter() - t0
        r["decode_graph_tok_s"] = round(n / dt, 2)
        r["graph"] = dec.use_graph
        r["graph_replays"] = dec.graph_replays
        r["graph_fallback"] = dec.fallback_reason
        r["last_position"] = prefill + 4 + graph_steps
        if cuda:
            r["peak_graph_decode_max_allocated"] = torch.cuda.max_memory_allocated()
            r["peak_run_max_allocated"] = max(r["peak_graph_decode_max_allocated"],
                                              r["peak_prefill_checks_max_allocated"])
            r["peak_run_GB"] = round(r["peak_run_max_allocated"] / 1e9, 3)
        log(f"{name}: graph decode {r['decode_graph_tok_s']} tok/s, peak {r.get('peak_run_GB')} GB")
    return r  # the model is freed with this frame (main() calls gc before the next model)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/bench_27b")
    ap.add_argument("--models", default="bonsai-27b-ptq1,bonsai-27b")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prefill", type=int, default=3584)  # 7 chunks of the engine's default 512
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--graph-steps", type=int, default=500)  # decodes positions 3588..4087 of 4096
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--dry-cpu", action="store_true")
    args = ap.parse_args()
    dev = "cpu" if args.dry_cpu else "cuda"
    if args.prefill + 4 + args.graph_steps > args.ctx and not args.dry_cpu:
        ap.error("--prefill + 4 + --graph-steps must fit in --ctx")
    if args.dry_cpu:
        args.ctx, args.prefill, args.chunk, args.graph_steps, args.greedy = 64, 24, 12, 3, 4
    res: dict = {"gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu (dry run)", "torch": torch.__version__}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        try:
            res[name] = bench_model(name, dev, args.ctx, args.prefill, args.chunk, args.graph_steps, args.greedy)
        except Exception as exc:  # report and go on with the next model
            traceback.print_exc()
            res[name] = {"error": f"{type(exc).__name__}: {exc}"}
        gc.collect()
        res["total_s"] = round(time.perf_counter() - T_START, 1)
        (out / "bench_27b.json").write_text(json.dumps(res, indent=1))
        print(json.dumps({name: res[name], "total_s": res["total_s"]}), flush=True)  # survives a later timeout
    print(json.dumps(res))


if __name__ == "__main__":
    main()
