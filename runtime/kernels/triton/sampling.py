"""The sampler's fused GPU form: penalties (and, greedy, the argmax and the decode loop's bookkeeping) in one launch.

Why: in eager torch the penalties are ~12 elementwise launches over the vocabulary, plus an argmax and four state
updates (~30 us of a ~1.3 ms 8B step on the H200); here they are one launch, under PDL. It computes the same fp32
numbers as the torch reference :func:`runtime.sampling.penalize` op for op (``.rn`` arithmetic, never contracted
into an FMA), and :class:`runtime.sampling.TokenSampler` is what runs it. The parameter tensor is
:mod:`runtime.sampling`'s (``P_*`` slots): ``[temperature, top_p, min_p, repetition, presence, frequency]``;
the repetition penalty applies to every token in ``seen`` (prompt + answer), presence/frequency to ``counts``
(generated tokens).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from runtime.kernels.triton import pdl
from runtime.kernels.triton.pdl import gdc_wait

# runtime.sampling's P_TEMPERATURE, P_REPETITION, P_PRESENCE, P_FREQUENCY
DEC_TEMPERATURE, DEC_REP, DEC_PRESENCE, DEC_FREQUENCY = (tl.constexpr(i) for i in (0, 3, 4, 5))
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # read at import, like the other kernel modules
DECODER_BLOCK = 1024  # vocabulary entries per program (148 programs at V = 151,669)


@triton.jit
def _f32_rn(a, b, OP: tl.constexpr, USE_ASM: tl.constexpr):
    """``a OP b`` in fp32, correctly rounded and never contracted into an FMA with a neighbour (torch's
    separate elementwise kernels round every step; the interpreter's numpy does too)."""
    if USE_ASM:
        return tl.inline_asm_elementwise(OP + ".rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32,
                                         is_pure=True, pack=1)
    elif OP == "mul":
        return a * b
    elif OP == "sub":
        return a - b
    else:
        return a / b


@triton.jit
def _decoder_sample_kernel(logits_ptr, seen_ptr, counts_ptr, params_ptr, out_ptr, pval_ptr, pidx_ptr, cnt_ptr,
                           tok_ptr, pos_ptr, host_ptr, V, stride_lr, stride_pr,
                           BLOCK: tl.constexpr, P_BLOCK: tl.constexpr,
                           GREEDY: tl.constexpr, HOST: tl.constexpr, USE_ASM: tl.constexpr, USE_GDC: tl.constexpr):
    """Penalties (and, when sampling, the temperature) over one BLOCK of the vocabulary. GREEDY: each program's
    first maximum goes to (pval, pidx); the last program to arrive picks the first overall maximum (torch's
    argmax rule; NaN counts as +inf), writes it to ``tok``, advances ``pos`` and marks it in ``seen`` and
    ``counts`` — the whole decode-loop bookkeeping — and, with HOST, also to ``host[pos % 2]`` (pinned host memory
    the GPU writes directly: no device-to-host copy between two steps). Otherwise the scaled logits go to ``out``.

    Several rows (greedy only; continuous batching): program (pid, row) takes row's logits (``stride_lr`` apart),
    its ``seen``/``counts`` (V apart), parameters (``stride_pr`` apart), its own partials and counter, and
    ``tok[row]``/``pos[row]``: each row exactly as one launch of its own."""
    gdc_wait(USE_GDC)
    pid = tl.program_id(0)
    row = tl.program_id(1)
    if GREEDY:
        logits_ptr += row * stride_lr
        seen_ptr += row * V
        counts_ptr += row * V
        params_ptr += row * stride_pr
        pval_ptr += row * tl.num_programs(0)
        pidx_ptr += row * tl.num_programs(0)
        cnt_ptr += row
        tok_ptr += row
        pos_ptr += row
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < V
    x = tl.load(logits_ptr + offs, mask=m, other=0.0).to(tl.float32)
    seen = tl.load(seen_ptr + offs, mask=m, other=0).to(tl.int32) != 0
    cnt = tl.load(counts_ptr + offs, mask=m, other=0)
    rep = tl.load(params_ptr + DEC_REP)
    presence = tl.load(params_ptr + DEC_PRESENCE)
    freq = tl.load(params_ptr + DEC_FREQUENCY)
    # runtime.sampling.penalize, op for op
    x = tl.where(seen, tl.where(x < 0, _f32_rn(x, rep, "mul", USE_ASM), _f32_rn(x, rep, "div", USE_ASM)), x)
    x = _f32_rn(x, _f32_rn(presence, (cnt > 0).to(tl.float32), "mul", USE_ASM), "sub", USE_ASM)
    x = _f32_rn(x, _f32_rn(freq, cnt.to(tl.float32), "mul", USE_ASM), "sub", USE_ASM)
    if GREEDY:
        x = tl.where(x != x, float("inf"), x)
        x = tl.where(m, x, float("-inf"))
        best = tl.argmax(x, axis=0, tie_break_left=True)
        tl.store(pval_ptr + pid, tl.max(x, axis=0))
        tl.store(pidx_ptr + pid, pid * BLOCK + best)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr, 1)
        if arrived == tl.num_programs(0) - 1:
            r = tl.arange(0, P_BLOCK)
            pm = r < tl.num_programs(0)
            vals = tl.load(pval_ptr + r, mask=pm, other=float("-inf"), cache_modifier=".cg")
            idxs = tl.load(pidx_ptr + r, mask=pm, other=0, cache_modifier=".cg")
            win = tl.argmax(vals, axis=0, tie_break_left=True)  # the lowest block among equal maxima
            token = tl.sum(tl.where(r == win, idxs, 0), axis=0)
            tl.store(tok_ptr, token.to(tok_ptr.dtype.element_ty))
            pos = tl.load(pos_ptr)
            tl.store(pos_ptr, pos + 1)
            if HOST:
                tl.store(host_ptr + (pos & 1), token.to(host_ptr.dtype.element_ty))
            tl.store(seen_ptr + token, tl.full([], 1, seen_ptr.dtype.element_ty))
            tl.store(counts_ptr + token, tl.load(counts_ptr + token) + 1)
            tl.atomic_xchg(cnt_ptr, 0)
    else:
        temp = tl.load(params_ptr + DEC_TEMPERATURE)
        tl.store(out_ptr + offs, _f32_rn(x, temp, "div", USE_ASM), mask=m)


class DecoderSampler:
    """The buffers of :func:`_decoder_sample_kernel` for one vocabulary on one device (allocate before a
    CUDA-graph capture; the calls then allocate nothing but the sampling path's output)."""

    def __init__(self, vocab_size: int, device: torch.device | str) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.programs = triton.cdiv(vocab_size, DECODER_BLOCK)
        self.pval = torch.empty(self.programs, dtype=torch.float32, device=self.device)
        self.pidx = torch.empty(self.programs, dtype=torch.int32, device=self.device)
        self.counter = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.row_counter: torch.Tensor | None = None  # greedy_rows' buffers (reserve_rows)
        self.use_asm = not INTERPRET

    def _launch(self, logits: torch.Tensor, seen: torch.Tensor, counts: torch.Tensor, params: torch.Tensor,
                out: torch.Tensor | None, tok: torch.Tensor | None, pos: torch.Tensor | None,
                host: torch.Tensor | None = None) -> None:
        lg = logits.reshape(-1)
        if lg.numel() < self.vocab_size or seen.dtype != torch.bool or counts.dtype != torch.int32:
            raise ValueError("DecoderSampler: logits [>= V], seen bool [V], counts int32 [V]")
        greedy = out is None
        dummy = self.pval
        _decoder_sample_kernel[(self.programs, 1)](
            lg, seen, counts, params, dummy if greedy else out, self.pval, self.pidx, self.counter,
            tok if greedy else dummy, pos if greedy else dummy, host if host is not None else dummy, self.vocab_size,
            0, 0, BLOCK=DECODER_BLOCK, P_BLOCK=triton.next_power_of_2(self.programs), GREEDY=greedy,
            HOST=host is not None, USE_ASM=self.use_asm, num_warps=4,
            **pdl.launch_options(lg.device))

    def greedy_step(self, logits: torch.Tensor, seen: torch.Tensor, counts: torch.Tensor, params: torch.Tensor,
                    tok: torch.Tensor, pos: torch.Tensor, host: torch.Tensor | None = None) -> None:
        """``tok[0] = argmax(penalized logits)``, ``pos += 1``, ``seen[tok] = True``, ``counts[tok] += 1``; with
        ``host`` (int64 ``[2]``, pinned) also ``host[old pos % 2] = tok``."""
        if host is not None and (host.numel() < 2 or host.dtype != torch.int64):
            raise ValueError("host must be an int64 buffer of two slots")
        self._launch(logits, seen, counts, params, None, tok, pos, host)

    def greedy_rows(self, logits: torch.Tensor, seen: torch.Tensor, counts: torch.Tensor, params: torch.Tensor,
                    tok: torch.Tensor, pos: torch.Tensor) -> None:
        """:meth:`greedy_step` for rows ``0..R-1`` in one launch (continuous batching): ``logits [R, >= V]``,
        ``seen``/``counts [R, V]`` (contiguous rows), ``params [R, P]``, ``tok``/``pos [R]``. Allocates nothing
        once :meth:`reserve_rows` has made room for R rows (call it before a CUDA-graph capture)."""
        rows = logits.shape[0]
        if (logits.dim() != 2 or logits.shape[1] < self.vocab_size or seen.shape != (rows, self.vocab_size)
                or counts.shape != seen.shape or seen.dtype != torch.bool or counts.dtype != torch.int32
                or not seen.is_contiguous() or not counts.is_contiguous() or logits.stride(1) != 1
                or params.dim() != 2 or params.shape[0] != rows or params.stride(1) != 1
                or tok.shape[0] < rows or pos.shape[0] < rows):
            raise ValueError("greedy_rows: logits [R, >= V], seen bool / counts int32 [R, V] contiguous, "
                             "params [R, P], tok and pos [>= R]")
        self.reserve_rows(rows)
        _decoder_sample_kernel[(self.programs, rows)](
            logits, seen, counts, params, self.row_pval, self.row_pval, self.row_pidx, self.row_counter,
            tok, pos, self.row_pval, self.vocab_size, logits.stride(0), params.stride(0),
            BLOCK=DECODER_BLOCK, P_BLOCK=triton.next_power_of_2(self.programs), GREEDY=True, HOST=False,
            USE_ASM=self.use_asm, num_warps=4, **pdl.launch_options(logits.device))

    def reserve_rows(self, rows: int) -> None:
        """Partials and counters of :meth:`greedy_rows` for ``rows`` rows (kept; grown only)."""
        if self.row_counter is None or self.row_counter.numel() < rows:
            self.row_pval = torch.empty(rows * self.programs, dtype=torch.float32, device=self.device)
            self.row_pidx = torch.empty(rows * self.programs, dtype=torch.int32, device=self.device)
            self.row_counter = torch.zeros(rows, dtype=torch.int32, device=self.device)

    def scaled(self, logits: torch.Tensor, seen: torch.Tensor, counts: torch.Tensor,
               params: torch.Tensor) -> torch.Tensor:
        """Penalized logits divided by the temperature, fp32 ``[V]`` (what top-k/top-p/min-p then sample)."""
        out = torch.empty(self.vocab_size, dtype=torch.float32, device=logits.device)
        self._launch(logits, seen, counts, params, out, None, None)
        return out
