"""Prompt prefill captured in CUDA graphs, one graph per padded chunk shape.

Why: a 512-token prefill of the 8B model is ~2,500 kernels whose GPU time sums to ~28 ms, but
launched one by one from Python it takes ~95 ms: the CPU, not the GPU, sets time to first token.
Replayed from a CUDA graph the same kernels cost one ``cudaGraphLaunch``.

A graph needs static shapes, so a chunk of ``T`` tokens is padded up to a power-of-two *bucket*
(:func:`pad_chunk`, at least :data:`MIN_BUCKET`, at most the engine's prefill chunk) and
attention runs over a power-of-two *KV bucket* of the cache, at least the largest chunk (a
Python int baked into the graph; the causal mask itself is built on the device from the position
buffer). A 32K-token context thus needs at most 6 x 7 graphs; a chat typically a handful. Graphs are keyed by
``(bucket, kv_bucket)``, captured lazily after an eager warm-up on a side stream (Triton kernels
tune themselves on first use and must not do so inside a capture), and share one memory pool.
The first chunk of a new shape therefore costs one eager forward (its result is returned) plus
the capture; every later chunk of that shape is one replay.

Numerics: the padded forward is not bit-identical to the unpadded one, even on the CPU: matmul
kernels pick their path by row count (CPU mat-vec for <= 3 rows, GPU mat-vec for <= 8) and
attention kernels block their sums by query count and KV length. Differences are rounding-level
(~1e-6 relative in fp32, bf16 noise in bf16).

Why padding is harmless: pad tokens (id ``pad_token``) sit at positions *after* the real prompt
(clamped to the last cache slot) and write K/V there. Nothing reads a position before it has been
written by the token that really belongs there: a real query at position ``q`` attends only to
positions ``<= q`` (causal mask in :meth:`Qwen3Model.forward`, ``seq_len = pos + 1`` in the Triton
decode attention, ``kv_len = pos + 1`` in the eager decode), and the next prefill chunk or decode
step writes position ``p`` in the same forward pass (before attention) in which it first queries
``p``. Pad rows never produce NaN/Inf (their causal mask row is never empty), so masked-out stale
K/V cannot poison a softmax either. Pad rows' outputs are dropped: logits come from the last real
row, selected by a device index (``logits_index``). ``tests/engine/test_prefill_graph.py`` checks
all of this in eager mode on the CPU.

Not graph-captured (plain eager forward, the engine's previous path): CPU models, anything that
is not a :class:`Qwen3Model` with every layer a plain :class:`Qwen3Block` on the model's CUDA
device (streamed or CPU-computed layers, a CPU-gathered embedding or CPU-computed LM head; mapped
layers, LM head and embedding are fine: their pinned host matrices are read by the same kernels
inside the graph), chunks longer than the largest bucket, single-token chunks, a chunk whose
padding would have to share the cache's last slot with a real token, and everything after a
capture failed (``fallback_reason`` says why).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from runtime import flags
from runtime.capture_stream import warmup_stream

MIN_BUCKET = 16
MAX_BUCKET = 512  # the engine's PREFILL_CHUNK; activation memory of the largest graph scales with it
PAD_TOKEN = 0


def _sdpa_without_cudnn() -> list[Any]:
    from torch.nn.attention import SDPBackend

    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


_SDPA_WITHOUT_CUDNN = _sdpa_without_cudnn()


def bucket_size(n: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest power of two ``>= n`` and ``>= minimum``."""
    if n < 1:
        raise ValueError(f"a chunk needs at least one token, got {n}")
    return max(minimum, 1 << (n - 1).bit_length())


@dataclass(frozen=True)
class PaddedChunk:
    """A prefill chunk padded to a static shape: what the graph's input buffers receive."""

    tokens: list[int]  # length ``bucket``: the real tokens, then pad tokens
    positions: list[int]  # real positions, then the following ones clamped to the last cache slot
    last: int  # row of the last real token (its logits are the result)
    kv_len: int  # cache positions attention runs over (power of two >= max_bucket, or the whole cache)

    @property
    def bucket(self) -> int:
        return len(self.tokens)


def pad_chunk(tokens: list[int], start: int, max_positions: int, max_bucket: int = MAX_BUCKET,
              pad_token: int = PAD_TOKEN) -> PaddedChunk | None:
    """``tokens`` at positions ``start..`` padded to their bucket; ``None`` when no bucket fits.

    No bucket fits when the chunk is longer than ``max_bucket`` or when padding would be needed
    but the real tokens already reach the cache's last slot (the clamped pad positions would then
    overwrite a real token's K/V). The engine never prefills into the last slot (one position is
    always left for the answer), so in practice only over-long chunks run unpadded.
    """
    n = len(tokens)
    end = start + n
    if start < 0 or end > max_positions:
        raise ValueError(f"positions {start}..{end - 1} do not fit a cache of {max_positions}")
    bucket = bucket_size(n)
    if bucket > max_bucket:
        return None
    if bucket > n and end >= max_positions:
        return None
    last_slot = max_positions - 1
    positions = list(range(start, end)) + [min(p, last_slot) for p in range(end, start + bucket)]
    # KV buckets start at the largest chunk: a short chunk attending over <= max_bucket positions
    # costs next to nothing, and it keeps the number of graphs (captures, memory) per session small
    kv_len = min(max(bucket_size(end), max_bucket), max_positions)
    return PaddedChunk(list(tokens) + [pad_token] * (bucket - n), positions, n - 1, kv_len)


def graph_prefill_enabled() -> bool:
    """Graph-captured prefill is on unless ``TERNARY_GRAPH_PREFILL=0``: measured on the H200 (8B,
    512-token prompt, docs/benchmarks.md) it cut the warm time to first token from 61-99 ms (eager,
    launch-bound and noisy) to 45 ms with the same tokens and a lower peak."""
    return flags.value("TERNARY_GRAPH_PREFILL") != "0"


def graph_unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot be captured in a prefill graph, or ``None`` when it can."""
    from runtime.model.qwen3 import Qwen3Block, Qwen3Model

    if not graph_prefill_enabled():
        return "graph prefill is turned off (TERNARY_GRAPH_PREFILL=0)"

    if not isinstance(model, Qwen3Model):
        return f"prefill graphs support the Qwen3 dense model only, not {type(model).__name__}"
    for i, layer in enumerate(model.layers):
        if not isinstance(layer, Qwen3Block):  # StreamedLayer / HostComputedLayer (offload) wrap the block
            return f"layer {i} is offloaded ({type(layer).__name__})"
    dev = torch.device(model.device)
    if dev.type != "cuda":
        return "prefill graphs need a CUDA device"
    from runtime.offload import host_mapped_tensors

    index = dev.index if dev.index is not None else torch.cuda.current_device()  # "cuda" means this one
    # pinned host memory the GPU kernels read themselves (zero-copy: a mapped embedding table, mapped
    # layers' and LM head's matrices) is as graph-safe as a device buffer
    mapped = host_mapped_tensors(model)
    for name, t in list(model.named_buffers()) + list(model.named_parameters()):
        if id(t) in mapped:
            continue
        if t.device.type != "cuda" or t.device.index != index:
            return f"{name} lives on {t.device}, not cuda:{index}"
    return None


def _static_addresses(model: Any) -> tuple:
    """Addresses and shapes of the buffers a graph bakes in that the model may reallocate
    (KV cache and RoPE tables, both rebuilt by ``setup_cache``)."""
    out = []
    for prefix, mod in (("cache", model.cache), ("rope", model.rope)):
        for name, t in mod.named_buffers():
            out.append((f"{prefix}.{name}", t.data_ptr(), tuple(t.shape), t.dtype))
    return tuple(out)


def _kernel_scratch() -> list[torch.Tensor]:
    """Module-level scratch buffers of the Triton linear kernels (split-reduction counters).
    They are allocated on first use and *replaced* when a larger one is needed; a captured graph keeps using the buffer it was captured with, so we hold a
    reference to it for as long as the graph lives (otherwise the allocator could hand its
    memory to someone else while the graph still writes there)."""
    try:
        from runtime.kernels.triton import launch as tlin
    except ImportError:
        return []
    keep: list[torch.Tensor] = []
    for name in ("_counters",):
        bufs = getattr(tlin, name, None)
        if isinstance(bufs, dict):
            keep += [b for b in bufs.values() if isinstance(b, torch.Tensor)]
    return keep


@dataclass
class _Captured:
    graph: Any  # torch.cuda.CUDAGraph
    logits: torch.Tensor  # the graph's static output [1, vocab] fp32
    scratch: list[torch.Tensor] = field(default_factory=list)


class GraphPrefill:
    """Runs prefill chunks of one :class:`Qwen3Model`, graph-captured per ``(bucket, kv_bucket)``.

    Call it like the engine's forward: ``runner(tokens, start) -> logits [1, vocab] fp32`` of
    the last token, with K/V of all tokens written to the model's cache. ``use_graph=False``
    runs the padded static-shape forward eagerly (what the CPU tests check); with the default
    ``use_graph=None`` a model that cannot be captured gets the plain eager forward. The model
    is held by a weak reference, so a runner never keeps an engine's weights alive after the
    engine dropped them.
    """

    def __init__(self, model: Any, max_bucket: int = MAX_BUCKET, use_graph: bool | None = None,
                 warmup: int = 1, pad_token: int = PAD_TOKEN) -> None:
        from runtime.model.qwen3 import Qwen3Model

        self._model = weakref.ref(model)
        self.device = torch.device(model.device)
        self.max_bucket = max_bucket
        self.pad_token = pad_token
        self.warmup = warmup
        self.unsupported_reason = graph_unsupported_reason(model)
        padded_eager = use_graph is False and isinstance(model, Qwen3Model)
        if use_graph is None:
            use_graph = self.unsupported_reason is None
        if use_graph and self.unsupported_reason is not None:
            raise ValueError(f"cannot capture prefill graphs: {self.unsupported_reason}")
        self.use_graph = bool(use_graph)
        # padded static-shape forward: always under graphs; eagerly only when asked (use_graph=False)
        self.padded = self.use_graph or padded_eager
        self.fallback_reason: str | None = None  # set when a capture failed and prefill went eager
        self.capture_errors: list[str] = []  # first line of every failed capture
        self._sdpa_backends: list[Any] | None = None  # None: torch's choice; set after a failed capture
        self.captures = 0
        self.replays = 0
        self._graphs: dict[tuple[int, int], _Captured] = {}
        self._pool: Any = None
        self._addresses: tuple | None = None
        if self.padded:
            dev = self.device
            self._tokens = torch.zeros(max_bucket, dtype=torch.long, device=dev)
            self._aux = torch.zeros(max_bucket + 1, dtype=torch.long, device=dev)  # positions, last row
            self._positions = self._aux[:max_bucket]
            self._last = self._aux[max_bucket:]

    # ------------------------------------------------------------------ public

    @property
    def graphs(self) -> int:
        return len(self._graphs)

    def invalidate(self) -> None:
        """Drop captured graphs and their pool (the cache moved); recaptured on next use."""
        self._graphs.clear()
        self._pool = None

    def __call__(self, tokens: list[int] | torch.Tensor, start: int) -> torch.Tensor:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this prefill runner no longer exists")
        n = int(tokens.numel()) if isinstance(tokens, torch.Tensor) else len(tokens)
        with torch.inference_mode():
            chunk = None
            if self.padded and n > 1:  # one token: the decode-shaped eager forward (mat-vec kernels)
                host = tokens if not isinstance(tokens, torch.Tensor) else [0] * n  # ids copied on device
                chunk = pad_chunk(host, start, model.max_positions, self.max_bucket, self.pad_token)
            if chunk is None:
                return self._eager(model, tokens, start)
            self._load(tokens, chunk)
            if not self.use_graph:
                return self._body(model, chunk.bucket, chunk.kv_len)
            addresses = _static_addresses(model)
            if addresses != self._addresses:
                self.invalidate()
                self._addresses = addresses
            key = (chunk.bucket, chunk.kv_len)
            entry = self._graphs.get(key)
            if entry is None:
                try:
                    entry, logits = self._capture(model, *key)
                    self._graphs[key] = entry
                    return logits  # the warm-up already computed this chunk (and wrote its K/V)
                except torch.OutOfMemoryError:
                    self.invalidate()  # give the pool back; the engine retries with smaller chunks
                    raise
                except RuntimeError as exc:  # something in the forward is not capturable
                    torch.cuda.synchronize(self.device)
                    self.invalidate()
                    self.capture_errors.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    if self._sdpa_backends is None:
                        # attention is the likeliest culprit (cuDNN SDPA): retry once without cuDNN
                        self._sdpa_backends = _SDPA_WITHOUT_CUDNN
                        return self(tokens, start)
                    self.use_graph = self.padded = False
                    self.fallback_reason = "CUDA graph capture of prefill failed, prefilling eagerly: " \
                                           + "; then ".join(self.capture_errors)
                    return self._eager(model, tokens, start)
            entry.graph.replay()
            self.replays += 1
            return entry.logits.clone()  # the next replay of this graph overwrites its output

    # ------------------------------------------------------------------ internals

    def _eager(self, model: Any, tokens: list[int] | torch.Tensor, start: int) -> torch.Tensor:
        """The engine's unpadded forward (the reference the padded path must match)."""
        ids = torch.as_tensor(tokens, dtype=torch.long).to(self.device)
        n = ids.numel()
        pos = torch.arange(start, start + n, dtype=torch.long, device=self.device)
        return model(ids, pos, kv_len=start + n, last_only=True)

    def _load(self, tokens: list[int] | torch.Tensor, chunk: PaddedChunk) -> None:
        """Fill the static input buffers. Sources are pageable host tensors: ``copy_`` stages
        them before returning, so they may be freed at once, yet no device sync happens."""
        b, n = chunk.bucket, chunk.last + 1
        if isinstance(tokens, torch.Tensor):  # ids already on the device (the benchmark)
            self._tokens[:n].copy_(tokens.reshape(-1))
            self._tokens[n:b].fill_(self.pad_token)
        else:
            self._tokens[:b].copy_(torch.tensor(chunk.tokens, dtype=torch.long), non_blocking=True)
        aux = torch.tensor(chunk.positions + [chunk.last], dtype=torch.long)
        self._positions[:b].copy_(aux[:b], non_blocking=True)
        self._last.copy_(aux[b:], non_blocking=True)

    def _body(self, model: Any, bucket: int, kv_len: int) -> torch.Tensor:
        """The padded forward on the static buffers: logits of the last real row."""
        if self._sdpa_backends is None:
            return model(self._tokens[:bucket], self._positions[:bucket], kv_len=kv_len, logits_index=self._last)
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(self._sdpa_backends):
            return model(self._tokens[:bucket], self._positions[:bucket], kv_len=kv_len, logits_index=self._last)

    def _capture(self, model: Any, bucket: int, kv_len: int) -> tuple[_Captured, torch.Tensor]:
        """Warm up eagerly on a side stream (Triton tuning/JIT, cuBLAS handles: outside the
        graph), then capture. Returns the graph and the warm-up's logits, which are this call's
        result: the capture itself executes nothing."""
        dev = self.device
        main = torch.cuda.current_stream(dev)
        side = warmup_stream(dev)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for _ in range(max(1, self.warmup)):
                warm = self._body(model, bucket, kv_len)  # same inputs each time: the same K/V
        main.wait_stream(side)
        warm = warm.clone()  # on the main stream, after the side stream's work
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self._body(model, bucket, kv_len)
        self.captures += 1
        return _Captured(graph, logits, _kernel_scratch()), warm


_RUNNERS: weakref.WeakKeyDictionary[Any, GraphPrefill] = weakref.WeakKeyDictionary()


def graph_prefill_runner(model: Any, max_bucket: int = MAX_BUCKET) -> GraphPrefill:
    """The shared :class:`GraphPrefill` of ``model`` (created on first use, dies with the model).

    On a model that cannot be captured the runner runs the plain eager forward; check
    ``runner.use_graph`` / ``unsupported_reason`` / ``fallback_reason`` to see which path runs.
    """
    runner = _RUNNERS.get(model)
    if runner is None or runner.max_bucket != max_bucket:
        runner = _RUNNERS[model] = GraphPrefill(model, max_bucket)
    return runner


def release_graphs(model: Any) -> None:
    """Free the captured prefill graphs of ``model`` (and their pool) now, e.g. before the engine
    reallocates the cache after an out-of-memory error; they are recaptured on next use."""
    runner = _RUNNERS.get(model)
    if runner is not None:
        runner.invalidate()
