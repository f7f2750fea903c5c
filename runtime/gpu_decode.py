"""Decode loop with the whole step (model forward + sampling) captured in one CUDA graph.

Why: at batch 1 a ternary model's decode step is hundreds of tiny kernels; launched one by one
from Python the launch overhead, not the weights, sets the speed. Captured once and replayed,
the step costs one ``cudaGraphLaunch``. Everything the step touches is static: the input token
and position live in device buffers, the KV cache is preallocated, the sampler's parameters are
device scalars, and the step writes its sampled token back into the input buffer and advances the
position itself, so consecutive replays need no host work at all. The host only reads the
sampled id (to turn it into text), through pinned memory and an event, *one step behind*: while
the host detokenizes token ``n`` the GPU is already computing token ``n + 1``. Greedy decoding on CUDA
samples in one Triton launch (``runtime.kernels.triton.sampling.DecoderSampler``: penalties, argmax, the buffers above) that
also writes the token into that pinned memory itself, so nothing but graph replays and events sits in the
stream between two steps.

Sampling follows :mod:`runtime.sampling` (HF semantics for repetition penalty, temperature,
top-k, top-p, min-p; OpenAI for presence/frequency) but with every parameter a device tensor and
no data-dependent shapes: top-k uses a fixed ``k`` (part of the graph key), top-p/min-p work on
the sorted candidates with masks, and the draw is an exponential race (``argmax(p / E)``, E ~
Exp(1)), which samples exactly from ``p`` without ``multinomial``'s host sync.

On a CPU (or with ``use_graph=False``) the same step runs eagerly, which is what the CPU tests use.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from runtime import flags
from runtime.capture_stream import warmup_stream
from runtime.generation import GenerationSettings

StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (tokens[1], positions[1]) -> logits[V]


@dataclass(frozen=True)
class _GraphKey:
    greedy: bool
    top_k: int  # 0 = full sort


class GraphDecoder:
    """Runs decode steps of ``step(tokens[1], positions[1]) -> logits[V]`` (graph-captured on CUDA).

    ``step`` must be graph-safe for one token: no host syncs, no tensor-dependent Python branches,
    KV written at the position *tensor*. One decoder serves many generations; call
    :meth:`invalidate` when the model's static buffers are reallocated (new context length).
    """

    def __init__(self, step: StepFn, vocab_size: int, device: torch.device | str,
                 use_graph: bool | None = None, warmup: int = 2, fused_sampling: bool | None = None) -> None:
        self.step = step
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.use_graph = self.device.type == "cuda" if use_graph is None else use_graph
        self.warmup = warmup
        dev = self.device
        self.tok = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=dev)
        self.counts = torch.zeros(vocab_size, dtype=torch.int32, device=dev)
        # temperature, top_p, min_p, repetition, presence, frequency
        self.params = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float32, device=dev)
        self._one = torch.ones(1, dtype=torch.int32, device=dev)
        self._graphs: dict[_GraphKey, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._key = _GraphKey(True, 0)
        self._generator: torch.Generator | None = None
        self.graph_replays = 0
        self.fallback_reason: str | None = None  # set when capture failed and decoding went eager
        # penalties + argmax + the loop's bookkeeping in one Triton launch (default on CUDA; the eager torch
        # ops below are the reference and the CPU path; TERNARY_FUSED_SAMPLING=0 turns it off)
        self.sampler = None
        if fused_sampling is None:
            fused_sampling = self.device.type == "cuda" and flags.value("TERNARY_FUSED_SAMPLING") != "0"
        if fused_sampling:
            try:
                from runtime.kernels.triton.sampling import DecoderSampler
            except ImportError:  # no Triton: the torch ops
                DecoderSampler = None  # noqa: N806
            if DecoderSampler is not None:
                self.sampler = DecoderSampler(vocab_size, dev)
        if self.device.type == "cuda":
            self._host = torch.zeros(2, dtype=torch.long, pin_memory=True)
            self._events = [torch.cuda.Event(), torch.cuda.Event()]

    # ------------------------------------------------------------------ settings and state

    def invalidate(self) -> None:
        """Drop captured graphs (the model's buffers moved); they are recaptured on next use."""
        self._graphs.clear()
        self._pool = None

    def configure(self, settings: GenerationSettings, prompt_ids: list[int] | torch.Tensor) -> None:
        """Load sampling parameters and penalty state for a new generation."""
        s = settings
        temp = float(s.temperature or 0.0)
        greedy = temp <= 0.0
        top_k = int(s.top_k or 0)
        if top_k >= self.vocab_size:
            top_k = 0
        self._key = _GraphKey(greedy, 0 if greedy else top_k)
        vals = [temp if not greedy else 1.0, float(s.top_p if s.top_p is not None else 1.0), float(s.min_p or 0.0),
                float(s.repetition_penalty or 1.0), float(s.presence_penalty or 0.0), float(s.frequency_penalty or 0.0)]
        self.params.copy_(torch.tensor(vals, dtype=torch.float32))
        self.seen.zero_()
        self.counts.zero_()
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).flatten()
        ids = ids[(ids >= 0) & (ids < self.vocab_size)]
        if ids.numel():
            self.seen[ids.to(self.device)] = True
        seed = s.seed if s.seed is not None else secrets.randbits(62)
        if self.use_graph:
            # graph replays draw from the device's default generator (graph-safe philox offsets)
            torch.cuda.manual_seed(seed)
            self._generator = None
        else:
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(seed)

    # ------------------------------------------------------------------ the sampler (graph-safe)

    def _penalized(self, logits: torch.Tensor) -> torch.Tensor:
        x = logits.reshape(-1)[: self.vocab_size].to(torch.float32)
        rep, presence, freq = self.params[3], self.params[4], self.params[5]
        x = torch.where(self.seen, torch.where(x < 0, x * rep, x / rep), x)
        c = self.counts.to(torch.float32)
        return x - presence * (c > 0).to(torch.float32) - freq * c

    def candidates(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(unnormalised kept probabilities, token ids), best first, for the sampling graph key."""
        temp, top_p, min_p = self.params[0], self.params[1], self.params[2]
        if self.sampler is not None:
            x = self.sampler.scaled(logits, self.seen, self.counts, self.params)
        else:
            x = self._penalized(logits) / temp
        if self._key.top_k:
            vals, idx = torch.topk(x, self._key.top_k)  # sorted descending
        else:
            vals, idx = torch.sort(x, descending=True)
        probs = torch.softmax(vals, dim=-1)
        # top-p (HF): drop tokens whose ascending cumulative mass (this one and all below) <= 1 - p
        tail = torch.flip(torch.cumsum(torch.flip(probs, (0,)), 0), (0,))
        keep = (tail > (1.0 - top_p)) | (top_p >= 1.0)
        keep = keep & (probs >= min_p * probs[0])  # min-p: ratio to the best is normalisation-free
        keep[0] = True
        return torch.where(keep, probs, torch.zeros_like(probs)), idx

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        """Token id ``[1]`` (long) from logits ``[V]``; uses only device tensors."""
        if self._key.greedy:
            return torch.argmax(self._penalized(logits)).reshape(1)
        probs, idx = self.candidates(logits)
        if self._generator is not None:
            noise = torch.empty_like(probs).exponential_(1.0, generator=self._generator)
        else:
            noise = torch.empty_like(probs).exponential_(1.0)
        return idx[torch.argmax(probs / noise)].reshape(1)

    def _body(self) -> None:
        """One decode step on the static buffers: forward, sample, feed back, advance."""
        logits = self.step(self.tok, self.pos)
        if self._key.greedy and self.sampler is not None:
            self.sampler.greedy_step(logits, self.seen, self.counts, self.params, self.tok, self.pos,
                                     self._host if self.device.type == "cuda" else None)
            return
        nxt = self._sample(logits)
        self.tok.copy_(nxt)
        self.pos.add_(1)
        self.seen.index_fill_(0, nxt, True)
        self.counts.index_add_(0, nxt, self._one)

    def sample_first(self, logits: torch.Tensor) -> int:
        """Sample the first new token from prefill logits (eager; records it for the penalties)."""
        nxt = self._sample(logits)
        self.seen.index_fill_(0, nxt, True)
        self.counts.index_add_(0, nxt, self._one)
        return int(nxt.item())

    # ------------------------------------------------------------------ graphs

    def _capture(self) -> torch.cuda.CUDAGraph:
        saved = [t.clone() for t in (self.tok, self.pos, self.seen, self.counts)]
        # Warm-up draws random numbers too; restore the generator afterwards so the first generation
        # (which captures) and later ones with the same seed consume the same Philox offsets.
        rng_state = torch.cuda.get_rng_state(self.device)
        side = warmup_stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up: JIT/autotune/cuBLAS handles, outside the graph
            for _ in range(self.warmup):
                for dst, src in zip((self.tok, self.pos, self.seen, self.counts), saved, strict=True):
                    dst.copy_(src)
                self._body()
        torch.cuda.current_stream(self.device).wait_stream(side)
        for dst, src in zip((self.tok, self.pos, self.seen, self.counts), saved, strict=True):
            dst.copy_(src)  # the step is idempotent for KV (same token, same position)
        torch.cuda.set_rng_state(rng_state, self.device)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            self._body()
        for dst, src in zip((self.tok, self.pos, self.seen, self.counts), saved, strict=True):
            dst.copy_(src)
        return graph

    def _run_step(self) -> None:
        if not self.use_graph:
            self._body()
            return
        graph = self._graphs.get(self._key)
        if graph is None:
            try:
                graph = self._graphs[self._key] = self._capture()
            except RuntimeError as exc:  # something in the step is not capturable: run eagerly
                torch.cuda.synchronize(self.device)
                self.use_graph = False
                self.fallback_reason = f"CUDA graph capture failed, decoding eagerly: {str(exc).splitlines()[0]}"
                self._body()
                return
        graph.replay()
        self.graph_replays += 1

    # ------------------------------------------------------------------ the loop

    def tokens(self, first_token: int, position: int, max_new: int) -> Iterator[int]:
        """Yield up to ``max_new`` tokens following ``first_token`` (which sits at ``position``).

        On CUDA the GPU runs one step ahead of what has been yielded; when the consumer stops
        early, that extra step has only written KV at a position past the kept sequence.
        """
        if max_new <= 0:
            return
        self.tok.fill_(int(first_token))
        self.pos.fill_(int(position))
        if self.device.type != "cuda":
            for _ in range(max_new):
                self._run_step()
                yield int(self.tok.item())
            return
        host, events = self._host, self._events
        # the fused greedy sampler writes each token straight into host[its position % 2] (pinned memory)
        direct = self._key.greedy and self.sampler is not None
        for i in range(max_new + 1):
            if i < max_new:
                self._run_step()
                if not direct:
                    host[(position + i) % 2].copy_(self.tok[0], non_blocking=True)
                events[i % 2].record()
            if i > 0:
                events[(i - 1) % 2].synchronize()
                yield int(host[(position + i - 1) % 2])


def enforce_max_vram(max_vram: int, device: torch.device | str = "cuda", context_bytes: int | None = None) -> float:
    """Make torch's allocator refuse allocations beyond ``max_vram`` minus the CUDA context.

    The planner already placed weights so the plan fits ``max_vram``; this turns any overshoot
    (fragmentation, an unexpected buffer) into an ``OutOfMemoryError`` the engine catches and
    falls back from, instead of silently using the big card's memory. Returns the fraction set.
    """
    from runtime.planner import DEFAULT_CUDA_CONTEXT_BYTES

    device = torch.device(device)
    if device.index is None:  # "cuda": the allocator call needs an index
        device = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(device).total_memory
    ctx = DEFAULT_CUDA_CONTEXT_BYTES if context_bytes is None else context_bytes
    frac = max(0.0, min(1.0, (max_vram - ctx) / total))
    torch.cuda.set_per_process_memory_fraction(frac, device)
    return frac


# ----------------------------------------------------------------------------------------------
# A fused one-token Qwen3 step for the graph (the engine's forward stays the reference)
# ----------------------------------------------------------------------------------------------


def fused_qwen3_step(model: torch.nn.Module) -> StepFn | None:
    """A one-token forward of the engine's ``Qwen3Model`` built from the fused Triton kernels.

    Per layer six launches: RMSNorm+QKV mat-vec, q/k-norm+RoPE+KV write, split-KV decode
    attention over the live length only, O mat-vec+residual, RMSNorm+gate/up+SiLU*up, down
    mat-vec+residual; then final norm + LM head in one. It reads the model's own buffers (no
    copies), so prefill through ``model.forward`` and decode through this share the KV cache.
    Streamed (offloaded) layers are supported, and so are mapped ones and a mapped LM head (their
    Triton linears read pinned host memory in place; the same calls, nothing to special-case);
    returns ``None`` when the model is not built from Triton linears (CPU-computed layers or LM
    head, dense weights, other architectures).
    """
    try:
        from runtime.kernels.triton import attention as ta
        from runtime.kernels.triton import matvec as tlin
        from runtime.kernels.triton import rope as tr
        from runtime.kernels.triton.backend import TritonLinear
        from runtime.offload import StreamedLayer
    except ImportError:
        return None
    cfg = getattr(model, "config", None)
    if cfg is None or cfg.arch != "qwen3" or \
            model.cache.k.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        return None

    def lin(m: torch.nn.Module | None) -> torch.nn.Module | None:
        return m if isinstance(m, TritonLinear) and m.encoding == "t2" else None

    layers = []
    for layer in model.layers:
        block, streamed = (layer.block, layer) if isinstance(layer, StreamedLayer) else (layer, None)
        qkv = lin(getattr(getattr(block, "qkv", None), "fused", None))
        gu = lin(getattr(getattr(block, "gate_up", None), "fused", None))
        o, d = lin(getattr(block, "o_proj", None)), lin(getattr(block, "down_proj", None))
        if None in (qkv, gu, o, d):
            return None
        layers.append((block, streamed, qkv, gu, o, d))
    head = lin(model.lm_head)
    if head is None:
        return None
    embed = model.embed  # TernaryEmbedding keeps its constants on the device: graph-capturable
    dtype, eps = model.dtype, cfg.rms_norm_eps
    nq, nkv, hd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.head_dim
    sm_scale = hd ** -0.5
    cache = model.cache
    # the attention's split merge writes o_proj's int8 input (a launch that replaces the quantisation launch)
    merge_q8 = hd & (hd - 1) == 0 and hd % 32 == 0 and flags.value("TERNARY_ATTN_MERGE_Q8") != "0"

    def step(tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = embed(tok, dtype)  # [1, H]
        cos, sin = model.rope.cos, model.rope.sin
        for i, (b, streamed, qkv, gu, o, d) in enumerate(layers):
            if streamed is not None:
                streamed._streamer.before(streamed.index)
            y = tlin.fused_rmsnorm_matvec(x, b.input_norm, eps, qkv.codes, qkv.scales, qkv.group_size)
            q = y[:, :nq].view(1, cfg.num_heads, hd)
            k = y[:, nq:nq + nkv].view(1, cfg.num_kv_heads, hd)
            v = y[:, nq + nkv:].view(1, cfg.num_kv_heads, hd)
            kc, vc = cache.k[i], cache.v[i]
            ks = cache.k_scale[i] if cache.k_scale is not None else None  # int8 cache: fp32 [Hkv, max_pos]
            vs = cache.v_scale[i] if cache.v_scale is not None else None
            qr = tr.qk_norm_rope_kv_write(q, k, v, b.q_norm, b.k_norm, cos, sin, pos, kc, vc, eps,
                                          k_scale=ks, v_scale=vs)
            qa = tlin.quant_x_planes(1, nq, dtype, x.device) if merge_q8 else None
            a = ta.decode_attention(qr[0], kc, vc, pos, sm_scale, k_scale=ks, v_scale=vs,
                                    len_offset=1, q8_out=qa)  # keys [0, pos + 1): no separate pos + 1 launch
            x = tlin.ternary_matvec(a.view(1, nq), o.codes, o.scales, o.group_size, residual=x, x_int8=qa)
            h = tlin.swiglu_matvec(x, gu.codes, gu.scales, gu.group_size, norm_weight=b.post_norm, eps=eps)
            x = tlin.ternary_matvec(h, d.codes, d.scales, d.group_size, residual=x)
            if streamed is not None:
                streamed._streamer.after(streamed.index)
        logits = tlin.fused_rmsnorm_matvec(x, model.final_norm, eps, head.codes, head.scales, head.group_size)
        return logits.reshape(-1)  # the model's dtype: the decoder's sampler reads it as fp32 (no cast launch)

    return step

