"""Accuracy cost of the 8-bit KV cache: next-token log-probs with int8 (and bf16) K/V vs an fp32 cache.

Why: an int8 cache doubles the context that fits, and the user deserves to know what it costs.
One model is built once; only its cache is swapped (``setup_cache``), so every run sees the same
weights and the same tokens. Measured through the engine's own eager/prefill path
(``model.forward``: the cache quantizes on write and dequantizes for SDPA), which is also what
decode runs on the CPU:

- teacher-forced over ``--positions`` tokens (prefilled in chunks, so later chunks read earlier
  tokens back from the cache): mean and max KL(ref || test) per position, max |Δ log p| of the
  reference's top token, max |Δ log p| over the whole vocabulary, top-1 agreement;
- free-running: ``--gen`` greedy tokens after a ``--prompt`` token prompt, decoded one token at a
  time; matching prefix length and position-wise agreement with the reference tokens.

Usage::

    python scripts/kv_int8_accuracy.py --synthetic bonsai-1.7b [--device cpu|cuda] [--json PATH]
    python scripts/kv_int8_accuracy.py --model path/to/model.ternary --text prompt.txt

Synthetic models have random ternary weights; a trained model's keys have outlier channels that
make per-(token, head) absmax quantization coarser, so the synthetic numbers are a lower bound on
the cost, not a prediction for a real checkpoint (run ``--model`` on a real file for that).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.formats.model_data import ModelData  # noqa: E402
from runtime.kv_cache import resolve_kv_dtype  # noqa: E402


def build_model(md: ModelData, device: torch.device, dtype: torch.dtype, max_positions: int) -> Any:
    """The engine's model class for ``md`` with an fp32 cache (swapped later)."""
    from runtime.engine import _model_class

    cls = _model_class(md.config.arch)
    return cls.from_model_data(md, device, dtype=dtype, max_positions=max_positions, kv_dtype=torch.float32)


@torch.inference_mode()
def teacher_forced_logprobs(model: Any, ids: torch.Tensor, chunk: int) -> torch.Tensor:
    """``log_softmax`` of the logits at every position ``[T, V]`` (fp32, on the CPU)."""
    if hasattr(model, "reset_state"):
        model.reset_state()
    out = []
    for s in range(0, ids.numel(), chunk):
        part = ids[s:s + chunk]
        pos = torch.arange(s, s + part.numel(), device=ids.device)
        logits = model.forward(part, pos, kv_len=s + part.numel())
        out.append(torch.log_softmax(logits.float(), dim=-1).cpu())
    return torch.cat(out)


@torch.inference_mode()
def greedy(model: Any, prompt: torch.Tensor, steps: int) -> list[int]:
    """Greedy tokens: one prefill, then one token per forward (the engine's decode shape)."""
    if hasattr(model, "reset_state"):
        model.reset_state()
    n = prompt.numel()
    logits = model.forward(prompt, torch.arange(n, device=prompt.device), kv_len=n, last_only=True)
    toks = [int(torch.argmax(logits[-1]))]
    for i in range(steps - 1):
        pos = n + i
        tok = torch.tensor([toks[-1]], device=prompt.device)
        logits = model.forward(tok, torch.tensor([pos], device=prompt.device), kv_len=pos + 1)
        toks.append(int(torch.argmax(logits[-1])))
    return toks


def compare(ref: torch.Tensor, test: torch.Tensor) -> dict[str, float]:
    """Distances between two ``[T, V]`` log-prob tables (ref = fp32 cache)."""
    kl = (ref.exp() * (ref - test)).sum(-1).clamp_min(0.0)  # KL(ref || test) per position, nats
    top = ref.argmax(-1)  # argmax on both sides: topk may break exact ties (bf16 logits) differently
    top2 = ref.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]  # how far the reference's winner is ahead, nats (0 at a tie)
    flipped = test.argmax(-1) != top
    d_top = (ref.gather(1, top[:, None]) - test.gather(1, top[:, None])).abs()
    return {
        "mean_kl_nats": float(kl.mean()),
        "max_kl_nats": float(kl.max()),
        "max_abs_dlogp_top_token": float(d_top.max()),
        "max_abs_dlogp_any_token": float((ref - test).abs().max()),
        "top1_agreement": float((~flipped).float().mean()),
        # flips happen only at near-ties: the largest reference margin at a flipped position
        "max_ref_margin_at_flip": float(margin[flipped].max()) if bool(flipped.any()) else 0.0,
    }


def agreement(ref: list[int], test: list[int]) -> dict[str, float]:
    prefix = next((i for i, (a, b) in enumerate(zip(ref, test, strict=True)) if a != b), len(ref))
    same = sum(a == b for a, b in zip(ref, test, strict=True))
    return {"greedy_matching_prefix": prefix, "greedy_positionwise_agreement": same / len(ref)}


def measure(md: ModelData, device: torch.device, *, dtype: torch.dtype | None = None, positions: int = 256,
            prompt: int = 32, gen: int = 64, caches: tuple[str, ...] = ("bf16", "int8"), chunk: int = 128,
            seed: int = 0, ids: list[int] | None = None) -> dict[str, Any]:
    """Every number the script prints, as a dict (also used by tests/engine/test_kv_int8.py)."""
    dtype = dtype or (torch.float32 if device.type == "cpu" else torch.bfloat16)
    if ids is None:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, md.config.vocab_size, (positions,), generator=g).tolist()
    ids = ids[:positions]
    if len(ids) < prompt + 1:
        raise ValueError(f"need at least {prompt + 1} tokens, got {len(ids)}")
    max_pos = max(len(ids), prompt + gen)
    model = build_model(md, device, dtype, max_pos)
    tokens = torch.tensor(ids, dtype=torch.long, device=device)
    results: dict[str, Any] = {"positions": len(ids), "prompt_tokens": prompt, "gen": gen,
                               "activation_dtype": str(dtype).replace("torch.", ""), "reference_cache": "fp32"}
    t0 = time.perf_counter()
    ref_lp = teacher_forced_logprobs(model, tokens, chunk)
    ref_toks = greedy(model, tokens[:prompt], gen)
    ent = -(ref_lp.exp() * ref_lp).sum(-1)
    results["reference_mean_entropy_nats"] = float(ent.mean())
    results["uniform_entropy_nats"] = math.log(ref_lp.shape[-1])
    t2 = ref_lp.topk(2, dim=-1).values
    results["reference_median_top1_margin_nats"] = float((t2[:, 0] - t2[:, 1]).median())
    for name in caches:
        model.setup_cache(max_pos, resolve_kv_dtype(name, dtype))
        lp = teacher_forced_logprobs(model, tokens, chunk)
        toks = greedy(model, tokens[:prompt], gen)
        results[name] = {**compare(ref_lp, lp), **agreement(ref_toks, toks),
                         "cache_bytes": int(model.cache.nbytes)}
    model.setup_cache(max_pos, torch.float32)
    results["fp32_cache_bytes"] = int(model.cache.nbytes)
    results["seconds"] = time.perf_counter() - t0
    return results


def format_results(r: dict[str, Any]) -> str:
    lines = [f"{r['positions']} teacher-forced positions, {r['gen']} greedy tokens after a {r['prompt_tokens']}-token "
             f"prompt; activations {r['activation_dtype']}; reference = fp32 KV cache",
             f"reference next-token entropy {r['reference_mean_entropy_nats']:.3f} nats "
             f"(uniform: {r['uniform_entropy_nats']:.3f}); median top-1 margin "
             f"{r['reference_median_top1_margin_nats']:.3f} nats"]
    head = f"{'cache':6s} {'bytes':>12s} {'mean KL':>10s} {'max KL':>10s} {'max|dlogp| top':>15s} " \
           f"{'max|dlogp| any':>15s} {'top-1 agree':>11s} {'margin@flip':>11s} {'greedy prefix':>13s} " \
           f"{'greedy agree':>12s}"
    lines.append(head)
    for name, v in r.items():
        if not isinstance(v, dict):
            continue
        lines.append(f"{name:6s} {v['cache_bytes']:12d} {v['mean_kl_nats']:10.2e} {v['max_kl_nats']:10.2e} "
                     f"{v['max_abs_dlogp_top_token']:15.2e} {v['max_abs_dlogp_any_token']:15.2e} "
                     f"{v['top1_agreement']:11.4f} {v['max_ref_margin_at_flip']:11.2e} "
                     f"{v['greedy_matching_prefix']:>6d}/{r['gen']:<6d} "
                     f"{v['greedy_positionwise_agreement']:12.4f}")
    lines.append(f"fp32   {r['fp32_cache_bytes']:12d}  (reference)   total {r['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--synthetic", metavar="NAME", help="random ternary weights with Bonsai shapes (bonsai-1.7b, ...)")
    src.add_argument("--model", metavar="PATH", help="a real model file or folder")
    p.add_argument("--layers", type=int, help="keep only the first N layers of a synthetic model (faster runs)")
    p.add_argument("--text", metavar="FILE", help="tokenize this text instead of random token ids (needs --model)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="activations (default fp32 on cpu, bf16 on cuda)")
    p.add_argument("--positions", type=int, default=256, help="teacher-forced positions (default 256)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens before greedy decoding (default 32)")
    p.add_argument("--gen", type=int, default=64, help="greedy tokens (default 64)")
    p.add_argument("--chunk", type=int, default=128, help="prefill chunk (default 128)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.synthetic:
        from dataclasses import replace

        from runtime.synthetic import synthetic_config, synthetic_model

        cfg = synthetic_config(args.synthetic)
        if args.layers and cfg.arch != "qwen3":
            raise SystemExit("--layers is only supported for qwen3 synthetic models")
        md = synthetic_model(args.synthetic, seed=args.seed)
        if args.layers:
            md.config = replace(cfg, num_layers=args.layers)
            keep = tuple(f"model.layers.{i}." for i in range(args.layers))
            md.tensors = {k: t for k, t in md.tensors.items() if not k.startswith("model.layers.") or k.startswith(keep)}
    else:
        from runtime.formats.loader import load_model

        md = load_model(args.model)
    ids = None
    if args.text:
        if md.tokenizer is None:
            raise SystemExit("--text needs a model with a tokenizer")
        from runtime.tokenizer import Tokenizer

        ids = Tokenizer(md.tokenizer).encode(Path(args.text).read_text(encoding="utf-8"), add_special_tokens=True)
    dtype = resolve_kv_dtype(args.dtype, torch.float32) if args.dtype else None
    device = torch.device(args.device)
    res = measure(md, device, dtype=dtype, positions=args.positions, prompt=args.prompt, gen=args.gen,
                  chunk=args.chunk, seed=args.seed, ids=ids)
    res.update({"model": md.name + (f" (first {args.layers} layers)" if args.layers else ""), "device": str(device),
                "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    if device.type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(device)
    print(f"model: {res['model']}  device: {res['device']}  torch {res['torch']}  {res['date']}")
    print(format_results(res))
    if args.json:
        from runtime.atomic import atomic_output

        with atomic_output(args.json) as f:
            f.write(json.dumps(res, indent=2).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
