"""``ternary bench``: speed and memory of a model (or a synthetic Bonsai) with references."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtime.cli.generate import MAX_CLI_CONTEXT, add_decode_activations_option, add_kv_cache_option
from runtime.sampling_params import MAX_SEED, cli_device, cli_int


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark prefill/decode speed and memory",
                       description="Benchmark a model: cold start, TTFT, prefill and decode tok/s, peak memory, "
                                   "next to a bf16 eager baseline and the bandwidth roofline measured in the same run.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("model", nargs="?", help="model file or folder")
    src.add_argument("--synthetic", metavar="NAME", help="random ternary weights with exact Bonsai shapes (bonsai-1.7b, -4b, -8b)")
    p.add_argument("--ctx", type=cli_int(1, MAX_CLI_CONTEXT, "--ctx"), default=4096, help="context length (default 4096)")
    p.add_argument("--prompt-tokens", type=cli_int(1, MAX_CLI_CONTEXT, "--prompt-tokens"), default=512,
                   help="prompt length (default 512)")
    p.add_argument("--gen", type=cli_int(2, MAX_CLI_CONTEXT, "--gen"), default=256, help="tokens to generate (default 256)")
    p.add_argument("--runs", type=cli_int(1, 1000, "--runs"), default=3,
                   help="measured runs, median reported (default 3; one warm-up excluded)")
    p.add_argument("--max-vram", metavar="BYTES", help="behave like a card with this much memory (e.g. 2GiB)")
    p.add_argument("--baseline", choices=["bf16", "none"], default="bf16", help="reference to run alongside (default bf16)")
    p.add_argument("--baseline-gen", type=cli_int(1, MAX_CLI_CONTEXT, "--baseline-gen"),
                   help="tokens the bf16 baseline generates (default: --gen)")
    p.add_argument("--device", default="auto", type=cli_device, help="auto, cuda, cuda:N or cpu")
    p.add_argument("--seed", type=cli_int(0, MAX_SEED, "--seed"), default=0,
                   help="seed of the synthetic weights and the prompt")
    p.add_argument("--cache-dir", help="keep generated synthetic weights here (reused by later runs)")
    p.add_argument("--json", metavar="PATH", help="also write the full result as JSON")
    add_kv_cache_option(p)
    add_decode_activations_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtime.atomic import atomic_output
    from runtime.bench import format_result, run_bench, synthetic_model_cached
    from runtime.devices import parse_bytes

    if args.runs < 1 or args.gen < 2 or args.prompt_tokens < 1:
        raise ValueError("--runs must be >= 1, --gen >= 2 and --prompt-tokens >= 1")
    if args.synthetic:
        md = synthetic_model_cached(args.synthetic, args.seed, args.cache_dir)
    else:
        from runtime.cli.plan import load_model_data

        md = load_model_data(args.model)
    res = run_bench(md, device=args.device, ctx=args.ctx, prompt_tokens=args.prompt_tokens, gen=args.gen,
                    runs=args.runs, max_vram=parse_bytes(args.max_vram) if args.max_vram else None,
                    baseline=None if args.baseline == "none" else args.baseline, seed=args.seed,
                    baseline_gen=args.baseline_gen, kv_cache=args.kv_cache,
                    decode_activations=args.decode_activations)
    print(format_result(res))
    if args.json:
        with atomic_output(args.json) as f:
            f.write(json.dumps(res, indent=2).encode())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``ternary bench`` alone (``python -m runtime.cli.bench``), without the other subcommands."""
    parser = argparse.ArgumentParser(prog="ternary")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *(argv if argv is not None else sys.argv[1:])])
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
