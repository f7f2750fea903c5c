"""``ternary generate MODEL --prompt TEXT``: one generation, streamed to stdout or as one JSON object.

Shares the model-loading and sampling options with ``ternary chat`` (see :func:`add_model_options`
and :func:`add_sampling_options`), so both commands accept the same flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtime.sampling_params import cli_device, cli_int, cli_type

MAX_CLI_CONTEXT = 1_048_576  # the app's limit for a manual context length


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model: .ternary file, .gguf file or Hugging Face folder")
    p.add_argument("--device", default="auto", type=cli_device, help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--ctx", type=cli_int(1, MAX_CLI_CONTEXT, "--ctx"), metavar="N",
                   help="context length in tokens (default: the planner's choice)")
    p.add_argument("--max-vram", metavar="BYTES", help="behave like a GPU with this much memory (e.g. 6GiB)")
    p.add_argument("--backend", default="auto", help="ternary matmul backend (default: fastest for the device)")
    add_kv_cache_option(p)
    add_decode_activations_option(p)


# The names runtime.kv_cache.resolve_kv_dtype accepts (not imported: it imports torch).
KV_CACHE_CHOICES = ("auto", "fp16", "bf16", "fp32", "int8")


def add_kv_cache_option(p: argparse.ArgumentParser) -> None:
    """``--kv-cache``: shared by generate, chat, bench and plan so all four mean the same thing."""
    p.add_argument("--kv-cache", choices=KV_CACHE_CHOICES, default="auto",
                   help="KV cache precision: auto (default) = fp16 on CPU, bf16 on GPU; fp32 doubles the CPU cache for "
                        "no measurable gain; int8 halves the cache (about twice the context fits) at a small accuracy cost")


def add_decode_activations_option(p: argparse.ArgumentParser) -> None:
    """``--decode-activations``: int8 (default) or exact GPU decode mat-vecs (docs/kernels.md)."""
    p.add_argument("--decode-activations", choices=("int8", "exact"), default=None,
                   help="GPU decode mat-vecs: int8 (default) quantises bf16/fp16 activations to int8 per 32 values "
                        "(at least 1.6x faster decode, KL ~7e-4 nats/token on a synthetic 8B); exact keeps them in fp32")


def planner_kv_name(choice: str) -> str:
    """The planner's KV type for a ``--kv-cache`` choice: "auto" counts 2 bytes per value like the
    engine's GPU default (bf16; the planner does not distinguish fp16 from bf16)."""
    return "fp16" if choice == "auto" else choice


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--system", metavar="TEXT", help="system message (chat mode)")
    # ranges: runtime.sampling_params.RULES, the same the app and the engine enforce
    p.add_argument("--max-new-tokens", type=cli_type("max_new_tokens"), default=512, metavar="N",
                   help="answer length limit, 1..262144 (default 512)")
    p.add_argument("--temperature", type=cli_type("temperature"), metavar="T",
                   help="0..2, 0 = greedy (default: the model's)")
    p.add_argument("--top-k", type=cli_type("top_k"), metavar="K", help="0..1000, 0 = off (default: the model's)")
    p.add_argument("--top-p", type=cli_type("top_p"), metavar="P", help="0.01..1, 1 = off (default: the model's)")
    p.add_argument("--min-p", type=cli_type("min_p"), metavar="P", help="0..1, 0 = off (default: the model's)")
    p.add_argument("--repetition-penalty", type=cli_type("repetition_penalty"), metavar="R",
                   help="0.5..2, 1 = off, HF semantics")
    p.add_argument("--presence-penalty", type=cli_type("presence_penalty"), metavar="P",
                   help="-2..2, 0 = off, OpenAI semantics")
    p.add_argument("--frequency-penalty", type=cli_type("frequency_penalty"), metavar="P",
                   help="-2..2, 0 = off, OpenAI semantics")
    p.add_argument("--seed", type=cli_type("seed"), metavar="S",
                   help="random seed, 0..2**64-1 (same seed => same output)")
    p.add_argument("--stop", action="append", default=[], metavar="S", help="stop string (repeatable)")
    think = p.add_mutually_exclusive_group()
    think.add_argument("--think", dest="enable_thinking", action="store_true", default=None,
                       help="enable the thinking channel (models whose template supports it)")
    think.add_argument("--no-think", dest="enable_thinking", action="store_false", help="disable thinking")
    p.add_argument("--reasoning-effort", metavar="LEVEL", help="passed to templates that accept it (Bonsai 2)")


def register(sub: Any) -> None:
    p = sub.add_parser("generate", help="generate text from a prompt",
                       description="Load a model and generate one answer. Streams text to stdout, or prints "
                                   "one JSON object with text and statistics with --json.")
    add_model_options(p)
    p.add_argument("--prompt", required=True, help="the prompt (raw text, or the user message with --chat)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    add_sampling_options(p)
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence (benchmarks)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    from runtime.generation import GenerationSettings
    from runtime.sampling_params import validate_generation_settings

    settings = GenerationSettings(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty, max_new_tokens=args.max_new_tokens, seed=args.seed,
        stop=list(args.stop), enable_thinking=args.enable_thinking, reasoning_effort=args.reasoning_effort,
        ignore_eos=bool(getattr(args, "ignore_eos", False)),
    )
    validate_generation_settings(settings)  # argparse checked each flag; this keeps callers honest
    return settings


def load_engine(args: argparse.Namespace, quiet: bool = False) -> Any:
    from runtime.devices import parse_bytes
    from runtime.engine import Engine

    max_vram = parse_bytes(args.max_vram) if args.max_vram else None
    progress = None
    if not quiet and sys.stderr.isatty():
        def progress(stage: str, fraction: float) -> None:
            sys.stderr.write(f"\rloading: {stage:<24s} {fraction * 100:5.1f}%")
            if fraction >= 1.0:
                sys.stderr.write("\r" + " " * 50 + "\r")
            sys.stderr.flush()
    return Engine.load(args.model, device=args.device, context_length=args.ctx, max_vram_bytes=max_vram,
                       progress=progress, backend=args.backend, kv_dtype=getattr(args, "kv_cache", "auto"),
                       decode_activations=getattr(args, "decode_activations", None))


def run(args: argparse.Namespace) -> int:
    from runtime.generation import DoneEvent, NoticeEvent, TextEvent

    settings = settings_from_args(args)
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        request: Any = messages
    else:
        if args.system:
            raise ValueError("--system needs --chat (a raw prompt has no roles)")
        request = args.prompt
    engine = load_engine(args, quiet=args.json)
    done = None
    channel = "answer"
    for ev in engine.generate(request, settings):
        if isinstance(ev, DoneEvent):
            done = ev
        elif isinstance(ev, NoticeEvent):
            print(f"note: {ev.message}", file=sys.stderr)
        elif isinstance(ev, TextEvent) and not args.json:
            if ev.channel != channel:
                sys.stdout.write("\n[thinking]\n" if ev.channel == "thinking" else "\n[answer]\n")
                channel = ev.channel
            sys.stdout.write(ev.text)
            sys.stdout.flush()
    assert done is not None
    st = done.stats
    if args.json:
        out = {
            "text": done.text,
            "thinking": done.thinking,
            "token_ids": st.token_ids,
            "prompt_tokens": st.prompt_tokens,
            "generated_tokens": st.generated_tokens,
            "ttft_s": st.ttft_s,
            "prefill_tok_s": st.prefill_tok_s,
            "decode_tok_s": st.decode_tok_s,
            "total_s": st.total_s,
            "peak_memory_bytes": st.peak_memory_bytes,
            "device": st.device,
            "context_length": st.context_length,
            "finish_reason": st.finish_reason,
            "backend": engine.info.backend,
            "model": engine.info.name,
            "settings": engine.resolve_settings(settings).to_dict(),
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        print(f"[{st.prompt_tokens} prompt tokens, {st.generated_tokens} generated; ttft {st.ttft_s:.2f} s, "
              f"prefill {st.prefill_tok_s:.1f} tok/s, decode {st.decode_tok_s:.1f} tok/s; "
              f"finish: {st.finish_reason}]", file=sys.stderr)
    engine.close()
    return 0
