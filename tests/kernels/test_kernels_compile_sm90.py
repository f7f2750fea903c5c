"""The batched decode kernels compile for a Hopper GPU (sm_90) on a machine without one.

Why: the Triton interpreter runs a kernel's Python, not its compilation, so inline PTX, dot layouts and
constexpr typing errors surface only on a GPU. Triton ships ``ptxas``, so every launch config of the
tensor-core mat-vec (``dot``/``dotp``), two of the batched int8 mat-vecs ``q8m`` and ``q8w`` each, and the many-row
greedy sampler
are compiled here to SASS, in a
subprocess without ``TRITON_INTERPRET`` (under it ``@triton.jit`` makes interpreter functions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_COMPILE = """
import json
import triton
from triton.backends.compiler import GPUTarget
from runtime.kernels.triton.matvec import _gemv_dot_kernel, _gemv_q8m_kernel, _gemv_q8w_kernel
from runtime.kernels.triton.sampling import _decoder_sample_kernel
from runtime.kernels.triton.tuning import _DOT_CANDIDATES

TARGET = GPUTarget("cuda", 90, 32)
p = lambda t: "*" + t  # noqa: E731


def build(fn, sig, consts, warps):
    sig = {**sig, **{k: "constexpr" for k in consts}}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
    return triton.compile(src, target=TARGET, options=dict(num_warps=warps)).asm


mv = dict(x_ptr=p("bf16"), stride_xm="i32", nw_ptr=p("bf16"), w_ptr=p("i32"), s_ptr=p("fp16"), w2_ptr=p("i32"),
          s2_ptr=p("fp16"), r_ptr=p("bf16"), stride_rm="i32", y_ptr=p("bf16"), stride_ym="i32", part_ptr=p("fp32"),
          cnt_ptr=p("i32"), M="i32", N="i32", K="i32", KW="i32", NG="i32", eps="fp32", norm_offset="fp32")
out = []
for kind, bn, _, sk, warps in _DOT_CANDIDATES:
    for dual, norm, resid in ((True, True, False), (False, False, True)):
        c = dict(G=128, BLOCK_M=16, BLOCK_N=bn, SPLIT_K=sk, NORM=norm, NORM_QWEN3=True, DUAL=dual, RESIDUAL=resid,
                 IEEE=False, PAIRS=kind == "dotp", USE_ASM=True, USE_GDC=True)
        asm = build(_gemv_dot_kernel, mv, c, warps)
        out.append({"cfg": [kind, bn, sk, warps, dual], "sass": len(asm.get("cubin", b"")) > 0,
                    "pair_fma": asm["ptx"].count("fma.rn.bf16x2")})
q8m = dict(q_ptr=p("i32"), w_ptr=p("i32"), s_ptr=p("fp16"), w2_ptr=p("i32"), s2_ptr=p("fp16"), r_ptr=p("bf16"),
           stride_rm="i32", y_ptr=p("bf16"), stride_ym="i32", M="i32", N="i32", KW="i32", NG="i32")
for bn, warps, bw, tail, dual, resid in ((4, 1, 256, 0, True, False), (4, 2, 512, 256, False, True)):
    c = dict(WPG=8, BLOCK_N=bn, BLOCK_W=bw, TAIL=tail, DUAL=dual, RESIDUAL=resid, EVEN_K=True, EVEN_T=True,
             USE_ASM=True, USE_GDC=True)
    asm = build(_gemv_q8m_kernel, q8m, c, warps)
    out.append({"cfg": ["q8m", bn, warps, dual], "sass": len(asm.get("cubin", b"")) > 0, "pair_fma": 0,
                "dp4a": asm["ptx"].count("dp4a")})
for warps, nt, dual in ((4, 1, True), (8, 2, False)):
    c = dict(WPG=8, NT=nt, WARPS=warps, DUAL=dual, RESIDUAL=not dual, USE_ASM=True, USE_GDC=True)
    asm = build(_gemv_q8w_kernel, q8m, c, warps)
    ptx = asm["ptx"]
    loop = ptx[ptx.index("mma.sync"):ptx.rindex("mma.sync")]  # the group loop's body, first MMA to last
    out.append({"cfg": ["q8w", warps, nt, dual], "sass": len(asm.get("cubin", b"")) > 0, "pair_fma": 0,
                "mma": ptx.count("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32"),
                "shared_in_loop": loop.count(".shared"), "sync_in_loop": loop.count("bar.sync")})
smp = dict(logits_ptr=p("bf16"), seen_ptr=p("i1"), counts_ptr=p("i32"), params_ptr=p("fp32"), out_ptr=p("fp32"),
           pval_ptr=p("fp32"), pidx_ptr=p("i32"), cnt_ptr=p("i32"), tok_ptr=p("i64"), pos_ptr=p("i64"),
           host_ptr=p("fp32"), V="i32", stride_lr="i32", stride_pr="i32")
asm = build(_decoder_sample_kernel, smp, dict(BLOCK=1024, P_BLOCK=256, GREEDY=True, HOST=False, USE_ASM=True,
                                              USE_GDC=True), 4)
out.append({"cfg": ["sampler"], "sass": len(asm.get("cubin", b"")) > 0, "pair_fma": 0})
print(json.dumps(out))
"""


def test_batched_decode_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(res) >= 2 * 10 + 1 and all(r["sass"] for r in res), res
    for r in res[:-1]:
        if r["cfg"][0] == "q8w":
            continue  # "dotp" decodes pairs with the packed FMA (bf16 x here); "dot" never does
        assert (r["pair_fma"] > 0) == (r["cfg"][0] == "dotp"), r
    # q8m: the row loop stays a loop (one row's dp4a in the body: 4 per weight word of a thread, both matrices
    # when DUAL), not unrolled over the batch
    q8m = [r for r in res if r["cfg"][0] == "q8m"]
    assert len(q8m) == 2 and all(0 < r["dp4a"] <= 512 for r in q8m), q8m
    # q8w: one MMA per 32-weight block of a scale group (4 at G = 128), per
    # matrix and per 8 rows of x, unrolled once per group; its fragments come from registers, so the loop body
    # has no shared-memory traffic and no barrier (q8t's tl.dot staged every block through shared memory)
    q8w = {tuple(r["cfg"][1:]): r for r in res if r["cfg"][0] == "q8w"}
    assert q8w[(4, 1, True)]["mma"] == 4 * 2 and q8w[(8, 2, False)]["mma"] == 4 * 2, q8w
    assert all(r["shared_in_loop"] == 0 and r["sync_in_loop"] == 0 for r in q8w.values()), q8w
