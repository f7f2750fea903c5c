"""One device call for the Qwen3.5 hybrid (27B) on CUDA: correctness of the GPU paths + 27B memory/speed.

Run on the device machine from the repo root (fla-core carried as a wheel, see docs/hybrid.md):
    python3 scripts/gpu/hybrid_gpu_check.py --out $OUT [--skip-27b]

Sections (each guarded, so one failure does not hide the rest):
  A. DeltaNet kernels: fla chunk / fused-recurrent vs our torch reference (fp32 + bf16).
  B. Tiny random hybrids vs transformers (CPU fp32 reference): CUDA fp32 (torch path), CUDA bf16
     (fla path), greedy agreement; a Hadamard-rotated tiny model on CUDA (GEMM rotation).
  C. Synthetic bonsai-27b-ptq1 (t3 in memory) at 4K context: peak VRAM after a 512-token prefill
     and 64 decode steps, decode tok/s eager and with a CUDA graph of one decode step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "hybrid"))

RESULTS: dict[str, object] = {}
DEV = "cuda"  # --dry-cpu: run the same code on the CPU with tiny shapes (catches script bugs)


def section(name):
    def wrap(fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                fn(*a, **k)
                RESULTS[name + ".ok"] = True
            except BaseException as exc:  # report and continue (pytest's Skipped is a BaseException)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                RESULTS[name + ".ok"] = False
                RESULTS[name + ".error"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            RESULTS[name + ".seconds"] = round(time.perf_counter() - t0, 1)
            print(f"== {name}: {'ok' if RESULTS[name + '.ok'] else 'FAILED'} ({RESULTS[name + '.seconds']} s)",
                  flush=True)
        return run
    return wrap


@section("A_kernels")
def kernels() -> None:
    from runtime.model import deltanet
    RESULTS["fla_available"] = deltanet.fla_available()
    g = torch.Generator(device=DEV).manual_seed(0)
    # the 27B's head shapes, bf16 only: the Triton kernels compiled/tuned here are reused by section C
    t, h, hv, dk, dv = (300, 16, 48, 128, 128) if DEV == "cuda" else (70, 2, 4, 16, 16)
    for dtype in (torch.bfloat16,):
        q = torch.randn(t, h, dk, device=DEV, generator=g).to(dtype)
        k = torch.randn(t, h, dk, device=DEV, generator=g).to(dtype)
        v = torch.randn(t, hv, dv, device=DEV, generator=g).to(dtype)
        gate = -torch.rand(t, hv, device=DEV, generator=g) * 0.3
        beta = torch.rand(t, hv, device=DEV, generator=g).to(dtype)
        s0 = 0.1 * torch.randn(hv, dk, dv, device=DEV, generator=g)
        s_ref = s0.clone()
        o_ref = deltanet.gated_delta_rule_chunked(q.float(), k.float(), v.float(), gate, beta.float(), s_ref)
        tag = "fp32" if dtype == torch.float32 else "bf16"
        s_rec = s0.clone()
        o_rec = deltanet.gated_delta_rule_recurrent(q, k, v, gate, beta, s_rec)
        RESULTS[f"torch_recurrent_vs_chunked_{tag}"] = float((o_rec.float() - o_ref).abs().max())
        if RESULTS["fla_available"]:
            s_f = s0.clone()
            o_f = deltanet.gated_delta_rule(q, k, v, gate, beta, s_f, use_fla=True)
            RESULTS[f"fla_chunk_vs_torch_{tag}_max_abs"] = float((o_f.float() - o_ref).abs().max())
            RESULTS[f"fla_chunk_state_vs_torch_{tag}_max_abs"] = float((s_f - s_ref).abs().max())
            s_1, s_2 = s0.clone(), s0.clone()
            o_1 = deltanet.gated_delta_rule(q[:1], k[:1], v[:1], gate[:1], beta[:1], s_1, use_fla=True)
            o_2 = deltanet.gated_delta_rule_recurrent(q[:1].float(), k[:1].float(), v[:1].float(), gate[:1],
                                                      beta[:1].float(), s_2)
            RESULTS[f"fla_recurrent_step_vs_torch_{tag}_max_abs"] = float((o_1.float() - o_2).abs().max())
    print({k: v for k, v in RESULTS.items() if k.startswith(("fla", "torch"))})


@section("B_tiny_vs_hf")
def tiny() -> None:
    from hybrid_helpers import build_tiny, hf_greedy, hf_torch_path

    from runtime.model.qwen35 import Qwen35Model
    prompt = torch.randint(0, 96, (80,), generator=torch.Generator().manual_seed(3))
    for name in ["gqa_2x"]:  # tests/hybrid/test_hybrid_gpu.py covers the other configs
        hf, data = build_tiny(name)
        with torch.no_grad(), hf_torch_path(hf):  # the CPU reference must not dispatch to fla
            ref = hf(prompt[None]).logits[0].log_softmax(-1)
            ref_tokens = hf_greedy(hf, prompt[:12].tolist(), 32)
        for dtype in (torch.float32, torch.bfloat16):
            tag = f"{name}_{'fp32' if dtype == torch.float32 else 'bf16'}"
            m = Qwen35Model.from_model_data(data, DEV, dtype=dtype, max_positions=256, backend="reference")
            RESULTS[f"{tag}_uses_fla"] = m.uses_fla
            with torch.no_grad():
                ours = m(prompt.to(DEV), torch.arange(80, device=DEV)).float().log_softmax(-1).cpu()
            RESULTS[f"{tag}_max_logprob_diff"] = float((ours - ref).abs().max())
            toks = _greedy_cuda(m, prompt[:12].tolist(), 32)
            RESULTS[f"{tag}_greedy_equal_prefix"] = _common(toks, ref_tokens)
        del hf
    from test_hybrid_hadamard import rotated_pair
    hf, data = rotated_pair("gqa_2x", 32)
    m = Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=64, backend="reference")
    with torch.no_grad(), hf_torch_path(hf):
        ref = hf(prompt[None, :40]).logits[0].log_softmax(-1)
        ours = m(prompt[:40].to(DEV), torch.arange(40, device=DEV)).log_softmax(-1).cpu()
    RESULTS["rotated_gqa_2x_fp32_cuda_max_logprob_diff"] = float((ours - ref).abs().max())
    RESULTS["rotation_uses_matmul"] = bool(m.rotation.use_matmul)
    print({k: v for k, v in RESULTS.items() if "gqa" in k or "equal" in k or "rotation" in k})


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _greedy_cuda(m, prompt: list[int], steps: int) -> list[int]:
    out = []
    with torch.no_grad():
        n = len(prompt)
        logits = m(torch.tensor(prompt, device=DEV), torch.arange(n, device=DEV), kv_len=n, last_only=True)
        pos = n
        for _ in range(steps):
            nxt = int(logits[-1].argmax())
            out.append(nxt)
            logits = m(torch.tensor([nxt], device=DEV), torch.tensor([pos], device=DEV), kv_len=pos + 1)
            pos += 1
    return out


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def big(fast: bool = True) -> None:
    """Fused kernels + fla first; if that path fails, the plain torch path still gives numbers."""
    _big(fast)
    if fast and not RESULTS.get("C_27b_ptq1.ok"):
        RESULTS["27b_retry_unfused"] = True
        _big(False)


@section("C_27b_ptq1")
def _big(fast: bool = True, ctx: int = 4096, prompt_len: int = 512, decode: int = 64) -> None:
    from runtime.model.qwen35 import Qwen35Model
    from runtime.model.qwen35_synthetic import qwen35_synthetic_model
    cuda = DEV == "cuda"
    cfg, group = None, 128
    if not cuda:  # dry run: same code path on a tiny config
        from test_hybrid_synthetic import tiny_hybrid_config
        cfg, group, ctx, prompt_len, decode = tiny_hybrid_config(), 64, 64, 16, 12
    if cuda:
        import gc
        gc.collect()  # a failed earlier attempt's model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    data = qwen35_synthetic_model("bonsai-27b-ptq1", seed=0, device=DEV, config=cfg, group_size=group)
    _sync()
    RESULTS["27b_generate_s"] = round(time.perf_counter() - t0, 1)
    RESULTS["27b_weight_bytes_data"] = data.nbytes
    t0 = time.perf_counter()
    extra = {} if fast else {"fused_kernels": False, "use_fla": False}
    m = Qwen35Model.from_model_data(data, DEV, dtype=torch.bfloat16, max_positions=ctx, backend="auto", **extra)
    del data
    import gc
    gc.collect()
    _sync()
    RESULTS["27b_prepare_s"] = round(time.perf_counter() - t0, 1)
    RESULTS["27b_fused_kernels"] = m.fused_kernels
    if cuda:  # loading held the generated tensors and the fused q/k/v, gate/up copies at once
        RESULTS["27b_load_peak_max_alloc"] = torch.cuda.max_memory_allocated()
        torch.cuda.empty_cache()
        RESULTS["27b_resident_after_load"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    RESULTS["27b_weight_bytes_model"] = m.weight_bytes()
    RESULTS["27b_kv_bytes"] = m.cache.nbytes
    RESULTS["27b_state_bytes"] = m.state_bytes()
    RESULTS["27b_uses_fla"] = m.uses_fla
    RESULTS["27b_linear_backend"] = type(m.layers[0].down_proj).__name__
    ids = torch.randint(0, 256, (prompt_len,), device=DEV)
    with torch.no_grad():
        _sync()
        t0 = time.perf_counter()
        logits = m(ids, torch.arange(prompt_len, device=DEV), kv_len=prompt_len, last_only=True)
        _sync()
        RESULTS["27b_prefill_tok_s"] = round(prompt_len / (time.perf_counter() - t0), 1)
        tok = logits[-1:].argmax(-1)
        pos = prompt_len
        times = []
        for _ in range(decode // 2):
            _sync()
            t0 = time.perf_counter()
            logits = m(tok, torch.tensor([pos], device=DEV), kv_len=pos + 1)
            tok = logits[-1:].argmax(-1)
            _sync()
            times.append(time.perf_counter() - t0)
            pos += 1
        RESULTS["27b_decode_eager_tok_s"] = round(1 / (sum(times[2:]) / len(times[2:])), 2)
        if cuda:  # CUDA graph of one decode step (static token / position buffers, full-cache mask)
            tok_buf = tok.clone()
            pos_buf = torch.tensor([pos], device=DEV)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    m(tok_buf, pos_buf)
                    pos_buf += 1
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = m(tok_buf, pos_buf)
            steps = decode // 2 - 4
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                graph.replay()
                tok_buf.copy_(out[-1:].argmax(-1))
                pos_buf += 1
            torch.cuda.synchronize()
            RESULTS["27b_decode_graph_tok_s"] = round(steps / (time.perf_counter() - t0), 2)
    RESULTS["27b_ctx"] = ctx
    if cuda:
        RESULTS["27b_run_peak_max_allocated"] = torch.cuda.max_memory_allocated()  # weights + caches + work
        RESULTS["27b_run_peak_max_reserved"] = torch.cuda.max_memory_reserved()
    print({k: v for k, v in RESULTS.items() if k.startswith("27b")})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/hybrid_out")
    ap.add_argument("--skip-27b", action="store_true")
    ap.add_argument("--dry-cpu", action="store_true")
    args = ap.parse_args()
    global DEV
    if args.dry_cpu:
        DEV = "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    RESULTS["gpu"] = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)"
    RESULTS["torch"] = torch.__version__
    kernels()
    if not args.skip_27b:
        big()
    (out / "hybrid_gpu.json").write_text(json.dumps(RESULTS, indent=1))
    tiny()
    (out / "hybrid_gpu.json").write_text(json.dumps(RESULTS, indent=1))
    print("\n| key | value |\n|---|---|")
    for k, v in RESULTS.items():
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
