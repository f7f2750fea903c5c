"""Time every int8-activation (W2A8) mat-vec launch config at the Bonsai decode shapes, next to a
plain streaming read of the same bytes with the same tile shape (the ceiling a config can reach).

Usage (GPU machine, repo root): ``python3 scripts/gpu/sweep_q8.py [--models 8b,27b] [--json PATH]``

Why: the tuned q8 mat-vecs stream weights at 1.7-2.1 TB/s even for the 165 MB LM head, under half
of what the H200 copies. This shows whether the gap is the access pattern (the streaming read with
the same tile is as slow) or what the kernel does around its loads (on the H200, 2026-12-03: the
read is 1.3-2x faster, so the latter; docs/benchmarks.md), and which tile shapes keep enough bytes in flight. Every time is ``triton_linear._bench``: CUDA-graph replays with the L2
flushed before each call, the activation quantisation launch included.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.kernels import triton_linear as tlin  # noqa: E402

DEV = "cuda"
TOP = 6  # fastest configs printed per shape (all are in --json)
BF16 = torch.bfloat16

SHAPES = {  # model -> [(name, N, K, kind)]; kind: norm | resid | swiglu (N = rows of each of gate, up)
    "8b": [("qkv+norm", 6144, 4096, "norm"), ("o+res", 4096, 4096, "resid"),
           ("gate_up+norm", 12288, 4096, "swiglu"), ("down+res", 4096, 12288, "resid"),
           ("lm_head+norm", 151669, 4096, "norm")],
    "27b": [("gdn qkvz+norm", 16384, 5120, "norm"), ("attn q|gate,k,v+norm", 14336, 5120, "norm"),
            ("out+res", 5120, 6144, "resid"), ("gate_up+norm", 17408, 5120, "swiglu"),
            ("down+res", 5120, 17408, "resid")],
}


@triton.jit
def _stream_kernel(w_ptr, s_ptr, y_ptr, N, KW, NG, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    """Reads the codes (int32 words) and scales of BLOCK_N rows the way the q8 mat-vec tiles them and
    writes one number per row: the memory traffic of a mat-vec with almost no arithmetic."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = offs_n < N
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.int32)
    for w0 in range(0, KW, BLOCK_W):
        wk = w0 + tl.arange(0, BLOCK_W)
        m = nm[:, None] & (wk < KW)[None, :]
        acc ^= tl.load(w_ptr + offs_n[:, None] * KW + wk[None, :], mask=m, other=0,
                       eviction_policy="evict_first")
        gm = nm[:, None] & (wk < NG)[None, :]
        acc ^= tl.load(s_ptr + offs_n[:, None] * NG + wk[None, :], mask=gm, other=0).to(tl.int32)
    tl.store(y_ptr + offs_n, tl.sum(acc, axis=1).to(tl.float32), mask=nm)


def packed_bytes(n: int, k: int, g: int = 128) -> int:
    return n * k // 4 + n * (k // g) * 2


# wider tiles than the tuner's list: 16-32 int32 words (64-128 bytes of codes) per thread in flight
EXTRA = [("q8", 8, 4096, 1, 2), ("q8", 16, 4096, 1, 4), ("q8", 8, 4096, 1, 4), ("q8", 16, 4096, 1, 8),
         ("q8", 32, 4096, 1, 8), ("q8", 4, 8192, 1, 4), ("q8", 8, 8192, 1, 4), ("q8", 16, 8192, 1, 8),
         ("q8", 8, 16384, 1, 8), ("q8", 4, 16384, 1, 4), ("q8", 2, 8192, 1, 2)]


def candidates(variants: str = "all") -> list[tuple]:
    """``all``: every q8/q8c/q8p candidate plus EXTRA; ``quick``: the tuner's default set (q8p included)
    plus every q8p candidate."""
    if variants == "quick":
        return list(dict.fromkeys(tlin._QUICK_Q8 + tlin._Q8P_CANDIDATES + tlin._Q8PX_CANDIDATES))
    return list(dict.fromkeys(tlin._Q8_CANDIDATES + tlin._Q8C_CANDIDATES + tlin._Q8P_CANDIDATES + tlin._Q8PX_CANDIDATES
                              + EXTRA))


def sweep_shape(model: str, name: str, n: int, k: int, kind: str, g: int = 128, variants: str = "all") -> dict:
    codes = torch.randint(0, 256, (n, k // 4), dtype=torch.uint8, device=DEV)
    scales = (torch.rand(n, k // g, device=DEV) * 0.02 + 0.005).half()
    mats = [(codes, scales)]
    if kind == "swiglu":
        mats.append((torch.randint(0, 256, (n, k // 4), dtype=torch.uint8, device=DEV), scales.clone()))
    x = torch.randn(1, k, device=DEV, dtype=BF16)
    nw = torch.ones(k, device=DEV, dtype=BF16)
    res = torch.randn(1, n, device=DEV, dtype=BF16)
    y = torch.empty(1, n, device=DEV, dtype=BF16)
    ys = torch.empty(n, device=DEV)
    nbytes = packed_bytes(n, k, g) * len(mats)

    def call(cfg):
        if kind == "norm":
            return lambda: tlin.fused_rmsnorm_matvec(x, nw, 1e-6, codes, scales, g, out=y, config=cfg)
        if kind == "resid":
            return lambda: tlin.ternary_matvec(x, codes, scales, g, out=y, residual=res, config=cfg)
        return lambda: tlin.swiglu_matvec(x, codes, scales, g, up_codes=mats[1][0], up_scales=mats[1][1],
                                          norm_weight=nw, out=y, config=cfg)

    def stream(bn, bw, warps):
        for c, s in mats:
            _stream_kernel[(triton.cdiv(n, bn),)](c.view(torch.int32), s.view(torch.int16), ys, n, k // 16, k // g,
                                                  BLOCK_N=bn, BLOCK_W=bw, num_warps=warps)

    ref = None
    results = []
    for cfg in candidates(variants):
        kind_, bn, bk, sk, warps = cfg
        persistent = kind_ in ("q8p", "q8px")  # its third field is programs per SM, not a K split
        if not persistent and (sk > triton.cdiv(k, bk) or triton.cdiv(n, bn) * sk < 64):
            continue
        bw = max(1, bk // 16)
        try:
            fn = call(cfg)
            fn()
            torch.cuda.synchronize()
            if ref is None:
                ref = y.float().clone()
            err = (y.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
            t = tlin._bench(fn) * 1e3
            # the same tile shape reading the same bytes with (almost) no arithmetic
            # (a persistent program reads many tiles: no one-tile-per-program read to set beside it)
            ts = float("nan") if persistent else tlin._bench(lambda bn=bn, bw=bw, warps=warps: stream(bn, bw, warps)) * 1e3
        except Exception as e:  # noqa: BLE001 - a config the compiler rejects is reported, not fatal
            results.append({"cfg": list(cfg), "error": f"{type(e).__name__}: {str(e)[:80]}"})
            continue
        results.append({"cfg": list(cfg), "us": round(t, 2), "GBps": round(nbytes / t / 1e3, 1),
                        "stream_us": round(ts, 2), "stream_GBps": round(nbytes / ts / 1e3, 1),
                        "rel_diff_vs_first": round(err, 5), "words_per_thread": bn * bw // (32 * warps)})
    ok = sorted([r for r in results if "us" in r], key=lambda r: r["us"])
    print(f"\n{model} {name}: N={n} K={k} {nbytes / 1e6:.1f} MB", flush=True)
    for r in ok[:TOP]:
        print(f"  {','.join(map(str, r['cfg'])):16s} {r['us']:6.2f} us {r['GBps']:6.0f} GB/s | stream {r['stream_us']:6.2f} us"
              f" | wpt {r['words_per_thread']:2d} | diff {r['rel_diff_vs_first']}")
    for tag, rows in (("one tile per program", [r for r in ok if r["cfg"][0] not in ("q8p", "q8px")]),
                      ("persistent (q8p)", [r for r in ok if r["cfg"][0] == "q8p"]),
                      ("persistent, x quantised in-kernel (q8px)", [r for r in ok if r["cfg"][0] == "q8px"])):
        if rows:
            print(f"  best {tag}: {','.join(map(str, rows[0]['cfg']))} {rows[0]['us']:.2f} us")
    best_stream = min((r["stream_us"] for r in ok if r["stream_us"] == r["stream_us"]), default=float("nan"))
    errors = [(",".join(map(str, r["cfg"])), r["error"][:40]) for r in results if "error" in r]
    print(f"  best streaming read: {best_stream:.2f} us; errors: {errors}", flush=True)
    return {"model": model, "op": name, "N": n, "K": k, "MB": nbytes / 1e6, "results": results}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="8b,27b")
    ap.add_argument("--json")
    ap.add_argument("--variants", choices=("all", "quick"), default="all")
    a = ap.parse_args()
    print(torch.cuda.get_device_name())
    out = {"rows": []}
    for m in a.models.split(","):
        for shape in SHAPES[m]:
            out["rows"].append(sweep_shape(m, *shape, variants=a.variants))
            torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
