#!/usr/bin/env python3
"""CPU speed, side by side in one run: our engine vs llama.cpp (llama-cpp-python) on the same weights.

What it measures (defaults): a synthetic model with the exact Ternary-Bonsai-1.7B shapes and random
ternary weights (``runtime.synthetic``, seed 0), a 128-token prompt fed as token ids, 64 greedy
decode tokens, one excluded warm-up run, median of 3 runs, 2 threads everywhere:

* ``ours``: ``Engine.load(<model>.ternary, device="cpu")`` -- the real load path (memory-mapped
  file, weights prepared for the default CPU backend), greedy generation through ``Engine.generate``.
  ``ours:avx2`` / ``ours:avx2:exact`` force a kernel family / activation mode for that entry
  (``TERNARY_CPU_ISA`` / ``TERNARY_CPU_ACTIVATIONS`` in its process); ``--isa`` / ``--activations``
  set them for a plain ``ours``;
* ``llama:TQ2_0`` and ``llama:Q2_0`` (g64): the same weights written as GGUF, run by the .venv's
  llama-cpp-python; ``llama-avx2:TQ2_0``: the same with the AVX2-only build made by
  ``scripts/build_llama_avx2.sh`` (``--llama-path``), for the "AVX2 against AVX2" comparison.

``--shape 1.7b,8b`` runs each shape (the Ternary-Bonsai-1.7B / 8B = Qwen3-1.7B / 8B shapes; 8B has an
untied LM head). Model files are written once into ``--workdir`` and reused by later runs.
``--hog N`` runs N busy-loop processes (each in a session of its own, like another program) while
each engine runs: what a busy desktop does to the thread pool's barriers.

TQ2_0 has one fp16 scale per 256 weights while Bonsai has one per 128, so the benchmark model ties
each pair of adjacent g128 scales (``--tie-scales``, default on): then the very same weights are
exact in our g128 layout, in Q2_0 g64 and in TQ2_0, and every engine computes the same model. Speed
does not depend on the scale values.

Each engine runs in its own process, so the peak RSS it reports (VmHWM) is its own; each row also
has its resident memory after import / load / the warm-up run / the timed runs, split into anonymous
memory and file pages (memory-mapped weights), so a second copy of the weights shows up as anonymous
memory. Every row records the CPU model, its vector flags, the load average before and after, the
backend the engine reported, the thread count and the date (``--json OUT`` writes them all).

    .venv/bin/python scripts/bench_cpu.py                # 1.7B: ours, llama.cpp TQ2_0 and Q2_0
    .venv/bin/python scripts/bench_cpu.py --only ours,llama:TQ2_0 --shape 1.7b,8b --json /tmp/cpu.json
    .venv/bin/python scripts/bench_cpu.py --only ours:avx2,llama-avx2:TQ2_0    # AVX2 vs AVX2
    .venv/bin/python scripts/bench_cpu.py --only ours,llama:TQ2_0 --hog 1      # one background hog
    .venv/bin/python scripts/bench_cpu.py --linear cpu_ternary,cpu_int4        # matmuls only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LLAMA_KINDS = ("llama", "llama-avx2")
GGUF_TYPES = ("TQ2_0", "Q2_0")
SYSTEMS = ("ours", "llama:TQ2_0", "llama:Q2_0", "llama-avx2:TQ2_0", "llama-avx2:Q2_0")
ISAS = ("avx512", "avx2", "neon", "c")
ACTIVATIONS = ("int8", "exact")
SHAPES = {"1.7b": "bonsai-1.7b", "4b": "bonsai-4b", "8b": "bonsai-8b"}
# the CPU features that decide which kernels can run (as /proc/cpuinfo spells them)
RELEVANT_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                  "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve")
DEFAULT_LLAMA_PATH = REPO / "build" / "llama-cpp-avx2"


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The :data:`RELEVANT_FLAGS` this CPU has."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    have = set(line.split(":", 1)[1].split())
                    return [f for f in RELEVANT_FLAGS if f in have]
    except OSError:
        pass
    return []


def _prompt_ids(n: int, seed: int) -> list[int]:
    """``n`` printable ASCII byte tokens (the synthetic tokenizer maps byte b to id b)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(97, 123) for _ in range(n)]  # 'a'..'z'


def parse_system(spec: str) -> dict:
    """``ours[:isa[:activations]]`` or ``llama[-avx2]:TYPE`` -> its parts; ValueError for anything else."""
    parts = spec.split(":")
    if parts[0] == "ours":
        if len(parts) > 3:
            raise ValueError(f"{spec!r}: use ours, ours:ISA or ours:ISA:ACTIVATIONS")
        isa = parts[1] if len(parts) > 1 and parts[1] else None
        act = parts[2] if len(parts) > 2 and parts[2] else None
        if isa is not None and isa not in ISAS:
            raise ValueError(f"{spec!r}: ISA must be one of {', '.join(ISAS)}")
        if act is not None and act not in ACTIVATIONS:
            raise ValueError(f"{spec!r}: activations must be one of {', '.join(ACTIVATIONS)}")
        return {"kind": "ours", "isa": isa, "activations": act, "file": "ours"}
    if parts[0] in LLAMA_KINDS and len(parts) == 2 and parts[1] in GGUF_TYPES:
        return {"kind": parts[0], "gguf": parts[1], "file": f"llama:{parts[1]}"}
    raise ValueError(f"unknown engine {spec!r}; choose from ours[:ISA[:ACTIVATIONS]], "
                     f"{', '.join(s for s in SYSTEMS if s != 'ours')}")


def prepare_files(args: argparse.Namespace) -> dict[str, Path]:
    """Write (or reuse) the benchmark model ``args.model`` as .ternary and as each GGUF type needed."""

    from runtime.formats.gguf_writer import write_gguf
    from runtime.formats.model_data import TernaryTensor
    from runtime.formats.ternary_file import write_model
    from runtime.synthetic import synthetic_model

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    stem = f"{args.model}-seed{args.seed}{'-tied256' if args.tie_scales else ''}"
    files = {"ours": work / f"{stem}.ternary", "llama:TQ2_0": work / f"{stem}-TQ2_0.gguf",
             "llama:Q2_0": work / f"{stem}-Q2_0.gguf"}
    wanted = sorted({parse_system(s)["file"] for s in args.systems} - {k for k, p in files.items() if p.exists()})
    if not wanted:
        return files
    t0 = time.perf_counter()
    model = synthetic_model(args.model, seed=args.seed)
    if args.tie_scales:
        for t in model.tensors.values():
            if isinstance(t, TernaryTensor) and t.scales.shape[1] % 2 == 0:
                t.scales[:, 1::2] = t.scales[:, 0::2]
    print(f"# generated synthetic {args.model} in {time.perf_counter() - t0:.1f} s", flush=True)
    for kind in wanted:
        t0 = time.perf_counter()
        if kind == "ours":
            write_model(model, files[kind])
        else:  # written beside, then renamed: an interrupted run leaves no truncated file to reuse
            tmp = files[kind].with_name(files[kind].name + ".tmp")
            write_gguf(model, tmp, kind.split(":", 1)[1])
            os.replace(tmp, files[kind])
        print(f"# wrote {files[kind]} ({files[kind].stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    del model
    return files


# ------------------------------------------------------------------------------------------ workers


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM; ru_maxrss would include the parent's peak on Linux)."""
    mem = memory_now()
    if mem:
        return mem["peak"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_now() -> dict[str, int]:
    """Resident bytes now (``rss``), its anonymous part (``anon``: heap, torch tensors, copies) and
    file part (``file``: memory-mapped weights, shared libraries), and the peak so far (``peak``).
    Empty where /proc is missing."""
    keys = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file", "VmHWM:": "peak"}
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                name = line.split(None, 1)[0] if line.strip() else ""
                if name in keys:
                    out[keys[name]] = int(line.split()[1]) * 1024
    except OSError:
        return {}
    return out


def worker_ours(path: Path, args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from runtime.engine import Engine
    from runtime.generation import GenerationSettings

    stages = {"imported": memory_now()}
    t0 = time.perf_counter()
    kv = None if args.kv == "auto" else args.kv
    eng = Engine.load(path, device="cpu", context_length=args.ctx, kv_dtype=kv)
    load_s = time.perf_counter() - t0
    stages["loaded"] = memory_now()
    prompt = "".join(chr(i) for i in _prompt_ids(args.prompt_tokens, args.seed))
    settings = GenerationSettings(temperature=0.0, max_new_tokens=args.decode_tokens, seed=args.seed)
    settings.ignore_eos = True
    runs = []
    for i in range(args.runs + 1):
        eng.reset()  # no prompt-prefix reuse: every run prefills all tokens
        done = None
        for ev in eng.generate(prompt, settings):
            done = ev
        st = done.stats
        if st.prompt_tokens != args.prompt_tokens or st.generated_tokens != args.decode_tokens:
            raise RuntimeError(f"expected {args.prompt_tokens}+{args.decode_tokens} tokens, got "
                               f"{st.prompt_tokens}+{st.generated_tokens}")
        runs.append({"prefill_tok_s": st.prefill_tok_s, "decode_tok_s": st.decode_tok_s, "ttft_s": st.ttft_s,
                     "tokens": list(st.token_ids)})
        if i == 0:
            stages["warm"] = memory_now()
    stages["done"] = memory_now()
    cache = eng.model.cache
    return {"load_s": load_s, "runs": runs[1:], "backend": eng.info.backend,
            "weight_bytes": eng.info.weight_bytes, "peak_rss": _peak_rss(), "memory": stages,
            "kv_cache_bytes": cache.nbytes, "kv_dtype": str(cache.dtype).replace("torch.", ""),
            "context": eng.model.max_positions, "threads": torch.get_num_threads(),
            "env": {k: os.environ.get(k) for k in ("TERNARY_CPU_ISA", "TERNARY_CPU_ACTIVATIONS")}}


def worker_llama(path: Path, args: argparse.Namespace, decode_tokens: int, runs_n: int,
                 llama_path: str | None = None) -> dict:
    if llama_path:  # the AVX2-only build, ahead of the .venv's own
        sys.path.insert(0, llama_path)
    import llama_cpp
    import numpy as np

    where = Path(llama_cpp.__file__).resolve()
    if llama_path and not where.is_relative_to(Path(llama_path).resolve()):
        raise RuntimeError(f"llama_cpp was imported from {where}, not from {llama_path}")
    system_info = llama_cpp.llama_print_system_info()
    system_info = system_info.decode() if isinstance(system_info, bytes) else str(system_info)
    stages = {"imported": memory_now()}
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=args.ctx, n_batch=max(512, args.prompt_tokens),
                          n_threads=args.threads, n_threads_batch=args.threads, logits_all=False,
                          verbose=False, seed=args.seed)
    load_s = time.perf_counter() - t0
    stages["loaded"] = memory_now()
    ids = _prompt_ids(args.prompt_tokens, args.seed)
    n_vocab = llm.n_vocab()

    def last_argmax() -> int:
        # the last evaluated token's logits from the context itself: with logits_all=False, llama-cpp-python
        # 0.3.x no longer copies them into llm.scores (that row stays zero: argmax 0 for every step)
        return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))))

    runs = []
    for i in range(runs_n + 1):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        tok = last_argmax()
        t1 = time.perf_counter()
        out = [tok]
        for _ in range(decode_tokens - 1):
            llm.eval([tok])
            tok = last_argmax()
            out.append(tok)
        t2 = time.perf_counter()
        runs.append({"prefill_tok_s": args.prompt_tokens / (t1 - t0),
                     "decode_tok_s": (decode_tokens - 1) / (t2 - t1) if decode_tokens > 1 else 0.0,
                     "ttft_s": t1 - t0, "tokens": out})
        if i == 0:
            stages["warm"] = memory_now()
    stages["done"] = memory_now()
    build = "AVX2-only build" if llama_path else "default build"
    return {"load_s": load_s, "runs": runs[1:], "backend": f"llama-cpp-python {llama_cpp.__version__} ({build})",
            "llama_system_info": system_info.strip(), "llama_module": str(where.parent),
            "weight_bytes": path.stat().st_size, "peak_rss": _peak_rss(), "memory": stages,
            "kv_dtype": "f16", "context": args.ctx, "threads": args.threads}


def _raise_priority() -> str:
    """Best effort: top scheduling priority for this process's autogroup and threads (needs root or
    CAP_SYS_NICE). On a machine shared with other work this keeps their load out of the timings."""
    done = []
    try:
        if os.getsid(0) != os.getpid():
            raise OSError("not a session leader: the autogroup is shared with the caller")
        with open("/proc/self/autogroup", "w", encoding="ascii") as f:
            f.write("-20")
        done.append("autogroup nice -20")
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        done.append("nice -20")
    except OSError:
        pass
    return ", ".join(done) or "not raised (no permission)"


def run_worker(args: argparse.Namespace) -> int:
    spec, path = parse_system(args.worker), Path(args.file)
    priority = _raise_priority() if args.priority else "normal"
    if spec["kind"] == "ours":
        res = worker_ours(path, args)
    else:
        llama_path = args.llama_path if spec["kind"] == "llama-avx2" else None
        if spec["gguf"] == "Q2_0":
            res = worker_llama(path, args, args.q2_decode_tokens, args.q2_runs, llama_path)
        else:
            res = worker_llama(path, args, args.decode_tokens, args.runs, llama_path)
    res["priority"] = priority
    print("RESULT " + json.dumps(res), flush=True)
    return 0


# ------------------------------------------------------------------------------------------ linear only


def _linear_forward(layers: list, head, xs: dict, hidden: int) -> None:
    for layer in layers:
        for w in layer.values():
            w(xs[w.in_features])
    head(xs[hidden][-1:])  # prefill computes the LM head for the last token only


def bench_linear(args: argparse.Namespace) -> int:
    """Per-token matmul cost of the model's shapes per backend (distinct weights per layer, so the
    caches see real memory traffic): the ceiling the engine can reach."""
    import torch

    from runtime.kernels.linear import prepare_linear
    from runtime.synthetic import synthetic_config

    torch.set_num_threads(args.threads)
    cfg = synthetic_config(args.model)
    h, hd, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    shapes = {"q": (cfg.num_heads * hd, h), "k": (cfg.num_kv_heads * hd, h), "v": (cfg.num_kv_heads * hd, h),
              "o": (h, cfg.num_heads * hd), "gate": (f, h), "up": (f, h), "down": (h, f)}
    from runtime.synthetic import random_ternary

    for backend in args.linear.split(","):
        layers = [{k: prepare_linear(random_ternary(f"{i}.{k}", s, args.seed), "cpu", backend)
                   for k, s in shapes.items()} for i in range(cfg.num_layers)]
        head = prepare_linear(random_ternary("lm_head", (cfg.vocab_size, h), args.seed), "cpu", backend)
        resident = sum(w.nbytes for layer in layers for w in layer.values()) + head.nbytes
        for m, reps in ((1, 5), (args.prompt_tokens, 2)):
            xs = {k: torch.randn(m, k) for k in {s[1] for s in shapes.values()}}

            _linear_forward(layers, head, xs, h)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                _linear_forward(layers, head, xs, h)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            print(f"{backend}: {m} token(s) x {cfg.num_layers} layers + LM head: {med * 1e3:.1f} ms "
                  f"-> {m / med:.1f} tok/s (threads {args.threads}, resident weights {resident / 1e6:.0f} MB, "
                  f"load avg {os.getloadavg()[0]:.1f})", flush=True)
        del layers, head
    return 0


# ------------------------------------------------------------------------------------------ driver


def _summary(res: dict) -> dict:
    return {k: statistics.median(r[k] for r in res["runs"]) for k in ("prefill_tok_s", "decode_tok_s", "ttft_s")}


# A hog raises its own priority like the engines do under --priority: it competes with the engine as
# an equal, while the machine's other work is kept out of both.
_HOG_CODE = """
import os, sys
if sys.argv[1] == "1":
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as f:
            f.write("-20")
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
    except OSError:
        pass
while True:
    pass
"""


class Hogs:
    """``n`` busy-loop processes, each in a session (scheduler autogroup) of its own like a separate
    program, for as long as the ``with`` block runs; stopped by their own ids afterwards. With
    ``priority`` they take the same top priority as the engines (see ``--priority``)."""

    def __init__(self, n: int, priority: bool = False) -> None:
        self.n, self.priority = n, priority
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Hogs:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", _HOG_CODE, "1" if self.priority else "0"],
                                               start_new_session=True, stdin=subprocess.DEVNULL))
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def _label(system: str, res: dict) -> str:
    if system.startswith("ours"):
        return f"ours (`{res['backend']}`, KV {res['kv_dtype']})"
    kind, gguf = system.split(":")
    name = {"TQ2_0": "TQ2_0", "Q2_0": "Q2_0 g64"}[gguf]
    return f"llama.cpp {name}" + (" (AVX2-only build)" if kind == "llama-avx2" else "")


def run_engine(system: str, path: Path, args: argparse.Namespace, passthrough: list[str]) -> dict | None:
    """One engine in its own process (with ``args.hog`` hogs running): its result row, or None."""
    spec = parse_system(system)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    isa, act = None, None
    if spec["kind"] == "ours":
        isa, act = spec["isa"] or args.isa, spec["activations"] or args.activations
        for name, value in (("TERNARY_CPU_ISA", isa), ("TERNARY_CPU_ACTIVATIONS", act)):
            if value:
                env[name] = value
            else:
                env.pop(name, None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", system, "--file", str(path), *passthrough]
    if args.priority:
        cmd.append("--priority")
    load_before = os.getloadavg()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    with Hogs(args.hog, args.priority):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              start_new_session=True)  # own session -> own scheduler autogroup
    load_after = os.getloadavg()
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        print(f"# {args.shape_name} {system}: FAILED (exit {proc.returncode})\n{proc.stderr[-2000:]}", flush=True)
        return None
    res = json.loads(line[len("RESULT "):])
    res.update(engine=system, label=_label(system, res), shape=args.shape_name, model=args.model, date=when,
               cpu_model=args.cpu_model, cpu_flags=args.cpu_flags, logical_cpus=os.cpu_count(), hogs=args.hog,
               isa_requested=isa, activations_requested=act, load_avg_before=list(load_before),
               load_avg_after=list(load_after), prompt_tokens=args.prompt_tokens,
               decode_tokens=args.q2_decode_tokens if spec.get("gguf") == "Q2_0" else args.decode_tokens)
    res.update(_summary(res))
    mem = res.get("memory", {})
    mem_txt = ", ".join(f"{k} {v['rss'] / 2**20:.0f} (anon {v['anon'] / 2**20:.0f})" for k, v in mem.items() if v)
    print(f"# {args.shape_name} {system}: prefill {res['prefill_tok_s']:.1f} tok/s, decode {res['decode_tok_s']:.2f} "
          f"tok/s, peak RSS {res['peak_rss'] / 2**20:.0f} MiB, load {res['load_s']:.1f} s, backend {res['backend']}, "
          f"load avg {load_before[0]:.1f}->{load_after[0]:.1f}, hogs {args.hog}, priority {res['priority']}; "
          f"all decode {[round(r['decode_tok_s'], 2) for r in res['runs']]}; RSS MiB: {mem_txt}", flush=True)
    return res


def print_tables(rows: list[dict]) -> None:
    print("\n| shape | engine | weights | prefill tok/s | decode tok/s | peak RSS | threads | hogs | "
          "load avg (1 min) before -> after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['label']} | {r['weight_bytes'] / 2**20:.0f} MiB | {r['prefill_tok_s']:.1f} | "
              f"{r['decode_tok_s']:.2f} | {r['peak_rss'] / 2**20:.0f} MiB | {r['threads']} | {r['hogs']} | "
              f"{r['load_avg_before'][0]:.1f} -> {r['load_avg_after'][0]:.1f} |")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        rounds = sorted({r.get("round", 0) for r in rows})
        for rnd in rounds:
            here = [r for r in rows if r["shape"] == shape and r.get("round", 0) == rnd]
            for o in (r for r in here if r["engine"].startswith("ours")):
                for lr in (r for r in here if r["engine"].endswith(":TQ2_0")):
                    dec, pre = o["decode_tok_s"] / lr["decode_tok_s"], o["prefill_tok_s"] / lr["prefill_tok_s"]
                    # the goals: prefill >= 1.5 against the native build, >= 1.25 AVX2 against AVX2
                    avx2 = lr["engine"].startswith("llama-avx2")
                    pairs.setdefault((o["label"], lr["label"]), []).append((dec, pre))
                    print(f"\n{shape}{f' round {rnd + 1}' if len(rounds) > 1 else ''}: {o['label']} / "
                          f"{lr['label']}: decode {dec:.2f} (goal >= 1.25), prefill {pre:.2f} (goal >= "
                          f"{1.25 if avx2 else 1.5}), peak RSS {(o['peak_rss'] - lr['peak_rss']) / 2**20:+.0f} MiB "
                          "(goal <= +150)")
                    a, b = o["runs"][0]["tokens"], lr["runs"][0]["tokens"]
                    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                                min(len(a), len(b)))
                    print(f"  greedy tokens equal for the first {same} of {min(len(a), len(b))} steps")
        for (ol, ll), v in pairs.items():
            if len(v) > 1:
                print(f"\n{shape}: {ol} / {ll} over {len(v)} rounds: decode median "
                      f"{statistics.median(d for d, _ in v):.2f} ({', '.join(f'{d:.2f}' for d, _ in v)}), prefill "
                      f"median {statistics.median(p for _, p in v):.2f} ({', '.join(f'{p:.2f}' for _, p in v)})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append",
                    help=f"model shape(s), repeatable or a comma list: {', '.join(SHAPES)} (default 1.7b) "
                         "or any runtime.synthetic model name")
    ap.add_argument("--model", help=argparse.SUPPRESS)  # one synthetic name; the workers get it this way
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="measured runs (median); one more warm-up run first")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the engines this many times in alternation (ours, llama, ours, llama, ...) and "
                         "report each round's ratios and their median: on a shared machine whose speed drifts "
                         "between minutes, one pass can favour either side")
    ap.add_argument("--q2-decode-tokens", type=int, default=16, help="Q2_0 is ~10x slower in llama.cpp")
    ap.add_argument("--q2-runs", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--kv", default="auto", choices=("auto", "fp16", "bf16", "fp32", "int8"),
                    help="our engine's KV cache precision (Engine.load kv_dtype; auto = the engine's default)")
    ap.add_argument("--only", default="ours,llama:TQ2_0,llama:Q2_0",
                    help="comma list: ours[:ISA[:ACTIVATIONS]], llama:TQ2_0, llama:Q2_0, llama-avx2:TQ2_0, "
                         "llama-avx2:Q2_0")
    ap.add_argument("--isa", choices=ISAS, help="force our kernel family (TERNARY_CPU_ISA) for a plain 'ours'")
    ap.add_argument("--activations", choices=ACTIVATIONS,
                    help="force our activation mode (TERNARY_CPU_ACTIVATIONS) for a plain 'ours'")
    ap.add_argument("--llama-path", default=str(DEFAULT_LLAMA_PATH),
                    help="where scripts/build_llama_avx2.sh installed the AVX2-only llama-cpp-python "
                         "(used by llama-avx2:*)")
    ap.add_argument("--hog", type=int, default=0, metavar="N",
                    help="N background busy-loop processes while each engine runs (with --priority they "
                         "get the engines' priority too)")
    ap.add_argument("--json", metavar="OUT", help="write every result row (with its machine facts) to OUT")
    ap.add_argument("--workdir", default="/tmp/ternary-bench-cpu", help="model files, written once and reused")
    ap.add_argument("--no-tie-scales", dest="tie_scales", action="store_false")
    ap.add_argument("--linear", help="only time the per-token matmuls of these backends (comma list)")
    ap.add_argument("--priority", action="store_true",
                    help="run each engine at top scheduling priority (shared machines; needs root/CAP_SYS_NICE)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return run_worker(args)
    shapes = [s.strip() for item in (args.shape or ([args.model] if args.model else ["1.7b"]))
              for s in item.split(",") if s.strip()]
    from runtime.model.config import SYNTHETIC_CONFIGS

    models = []
    for s in shapes:
        name = SHAPES.get(s.lower(), s)
        if name not in SYNTHETIC_CONFIGS:
            ap.error(f"unknown shape {s!r}; choose from {', '.join(SHAPES)} or {', '.join(SYNTHETIC_CONFIGS)}")
        models.append((s, name))
    if args.linear:
        args.model = models[0][1]
        if args.priority and os.getsid(0) != os.getpid():  # re-run in a session (autogroup) of its own
            return subprocess.run([sys.executable, *sys.argv], start_new_session=True).returncode
        if args.priority:
            print(f"# priority: {_raise_priority()}", flush=True)
        return bench_linear(args)
    args.systems = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in args.systems:
        try:
            parse_system(s)
        except ValueError as exc:
            ap.error(str(exc))
    if args.hog < 0:
        ap.error("--hog must be 0 or more")
    if args.rounds < 1:
        ap.error("--rounds must be 1 or more")
    if any(s.startswith("llama-avx2:") for s in args.systems) \
            and not (Path(args.llama_path) / "llama_cpp" / "__init__.py").exists():
        ap.error(f"no llama-cpp-python in {args.llama_path}: build it with scripts/build_llama_avx2.sh")
    # a terminated run raises here, so the running engine process and the hogs are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    args.cpu_model, args.cpu_flags = cpu_model(), cpu_flags()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {date}; CPU: {args.cpu_model} ({' '.join(args.cpu_flags)}), {os.cpu_count()} logical CPUs; "
          f"threads {args.threads}; shapes {', '.join(n for _, n in models)} (synthetic, seed {args.seed}); prompt "
          f"{args.prompt_tokens} tokens, decode {args.decode_tokens} (Q2_0: {args.q2_decode_tokens}); median of "
          f"{args.runs} (Q2_0: {args.q2_runs}) after 1 warm-up; hogs {args.hog}; load avg "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows: list[dict] = []
    for shape, name in models:
        args.model, args.shape_name = name, shape
        files = prepare_files(args)
        passthrough = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                       if k in ("model", "seed", "threads", "prompt_tokens", "decode_tokens", "runs",
                                "q2_decode_tokens", "q2_runs", "ctx", "kv", "llama_path")]
        for rnd in range(args.rounds):
            for system in args.systems:
                res = run_engine(system, files[parse_system(system)["file"]], args, passthrough)
                if res is not None:
                    res["round"] = rnd
                    rows.append(res)
    print_tables(rows)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"\ncommand: {command}")
    if args.json:
        from runtime.atomic import write_json_atomic

        write_json_atomic(args.json, {"command": command, "rows": rows})
        print(f"wrote {len(rows)} rows to {args.json}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
