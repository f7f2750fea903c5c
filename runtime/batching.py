"""Continuous batching: concurrent requests share decode steps (``ternary serve --max-batch N``).

Why: a decode step at batch 1 reads every weight once to make one token. The ternary mat-vec kernels take a
few activation rows at nearly the cost of one, so B sequences stepped together make B tokens for little more
than the price of one; requests join and leave between steps, no one waits for a whole batch to finish.

How it is laid out:

* **Slots.** A KV cache of ``max_batch + 1`` slots, per layer ``[slots * kv_heads, context, head_dim]``
  (the batched kernels' layout). The last slot is scratch: padding rows write there.
* **Rows.** The running sequences, kept compact (rows 0..n-1); ``slots[r]`` says where row r's keys live.
  A step runs the smallest bucket (1, 2, 4, 8, ... ``max_batch``) that holds n rows, each bucket one
  CUDA graph captured once; padding rows point at the scratch slot at position 0.
* **Prefill.** A new request is prefilled by the engine's own path (graph prefill on the model's KV cache,
  which keeps the last prompt so a common prefix is not computed twice), one chunk per turn of the driver
  loop, so the running streams wait at most one chunk; then its keys and values are copied into its slot.
* **Sampling.** Each row has its own :class:`~runtime.sampling.TokenSampler` (its settings, its penalty
  state, kept as row views of stacked ``seen``/``counts``/``params`` tensors). When every row is greedy (the
  fused kernel; penalties allowed), one launch picks all rows' tokens (``DecoderSampler.greedy_rows``, a CUDA
  graph per row count); otherwise plain rows sample inside a small CUDA graph per (row, plan), and rows that
  asked for logprobs or an output constraint sample eagerly, as the engine's own eager loop does.
* **One driver thread** owns all GPU work. Requests reach it through a queue and read their tokens from
  their own queue; what an answer is (stops, thinking, statistics) is :class:`runtime.answer.Answer`, the
  same as for a single sequence.

The CPU has no batched path (one request at a time); this class runs on a CPU only in the tests, under the
Triton interpreter, with every step eager.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from runtime.answer import Answer, peak_memory_bytes
from runtime.errors import ContextOverflowError, TernaryError, UnsupportedModelError
from runtime.generation import CancelToken, GenerationEvent, GenerationSettings, GenerationStats
from runtime.gpu_decode import capture_graph
from runtime.kv_cache import KVCache
from runtime.sampling import SamplingPlan, TokenSampler, pick_token

if TYPE_CHECKING:
    from runtime.engine import Engine

MAX_BATCH_LIMIT = 64
_END = object()  # the last item of a request's token queue


def buckets(max_batch: int) -> list[int]:
    """Batch sizes that get a captured step: powers of two below ``max_batch``, and ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def slot_cache_bytes(model: Any, slots: int, context: int) -> int:
    """Bytes of a batch KV cache with ``slots`` slots of ``context`` positions (int8 scales included)."""
    cfg, cache = model.config, model.cache
    per_pos = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * cache.k.element_size()
    if cache.quantized:
        per_pos += 2 * cfg.num_layers * cfg.num_kv_heads * 4
    return slots * context * per_pos


def full_batch_rate(step_log: list[tuple[float, int]], rows: int) -> tuple[float, list[float]]:
    """Tokens per second over the logged steps that ran ``rows`` rows (``BatchDecoder.step_log``), and those
    steps' hand-out times: llama-batched-bench's S_TG definition (every sequence decoding, prefills done)."""
    full = [t for t, n in step_log if n == rows]
    rate = rows * (len(full) - 1) / (full[-1] - full[0]) if len(full) > 2 else 0.0
    return rate, full


@dataclass
class _Request:
    prompt_ids: list[int]
    settings: GenerationSettings
    cancel: CancelToken
    hooks: Any
    further: int  # tokens after the first, at most (max_new_tokens and the slot's room)
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    released: bool = False  # the reader stopped (the answer ended, or the client left)
    slot: int = -1
    done_prefill: int = 0  # prompt tokens in the model's cache for this request
    reused: int = 0
    prefill_started: float = 0.0
    prefill_s: float = 0.0
    produced: int = 0  # tokens after the first, handed out
    launched: int = 0  # decode steps run for it (one ahead of produced while a step is in flight)
    finished: bool = False

    @property
    def eager(self) -> bool:
        """Samples on the host side (logprobs or a constraint need each token's logits there)."""
        return self.hooks.logprobs is not None or self.hooks.constraint is not None

    @property
    def gone(self) -> bool:
        return self.released or self.cancel.cancelled


@dataclass
class _Step:
    """A launched decode step whose tokens the host has not handed out yet."""

    rows: list[_Request]  # the rows as they were launched (row r's token is host[r])
    host: torch.Tensor
    infos: list[Any]  # logprobs of rows sampled on the host side
    event: Any  # torch.cuda.Event, None on a CPU


class BatchDecoder:
    """Runs many generations at once on one engine's model. Build with :meth:`Engine.enable_batching`."""

    def __init__(self, engine: Engine, max_batch: int, context: int, *, use_graph: bool | None = None) -> None:
        model = engine.model
        if not 1 <= max_batch <= MAX_BATCH_LIMIT:
            raise TernaryError(f"the batch size must be from 1 to {MAX_BATCH_LIMIT}, got {max_batch}")
        step = model.decode_step()
        if step is None or not getattr(step, "batched", False):
            raise UnsupportedModelError("this model has no batched decode step (continuous batching needs a "
                                        "Qwen3-family dense model whose layers all run the ternary GPU kernels)")
        if context > model.max_positions:
            raise TernaryError(f"the per-request context ({context}) cannot exceed the model's ({model.max_positions})")
        self.engine, self.model, self.step = engine, model, step
        self.device = engine.device
        self.max_batch, self.context = max_batch, context
        self.use_graph = self.device.type == "cuda" if use_graph is None else use_graph
        cfg = model.config
        self.kv_heads = cfg.num_kv_heads
        self.scratch = max_batch
        self.cache = KVCache(cfg.num_layers, (max_batch + 1) * cfg.num_kv_heads, context, cfg.head_dim,
                             model.cache.dtype, self.device)
        dev = self.device
        self.buckets = buckets(max_batch)
        self.tok = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.pos = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.slots = torch.full((max_batch,), self.scratch, dtype=torch.int32, device=dev)
        self.logits = torch.zeros(max_batch, _head_rows(step), dtype=model.dtype, device=dev)
        self.samplers = [TokenSampler(model.vocab_size, dev) for _ in range(max_batch)]
        # the rows' penalty state and parameters stacked, each sampler's tensors a row view: one launch can
        # then pick every greedy row's token (greedy_rows)
        self.seen = torch.zeros(max_batch, model.vocab_size, dtype=torch.bool, device=dev)
        self.counts = torch.zeros(max_batch, model.vocab_size, dtype=torch.int32, device=dev)
        self.params = torch.stack([s.params for s in self.samplers])
        for r, sampler in enumerate(self.samplers):
            sampler.seen, sampler.counts, sampler.params = self.seen[r], self.counts[r], self.params[r]
        self._rows_kernel = self.samplers[0].kernel  # fused sampling (CUDA): one greedy launch for all rows
        if self._rows_kernel is not None:
            self._rows_kernel.reserve_rows(max_batch)
        self.host = torch.zeros(2, max_batch, dtype=torch.long, pin_memory=dev.type == "cuda")
        self._events = [torch.cuda.Event() if dev.type == "cuda" else None for _ in range(2)]
        self.inflight: collections.deque[_Step] = collections.deque()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._sample_graphs: dict[tuple[int, SamplingPlan], torch.cuda.CUDAGraph] = {}
        self._greedy_graphs: dict[int, torch.cuda.CUDAGraph] = {}  # rows -> all rows' greedy pick
        self._pool = None
        self.rows: list[_Request] = []
        self.free_slots = list(range(max_batch))
        self.waiting: collections.deque[_Request] = collections.deque()
        self.prefilling: _Request | None = None
        self.staged: list[int] = []  # tokens whose K/V sit in the model's own cache (the prefill staging area)
        self.steps = 0
        self.step_rows = 0  # sum of active rows over steps (mean batch = step_rows / steps)
        # (time handed out, rows) of every step while a list (benchmarks: the rate of the steps that ran all rows)
        self.step_log: list[tuple[float, int]] | None = None
        self._cond = threading.Condition()
        self._stopping = False
        engine.reset()  # the model's cache is the staging area from now on
        if self.use_graph:
            with torch.inference_mode():
                for b in self.buckets:  # captured up front: no capture pause while requests stream
                    self._graphs[b] = self._capture(lambda b=b: self._model_step(b))
        self._thread = threading.Thread(target=self._drive, name="ternary-batch-driver", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the request side (any thread)

    def generate(self, prompt_ids: list[int], s: GenerationSettings, cancel: CancelToken, origin: float,
                 hooks: Any) -> Iterator[GenerationEvent]:
        """:meth:`Engine.generate`'s events for one request, decoded in the shared batch."""
        n = len(prompt_ids)
        if n >= self.context:
            raise ContextOverflowError(
                f"the prompt is {n} tokens but each request's context holds {self.context} (at least one token "
                f"must be left for the answer); shorten it, or serve with a larger --ctx or a smaller --max-batch")
        stats = GenerationStats(prompt_tokens=n, device=str(self.device), context_length=self.context)
        req = _Request(prompt_ids, s, cancel, hooks, further=min(s.max_new_tokens - 1, self.context - n))
        with self._cond:
            if self._stopping:
                raise TernaryError("the batch decoder was stopped")
            self.waiting.append(req)
            self._cond.notify()
        answer = Answer(self.engine.tokenizer, prompt_ids, s, stats, origin)
        try:
            yield from answer.run(self._tokens(req), cancel, hooks, self.engine._token_event)
            yield from answer.flush()
        finally:
            self._release(req)
        stats.reused_prompt_tokens = req.reused
        computed = n - req.reused
        stats.prefill_tok_s = computed / req.prefill_s if computed and req.prefill_s > 0 else 0.0
        yield answer.done(peak_memory_bytes(self.device))

    def _tokens(self, req: _Request) -> Iterator[int]:
        while True:
            item = req.out.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            tok, info = item
            req.hooks.last = info
            yield tok

    def _release(self, req: _Request) -> None:
        req.released = True
        with self._cond:
            if req in self.waiting:
                self.waiting.remove(req)
            self._cond.notify()

    @property
    def active(self) -> int:
        """Requests decoding or prefilling now."""
        return len(self.rows) + (self.prefilling is not None)

    def stop(self, timeout: float = 10.0) -> None:
        """End the driver; requests still running end with an error."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # ------------------------------------------------------------------ the driver thread

    def _drive(self) -> None:
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)  # the thread's current device: where its graphs replay
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not (self.rows or self.waiting or self.prefilling or self.inflight) and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        break
                    for req in [r for r in self.waiting if r.gone]:  # cancelled while waiting: end it now
                        self.waiting.remove(req)
                        req.out.put(_END)
                    if self.prefilling is None and self.waiting and self.free_slots:
                        self.prefilling = self.waiting.popleft()
                        self.prefilling.slot = self.free_slots.pop(0)
                try:
                    self._end_gone_rows()
                    if self.prefilling is not None:
                        self._prefill_turn(self.prefilling)
                    if self.rows or self.inflight:
                        self._decode_turn()
                except BaseException as exc:  # noqa: BLE001 - every request in flight ends with it; the driver goes on
                    self._fail_all(exc)
            stopping = TernaryError("the server is stopping")
            self._fail_all(stopping)
            with self._cond:
                waiting, self.waiting = list(self.waiting), collections.deque()
            for req in waiting:
                req.out.put(stopping)

    def _finish(self, req: _Request, item: Any = _END) -> None:
        req.finished = True
        req.out.put(item)
        if req.slot >= 0:
            self.free_slots.append(req.slot)
            self.free_slots.sort()  # low slots first: nothing depends on it, but it reads well in a debugger
            req.slot = -1

    def _fail_all(self, exc: BaseException) -> None:
        if isinstance(exc, torch.OutOfMemoryError):
            exc = TernaryError("out of GPU memory while decoding a batch; serve with a smaller --max-batch or --ctx")
        in_flight = [req for step in self.inflight for req in step.rows]
        for req in {id(r): r for r in [*self.rows, *in_flight, *([self.prefilling] if self.prefilling else [])]}.values():
            if not req.finished:
                self._finish(req, exc)
        for r in range(len(self.rows)):
            self._park(r)
        self.rows, self.prefilling = [], None
        self.inflight.clear()
        self.staged = []
        self.engine.reset()

    # -- prefill: one chunk per turn
    def _prefill_turn(self, req: _Request) -> None:
        engine, prompt = self.engine, req.prompt_ids
        if req.gone:
            self.prefilling = None
            self._finish(req)
            return
        if not req.prefill_started:
            req.prefill_started = time.perf_counter()
            common = 0
            for a, b in zip(self.staged, prompt, strict=False):
                if a != b:
                    break
                common += 1
            req.reused = req.done_prefill = min(common, len(prompt) - 1)
            self.staged = prompt[:req.done_prefill]
        start = req.done_prefill
        end = min(start + engine._prefill_chunk(), len(prompt))
        logits = engine._forward(prompt[start:end], start)
        self.staged.extend(prompt[start:end])
        req.done_prefill = end
        if end < len(prompt):
            return
        self._copy_to_slot(req.slot, len(prompt))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        req.prefill_s = time.perf_counter() - req.prefill_started
        self.prefilling = None
        row = len(self.rows)
        sampler = self.samplers[row]
        sampler.configure(req.settings, prompt, device_generator=self.use_graph)
        first, info = self._sample_eager(row, req, logits[-1])
        req.out.put((first, info))
        if req.further <= 0 or self._ends(req, first):
            self._finish(req)
            return
        self.tok[row] = first
        self.pos[row] = len(prompt)
        self.slots[row] = req.slot
        self.rows.append(req)

    def _copy_to_slot(self, slot: int, n: int) -> None:
        src, dst, h = self.model.cache, self.cache, self.kv_heads
        lo, hi = slot * h, (slot + 1) * h
        dst.k[:, lo:hi, :n].copy_(src.k[:, :, :n])
        dst.v[:, lo:hi, :n].copy_(src.v[:, :, :n])
        if dst.k_scale is not None and src.k_scale is not None and dst.v_scale is not None \
                and src.v_scale is not None:
            dst.k_scale[:, lo:hi, :n].copy_(src.k_scale[:, :, :n])
            dst.v_scale[:, lo:hi, :n].copy_(src.v_scale[:, :, :n])

    def _ends(self, req: _Request, tok: int) -> bool:
        return tok in self.engine.tokenizer.eos_token_ids and not req.settings.ignore_eos

    # -- decode: one step of every running row, the host one step behind
    def _decode_turn(self) -> None:
        """Launch a step of the running rows, then hand out the tokens of the step before it.

        Why one step behind: while the host turns step k-1's tokens into queue items, the GPU computes step k
        (the single-sequence decoder does the same). A row leaves the batch once it has been launched as many
        times as it may make tokens (its last token may still be in flight), so no step ever writes past its
        slot. With a row that samples on the host side, or a prompt waiting to be prefilled, every step is
        handed out at once."""
        for r in reversed(range(len(self.rows))):
            if self.rows[r].launched >= self.rows[r].further:
                self._remove_row(r)
        if self.rows:
            self._launch()
        behind = 1 if self.rows and self.prefilling is None and not any(req.eager for req in self.rows) else 0
        while len(self.inflight) > behind:
            self._deliver(self.inflight.popleft())

    def _launch(self) -> None:
        n = len(self.rows)
        bucket = next(b for b in self.buckets if b >= n)
        if self.use_graph:
            self._graphs[bucket].replay()
        else:
            self._model_step(bucket)
        infos: list[Any] = [None] * n
        if self._all_greedy():
            self._sample_greedy_rows(n)
        else:
            for r, req in enumerate(self.rows):
                if req.eager:
                    tok, infos[r] = self._sample_eager(r, req, self.logits[r])
                    self.tok[r] = tok
                    self.pos[r] += 1
                else:
                    self._sample_row(r)
        for req in self.rows:
            req.launched += 1
        k = self.steps % 2
        host = self.host[k, :n]
        host.copy_(self.tok[:n], non_blocking=True)
        event = self._events[k]
        if event is not None:
            event.record()
        self.inflight.append(_Step(list(self.rows), host, infos, event))
        self.steps += 1
        self.step_rows += n

    def _deliver(self, step: _Step) -> None:
        if step.event is not None:
            step.event.synchronize()
        toks = step.host.tolist()  # one conversion for all rows (an int() per row costs a torch call each)
        if self.step_log is not None:
            self.step_log.append((time.perf_counter(), len(step.rows)))
        for r, req in enumerate(step.rows):
            if req.finished:  # ended while this step was in flight: its token is not wanted
                continue
            tok = toks[r]
            req.produced += 1
            req.out.put((tok, step.infos[r]))
            if req.produced >= req.further or self._ends(req, tok) or req.gone:
                self._finish(req)
                if req in self.rows:
                    self._remove_row(self.rows.index(req))

    def _end_gone_rows(self) -> None:
        for r in reversed(range(len(self.rows))):
            if self.rows[r].gone:
                self._finish(self.rows[r])
                self._remove_row(r)

    def _remove_row(self, r: int) -> None:
        """Drop row ``r``; the last row moves into its place (rows stay compact)."""
        last = len(self.rows) - 1
        if r != last:
            for buf in (self.tok, self.pos, self.slots):
                buf[r] = buf[last]
            a, b = self.samplers[r], self.samplers[last]
            a.seen.copy_(b.seen)
            a.counts.copy_(b.counts)
            a.params.copy_(b.params)
            a.plan, a.seed, a.generator = b.plan, b.seed, b.generator
            self.rows[r] = self.rows[last]
        self.rows.pop()
        self._park(last)

    def _park(self, r: int) -> None:
        """Make row ``r`` a padding row: the scratch slot, position 0."""
        self.slots[r] = self.scratch
        self.pos[r] = 0
        self.tok[r] = 0

    def _model_step(self, bucket: int) -> None:
        self.step(self.tok[:bucket], self.pos[:bucket], slots=self.slots[:bucket], cache=self.cache,
                  out=self.logits[:bucket])

    # -- sampling
    def _sample_eager(self, r: int, req: _Request, logits: torch.Tensor) -> tuple[int, Any]:
        """Row ``r``'s next token from ``logits`` on the host side, as the engine's eager loop picks it."""
        eos = set() if req.settings.ignore_eos else self.engine.tokenizer.eos_token_ids
        return pick_token(self.samplers[r], logits, req.hooks.constraint, req.hooks.logprobs, eos)

    def _all_greedy(self) -> bool:
        """Every row picks its token greedily in the fused kernel (no host-side sampling): one launch for all."""
        return self._rows_kernel is not None and all(
            not req.eager and self.samplers[r].writes_host for r, req in enumerate(self.rows))

    def _sample_greedy_rows(self, n: int) -> None:
        """Rows ``0..n-1``: ``tok`` = the argmax of each row's penalized logits, ``pos += 1``, the token recorded
        in its ``seen``/``counts`` - as ``n`` :meth:`TokenSampler.step` calls, in one launch (one graph per n)."""
        def body() -> None:
            self._rows_kernel.greedy_rows(self.logits[:n], self.seen[:n], self.counts[:n], self.params[:n],
                                          self.tok, self.pos)
        if not self.use_graph:
            body()
            return
        graph = self._greedy_graphs.get(n)
        if graph is None:
            graph = self._greedy_graphs[n] = self._capture(body, (self.tok, self.pos, self.seen, self.counts))
        graph.replay()

    def _sample_row(self, r: int) -> None:
        sampler = self.samplers[r]
        body = lambda: sampler.step(self.logits[r], self.tok[r:r + 1], self.pos[r:r + 1])  # noqa: E731
        if not self.use_graph:
            body()
            return
        key = (r, sampler.graph_key())
        graph = self._sample_graphs.get(key)
        if graph is None:
            graph = self._sample_graphs[key] = self._capture(body, (self.tok, self.pos, sampler.seen,
                                                                    sampler.counts))
        graph.replay()

    # -- graphs
    def _capture(self, body: Any, state: tuple[torch.Tensor, ...] = ()) -> torch.cuda.CUDAGraph:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return capture_graph(body, state, self.device, self._pool)


def _head_rows(step: Any) -> int:
    """Rows of the step's LM head (the logits' width, padded vocabularies included)."""
    return int(step.head.scales.shape[0])
