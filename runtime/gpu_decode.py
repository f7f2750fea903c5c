"""Decode loop with the whole step (model forward + sampling) captured in one CUDA graph.

Why: at batch 1 a ternary model's decode step is hundreds of tiny kernels; launched one by one
from Python the launch overhead, not the weights, sets the speed. Captured once and replayed,
the step costs one ``cudaGraphLaunch``. Everything the step touches is static: the input token
and position live in device buffers, the KV cache is preallocated, the sampler's parameters are
device scalars, and the step writes its sampled token back into the input buffer and advances the
position itself, so consecutive replays need no host work at all. The host only reads the
sampled id (to turn it into text), through pinned memory and an event, *one step behind*: while
the host detokenizes token ``n`` the GPU is already computing token ``n + 1``. Greedy decoding on CUDA
samples in one Triton launch (penalties, argmax, the buffers above) that also writes the token into that
pinned memory itself, so nothing but graph replays and events sits in the stream between two steps.

Sampling is :class:`runtime.sampling.TokenSampler`, the engine's eager loop's too: every parameter a
device tensor, no data-dependent shapes, the draw an exponential race (no ``multinomial`` host sync).

On a CPU (or with ``use_graph=False``) the same step runs eagerly, which is what the CPU tests use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from runtime.capture_stream import warmup_stream
from runtime.generation import GenerationSettings
from runtime.model.base import PreparedModel, StepFn
from runtime.sampling import SamplingPlan, TokenSampler


class GraphDecoder:
    """Runs decode steps of ``step(tokens[1], positions[1]) -> logits[V]`` (graph-captured on CUDA).

    ``step`` must be graph-safe for one token: no host syncs, no tensor-dependent Python branches,
    KV written at the position *tensor*. One decoder serves many generations; call
    :meth:`invalidate` when the model's static buffers are reallocated (new context length).
    Sampling is :class:`runtime.sampling.TokenSampler` (``fused_sampling``: its Triton kernel; default on
    CUDA); one graph is captured per :meth:`~runtime.sampling.TokenSampler.graph_key`.
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
        self.sampler = TokenSampler(vocab_size, dev, fused=fused_sampling)
        self._graphs: dict[SamplingPlan, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self.graph_replays = 0
        self.fallback_reason: str | None = None  # set when capture failed and decoding went eager
        self._host: torch.Tensor | None = None
        if self.device.type == "cuda":
            self._host = torch.zeros(2, dtype=torch.long, pin_memory=True)
            self._events = [torch.cuda.Event(), torch.cuda.Event()]

    # ------------------------------------------------------------------ settings and state

    def invalidate(self) -> None:
        """Drop captured graphs (the model's buffers moved); they are recaptured on next use."""
        self._graphs.clear()
        self._pool = None

    def configure(self, settings: GenerationSettings, prompt_ids: list[int] | torch.Tensor) -> None:
        """Load sampling parameters and penalty state for a new generation (graph replays draw from the
        device's default generator, whose Philox offsets a graph can advance)."""
        self.sampler.configure(settings, prompt_ids, device_generator=self.use_graph)

    def _body(self) -> None:
        """One decode step on the static buffers: forward, sample, feed back, advance."""
        self.sampler.step(self.step(self.tok, self.pos), self.tok, self.pos, self._host)

    def sample_first(self, logits: torch.Tensor) -> int:
        """Sample the first new token from prefill logits (eager; records it for the penalties)."""
        return self.sampler.sample(logits)

    # ------------------------------------------------------------------ graphs

    def _state(self) -> tuple[torch.Tensor, ...]:
        return self.tok, self.pos, self.sampler.seen, self.sampler.counts

    def _capture(self) -> torch.cuda.CUDAGraph:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return capture_graph(self._body, self._state(), self.device, self._pool, self.warmup)

    def _run_step(self) -> None:
        if not self.use_graph:
            self._body()
            return
        key = self.sampler.graph_key()
        graph = self._graphs.get(key)
        if graph is None:
            try:
                graph = self._graphs[key] = self._capture()
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
        direct = self.sampler.writes_host
        for i in range(max_new + 1):
            if i < max_new:
                self._run_step()
                if not direct:
                    host[(position + i) % 2].copy_(self.tok[0], non_blocking=True)
                events[i % 2].record()
            if i > 0:
                events[(i - 1) % 2].synchronize()
                yield int(host[(position + i - 1) % 2])


def capture_graph(body: Callable[[], object], state: tuple[torch.Tensor, ...], device: torch.device,
                  pool: object, warmup: int = 2) -> torch.cuda.CUDAGraph:
    """``body`` captured in a CUDA graph (memory from ``pool``), after ``warmup`` eager runs on the side stream
    (JIT, autotuning, cuBLAS handles: outside the graph). ``state`` (the buffers the body advances: token,
    position, penalty counts) is put back after every run, and so is the device's random generator, so a capture
    changes nothing a generation can see: the first generation (which captures) and later ones with the same
    seed consume the same Philox offsets. The body must be idempotent for the KV cache (same token, same
    position)."""
    saved = [t.clone() for t in state]
    rng_state = torch.cuda.get_rng_state(device)

    def restore() -> None:
        for dst, src in zip(state, saved, strict=True):
            dst.copy_(src)

    side = warmup_stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            body()
            restore()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.set_rng_state(rng_state, device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        body()
    restore()
    return graph


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
# Steps with recurrent state: capture without advancing it
# ----------------------------------------------------------------------------------------------


class StatefulGraphDecoder(GraphDecoder):
    """:class:`GraphDecoder` for steps that advance a recurrent state (the Qwen3.5 hybrid's DeltaNet).

    ``GraphDecoder`` warms a step up by running it twice at the current token before capturing,
    which is harmless for a KV cache (same slot rewritten) but would advance a recurrent state two
    extra tokens. Here the state is copied to host memory before and restored after the capture
    (host, not device: a device copy of the 27B's 150 MB state would raise the VRAM peak).
    """

    def __init__(self, step: StepFn, vocab_size: int, device: torch.device | str,
                 state_buffers: tuple[torch.Tensor, ...], use_graph: bool | None = None, warmup: int = 2) -> None:
        super().__init__(step, vocab_size, device, use_graph=use_graph, warmup=warmup)
        self.state_buffers = tuple(state_buffers)

    def _capture(self) -> torch.cuda.CUDAGraph:
        saved = [b.to("cpu", copy=True) for b in self.state_buffers]
        try:
            return super()._capture()
        finally:
            for b, s in zip(self.state_buffers, saved, strict=True):
                b.copy_(s)


def graph_decoder_for(model: PreparedModel, step: StepFn, device: torch.device | str,
                      use_graph: bool | None = None) -> GraphDecoder:
    """The decoder for ``model``: one whose :meth:`~runtime.model.base.PreparedModel.sequence_state` is not
    empty gets :class:`StatefulGraphDecoder`, others the plain one."""
    buffers = model.sequence_state()
    if buffers:
        return StatefulGraphDecoder(step, model.vocab_size, device, buffers, use_graph=use_graph)
    return GraphDecoder(step, model.vocab_size, device, use_graph=use_graph)
