"""Accuracy cost of int8 decode activations (W2A8 mat-vecs) against the exact kernels, on the GPU.

Usage (GPU machine, repo root): ``python3 scripts/gpu/activation_accuracy.py [--model bonsai-8b] [--steps 64]``

Method: prefill a 512-token random prompt, then walk the *exact* greedy path for ``--steps`` tokens;
at every position the fused decode step runs first with int8 activations, then with exact ones
(the exact step runs last, so the KV cache always holds the exact trajectory — teacher forcing).
Reports per-position relative L2 error of the logits, KL(exact || int8) of the softmax, top-1
agreement, and the free-running greedy agreement of both modes over the same number of tokens.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.bench import _prefill, build_model, synthetic_model_cached  # noqa: E402
from runtime.generation import GenerationSettings  # noqa: E402
from runtime.gpu_decode import GraphDecoder, fused_qwen3_step  # noqa: E402
from runtime.kernels import triton_linear as tlin  # noqa: E402
from runtime.planner import plan_for_this_machine  # noqa: E402


def greedy(model, step, prompt, ids, chunk, n):
    logits = _prefill(model, ids, chunk)
    dec = GraphDecoder(step, model.vocab_size, ids.device)
    dec.configure(GenerationSettings(temperature=0.0), prompt)
    first = dec.sample_first(logits)
    return [first] + list(dec.tokens(first, len(prompt), n - 1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bonsai-8b")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--cache-dir", default="/dev/shm/ternary-synthetic")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    md = synthetic_model_cached(args.model, 0, args.cache_dir, workers=12)
    plan = plan_for_this_machine(md, device=str(dev), ctx_cap=4096)
    model, _, _ = build_model(md, dev, plan)
    prompt = torch.randint(0, md.config.vocab_size, (512,), generator=torch.Generator().manual_seed(0)).tolist()
    ids = torch.tensor(prompt, device=dev)
    res: dict = {"model": args.model, "dtype": str(model.dtype), "steps": args.steps, "prompt": len(prompt)}
    with torch.inference_mode():
        step = fused_qwen3_step(model)
        assert step is not None
        logits = _prefill(model, ids, plan.prefill_chunk)
        tok = int(torch.argmax(logits))
        errs, kls, agree = [], [], 0
        for i in range(args.steps):
            t = torch.tensor([tok], device=dev)
            p = torch.tensor([len(prompt) + i], device=dev)
            tlin.set_decode_activations("int8")
            a = step(t, p).float().clone()
            tlin.set_decode_activations("exact")
            e = step(t, p).float().clone()
            errs.append(float((a - e).norm() / e.norm()))
            le, la = torch.log_softmax(e, -1), torch.log_softmax(a, -1)
            kls.append(float((le.exp() * (le - la)).sum()))
            agree += int(torch.argmax(a) == torch.argmax(e))
            tok = int(torch.argmax(e))
        res.update({"logits_rel_err_median": statistics.median(errs), "logits_rel_err_max": max(errs),
                    "kl_mean": statistics.mean(kls), "kl_max": max(kls), "top1_agreement": agree / args.steps})
        tlin.set_decode_activations("exact")
        ex = greedy(model, fused_qwen3_step(model), prompt, ids, plan.prefill_chunk, args.steps)
        tlin.set_decode_activations("int8")
        q8 = greedy(model, fused_qwen3_step(model), prompt, ids, plan.prefill_chunk, args.steps)
        same = next((i for i, (x, y) in enumerate(zip(ex, q8, strict=True)) if x != y), len(ex))
        res.update({"free_run_identical_prefix": same, "free_run_same_positions": sum(x == y for x, y in zip(ex, q8, strict=True))})
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
