"""The 27B hybrid (or any synthetic model, e.g. ``--model bonsai-8b``) through the real engine (what
the app runs), one device call.

Per configuration (``--configs``, e.g. ``full,7GiB,6GiB``: no VRAM cap, or ``max_vram_bytes``;
``gpuemb``: no cap with the embedding table kept on the GPU; ``shipped`` / ``retuned``: no cap, mat-vec launch
configs from the shipped tuned file / measured afresh over the quick candidate set; ``tuned:PATH``: the shipped
configs with those of the tuned file PATH on top (in-step comparisons of launch configs); ``nopdl``: no cap, kernels launched
without programmatic dependent launch; ``gprefill``: no cap, graph-captured prefill
(the default; forced on), ``eprefill``: the same with it forced off; ``env:VAR=VAL/VAR2=VAL``: no cap, with
those environment variables set for that configuration only (e.g. ``env:TERNARY_FUSED_SAMPLING=0``); for side-by-sides
in one process):
``Engine.load`` of the synthetic model at ``--ctx`` (weights generated on the GPU once, then kept in
host memory so the load is the engine's own), one warm-up answer, then ``--runs`` greedy answers to
the same ``--prompt-tokens`` prompt (cache reset before each, so every run prefills) of ``--gen``
tokens. Reports the plan (layers on GPU/CPU, where the embedding lives), warm TTFT, prefill and
decode tok/s (medians), ``torch.cuda.max_memory_allocated`` over load + runs and over the runs only,
the device-level peak (``mem_get_info``), and whether each configuration's tokens equal the first
one's. Usage (device machine, repo root; fla optional):

    TERNARY_FUSED_HYBRID=1 python3 scripts/gpu/engine_27b.py --out $OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

T0 = time.perf_counter()
NO_CAP = ("full", "gpuemb", "nopdl", "gprefill", "eprefill", "shipped", "retuned")  # configurations without a VRAM cap


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def synthetic_on_host(name: str):
    """A synthetic 27B generated on the GPU (fast), then moved to host memory, so that what the
    engine later puts on the GPU is its own doing (``ModelData`` as a loader would return it)."""
    from runtime.formats.model_data import ModelData
    from runtime.model.qwen35.synthetic import qwen35_synthetic_model
    from runtime.synthetic import synthetic_config, synthetic_model

    if synthetic_config(name).arch != "qwen35":  # the dense models: generated on the CPU (seconds)
        return synthetic_model(name, seed=0, group_size=128)
    md = qwen35_synthetic_model(name, seed=0, group_size=128, device="cuda")

    def host(t):  # TernaryTensor (codes/scales) or DenseTensor (data)
        fields = {f: getattr(t, f).to("cpu") for f in ("codes", "scales", "data")
                  if isinstance(getattr(t, f, None), torch.Tensor)}
        return dataclasses.replace(t, **fields)

    md = ModelData(config=md.config, tensors={k: host(v) for k, v in md.tensors.items()},
                   tokenizer=md.tokenizer, generation_defaults=md.generation_defaults, provenance=md.provenance,
                   name=md.name)
    gc.collect()
    torch.cuda.empty_cache()
    return md


def main() -> int:
    from runtime.devices import parse_bytes
    from runtime.engine import CancelToken, Engine
    from runtime.generation import GenerationSettings
    from runtime.kernels.triton import pdl
    from runtime.prefill import graph_prefill_enabled

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/engine27b")
    ap.add_argument("--model", default="bonsai-27b-ptq1")
    ap.add_argument("--configs", default="full,7GiB,6GiB")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--decode-activations", default="int8")
    ap.add_argument("--prefill-chunk", type=int, default=0, help="override the engine's prompt chunk (0: default)")
    ap.add_argument("--write-gguf", default="", help="also write these exact weights as GGUF Q2_0 g64 (for llama-bench), "
                    "in a background thread while the engine runs")
    a = ap.parse_args()
    if a.prefill_chunk:
        import runtime.engine as engine_mod
        engine_mod.PREFILL_CHUNK = a.prefill_chunk
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    md = synthetic_on_host(a.model)
    log("synthetic model generated and moved to host memory")
    writer = None
    if a.write_gguf:
        import threading

        from runtime.formats.gguf_writer import write_gguf

        def write() -> None:
            t = time.perf_counter()
            write_gguf(md, a.write_gguf, "Q2_0")
            log(f"wrote {a.write_gguf} ({Path(a.write_gguf).stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - t:.0f} s")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(1000, md.config.vocab_size - 1000, (a.prompt_tokens,), generator=g).tolist()
    s = GenerationSettings(temperature=0.0, max_new_tokens=a.gen, ignore_eos=True, enable_thinking=False,
                           repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)  # penalties off
    results, ref_tokens = [], None
    for cfg in a.configs.split(","):
        r: dict = {"model": a.model, "config": cfg, "ctx": a.ctx, "prompt_tokens": a.prompt_tokens, "gen": a.gen,
                   "prefill_chunk": a.prefill_chunk or "default"}
        env_set = dict(kv.split("=", 1) for kv in cfg[4:].split("/")) if cfg.startswith("env:") else {}
        env_old = {k: os.environ.get(k) for k in env_set}
        os.environ.update(env_set)
        if env_set:
            r["env"] = env_set
        try:
            torch.cuda.reset_peak_memory_stats()
            free0, total = torch.cuda.mem_get_info()
            t = time.perf_counter()
            import runtime.planner as planner_mod

            plan_fn = planner_mod.plan_for_this_machine
            if cfg == "gpuemb":  # no cap, but the embedding table on the GPU (the pre-host-embedding default)
                planner_mod.plan_for_this_machine = functools.partial(plan_fn, host_embedding=False)
            pdl.set_enabled(False if cfg == "nopdl" else None)
            tuned_extra = cfg.partition(":")[2] if cfg.startswith("tuned:") else ""
            # kernel launch configs: the shipped file's, or measured afresh, or the shipped ones overridden
            if cfg in ("shipped", "retuned") or tuned_extra:
                from runtime.kernels import triton_linear as tlin
                tlin._tuned.clear()
                shipped = tlin._device_tuned_file()
                if tuned_extra:  # first: load_tuned keeps the configs already there
                    tlin.load_tuned(tuned_extra)
                if cfg != "retuned" and shipped is not None:
                    tlin.load_tuned(shipped)
                r["tuned_from"] = str(shipped) if cfg != "retuned" else "measured in this run (quick set)"
                r["tuned_overrides"] = tuned_extra or None
            if cfg in ("gprefill", "eprefill"):
                os.environ["TERNARY_GRAPH_PREFILL"] = "1" if cfg == "gprefill" else "0"
            r["graph_prefill"] = graph_prefill_enabled()  # the engine's own reading (Qwen3 dense models only)
            r["pdl"] = pdl.enabled()
            try:
                eng = Engine.load(md, device="cuda", context_length=a.ctx,
                                  max_vram_bytes=None if cfg in NO_CAP or tuned_extra or env_set else parse_bytes(cfg),
                                  decode_activations=a.decode_activations)
            finally:
                planner_mod.plan_for_this_machine = plan_fn
            r["load_s"] = round(time.perf_counter() - t, 1)
            p = eng.info.plan or {}
            r["plan"] = {k: (len(v) if isinstance(v, list) else v) for k, v in p.items()
                         if not isinstance(v, dict) and k != "reasons"}
            r["load_max_allocated"] = torch.cuda.max_memory_allocated()
            runs = []
            for i in range(a.runs + 1):
                eng.reset()
                done = list(eng.generate_tokens(prompt, s, CancelToken()))[-1]  # token ids, no template
                st = done.stats
                if i:
                    runs.append(st)
                log(f"{cfg} run {i}: decode {st.decode_tok_s:.1f} tok/s, ttft {st.ttft_s * 1000:.0f} ms")
            free1, _ = torch.cuda.mem_get_info()
            r["decode_tok_s"] = round(statistics.median(x.decode_tok_s for x in runs), 1)
            r["decode_tok_s_runs"] = [round(x.decode_tok_s, 1) for x in runs]
            r["ttft_ms"] = round(statistics.median(x.ttft_s for x in runs) * 1000, 1)
            r["ttft_ms_runs"] = [round(x.ttft_s * 1000, 1) for x in runs]
            r["prefill_tok_s"] = round(statistics.median(x.prefill_tok_s for x in runs), 1)
            r["max_allocated"] = torch.cuda.max_memory_allocated()
            r["max_allocated_GB"] = round(r["max_allocated"] / 1e9, 3)
            r["run_peak_allocated"] = max(x.peak_memory_bytes for x in runs)
            r["device_used_after_runs"] = total - free1
            r["device_used_before_load"] = total - free0
            toks = runs[0].token_ids
            r["same_tokens_every_run"] = all(x.token_ids == toks for x in runs)
            if ref_tokens is None:
                ref_tokens = toks
            r["tokens_equal_first_config"] = toks == ref_tokens
            r["first_tokens"] = toks[:8]
            r["tokens"] = toks
            r["graph_decode"] = eng.graph_decode
            eng.close()
            del eng
        except Exception as e:  # the next configuration may still answer
            import traceback
            traceback.print_exc()
            r["error"] = repr(e)[:600]
        pdl.set_enabled(None)
        for k, v in env_old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        gc.collect()
        torch.cuda.empty_cache()
        print(json.dumps(r), flush=True)
        results.append(r)
    (out / "engine_27b.json").write_text(json.dumps(results, indent=1))
    if writer is not None:
        writer.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
