"""The engine: load a model, turn messages into streamed text with honest statistics.

One object (see ``docs/engine.md``) owned by one thread. It keeps the KV cache between calls and
re-uses the longest common token prefix with the previous call, so turn N of a chat only prefills
the new messages. Everything the decode loop needs (chat template, tokenizer, sampler, thinking
split, stop strings) lives in its own module; this file is the loop and the bookkeeping.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from runtime.answer import Answer, peak_memory_bytes, process_peak_rss_bytes
from runtime.chat_template import FALLBACK_CHATML_TEMPLATE, render_chat
from runtime.devices import resolve_device
from runtime.errors import (
    CancelledError,
    ContextOverflowError,
    InvalidSettingError,
    OutOfMemoryError,
    TernaryError,
    UnsupportedModelError,
)
from runtime.formats.arch import dense_matrices_notice, get_arch
from runtime.formats.model_data import ModelData
from runtime.generation import (
    CancelToken,
    GenerationEvent,
    GenerationSettings,
    GenerationStats,
    MemoryStats,
    Message,
    ModelInfo,
    NoticeEvent,
    TokenEvent,
)
from runtime.kv_cache import default_kv_dtype, resolve_kv_dtype
from runtime.model.qwen3 import Qwen3Model
from runtime.sampling import TokenSampler, pick_token
from runtime.sampling_params import check as check_setting
from runtime.sampling_params import validate_generation_settings
from runtime.tokenizer import Tokenizer

if TYPE_CHECKING:
    from runtime.batching import BatchDecoder
    from runtime.constrained import TokenConstraint
    from runtime.kernels.cpu.decode_step import CpuStep


PREFILL_CHUNK = 512  # tokens per prefill forward: bounds activation memory for long prompts
CPU_DEFAULT_MAX_CONTEXT = 4096  # CPU prefill runs at tens of tok/s: a longer prompt takes minutes
CPU_KV_RAM_FRACTION = 0.25  # at most this share of available RAM goes to the CPU KV cache
CTX_ALIGN = 256
BATCH_RESERVE_BYTES = 1 << 30  # free GPU memory left to activations, graphs and prefill when batching
MAX_TOP_LOGPROBS = 20  # as OpenAI's top_logprobs
_SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                    "frequency_penalty")


def _model_default(name: str, value: Any, fallback: Any) -> Any:
    """A model file's default for a sampling setting, or the family's when the file's is missing or
    invalid (a generation_config.json with temperature NaN must not break every generation)."""
    if value is None or isinstance(value, bool):
        return fallback
    try:
        converted = type(fallback)(value)
    except (TypeError, ValueError, OverflowError):
        return fallback
    return converted if check_setting(name, converted) is None else fallback


def _parameter_count(data: ModelData) -> int:
    total = 0
    for t in data.tensors.values():
        n = 1
        for d in t.shape:
            n *= d
        total += n
    return total


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Engine:
    """A loaded model ready to generate. Build with :meth:`load`. Not thread-safe (see docs)."""

    def __init__(self, model: Qwen3Model, tokenizer: Tokenizer, data: ModelData, device: torch.device,
                 plan: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.config = data.config
        self.generation_defaults = dict(data.generation_defaults or {})
        self.chat_template = (data.tokenizer.chat_template if data.tokenizer else None) or FALLBACK_CHATML_TEMPLATE
        backend = getattr(model.layers[0].down_proj, "backend", "") if len(model.layers) else ""
        self.info = ModelInfo(
            name=data.name or data.provenance.source_name or "model",
            arch=data.config.arch,
            device=str(device),
            context_length=model.max_positions,
            max_context=data.config.max_position_embeddings,
            parameter_count=_parameter_count(data),
            weight_bytes=model.weight_bytes(),
            plan=plan or {},
            supports_thinking=("<think>" in self.chat_template or "enable_thinking" in self.chat_template),
            backend=backend,
            dtype=str(model.dtype).replace("torch.", ""),
            source_format=data.provenance.source_format,
        )
        self._cached_tokens: list[int] = []  # tokens whose K/V sit at cache positions 0..n-1
        # (n, logits [1, V]) of the last prefill that ended at position n: asking again for the same
        # prompt (regenerate) then reuses them instead of recomputing the last prompt token through
        # the one-token decode path, which rounds differently from the prefill GEMM; so the same
        # seed gives the same answer, and regenerating skips the prefill entirely
        self._end_logits: tuple[int, torch.Tensor] | None = None
        self.graph_decode = False  # decode through runtime.gpu_decode.GraphDecoder (set by load)
        self._decoder: Any = None
        self._fused_step = False  # whether the graph decoder runs the fused Triton step
        self._notified_fallback = False
        self._pending_notices: list[str] = []  # said once, at the start of the next generation
        # runtime.kernels.cpu.decode_step's one-token step for this model and cache (built on first use)
        self._cpu_step: CpuStep | None = None
        self._cpu_step_built = False
        self._batch: BatchDecoder | None = None  # continuous batching (enable_batching), else one sequence

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | os.PathLike | ModelData, device: str = "auto", context_length: int | None = None,
             max_vram_bytes: int | None = None, progress: Callable[[str, float], None] | None = None,
             cancel: CancelToken | None = None, *, dtype: torch.dtype | None = None, backend: str = "auto",
             kv_dtype: torch.dtype | str | None = None, graph_decode: bool | None = None,
             offload: str = "auto", decode_activations: str | None = None) -> Engine:
        """Read a model file (or take a :class:`ModelData`) and prepare it on ``device``.

        ``context_length=None`` asks the planner for the largest context that fits (on the CPU at
        most ``CPU_DEFAULT_MAX_CONTEXT`` and a quarter of free RAM). Extensions beyond the API
        contract: ``dtype`` (activations; fp32 on CPU, bf16 on CUDA by default), ``backend`` (ternary
        matmul backend name), ``kv_dtype`` (a dtype or a name from
        :data:`runtime.kv_cache.KV_CACHE_CHOICES`; ``None``/"auto" = ``dtype``; ``"int8"`` or
        ``torch.int8`` = the 8-bit cache, about half the bytes so the planner fits twice the
        context, at a small accuracy cost, see docs/benchmarks.md) and ``graph_decode`` (decode
        through :class:`runtime.gpu_decode.GraphDecoder`; default: on CUDA) and ``offload``
        ("auto": the planner picks the cheapest offload per token; "stream", "mapped" or "cpu" force
        how layers that do not fit the GPU run; passed to the planner's ``offload_mode``; "mapped"
        needs the Triton backend, so another ``backend`` takes it out of "auto") and
        ``decode_activations`` ("int8": GPU decode mat-vecs on bf16/fp16 activations quantise them to
        int8 and use ``dp4a``, the default, ~1.6x faster; on the CPU the ternary matmuls quantise
        activations to int8 per 32 values (VNNI/``vpmaddubsw``/``sdot``), the default where the kernel
        is SIMD; "exact": keep them in fp32. Process-wide: it sets
        :func:`runtime.kernels.triton.matvec.set_decode_activations` or
        :func:`runtime.kernels.cpu.ternary.set_default_activations`).
        """
        if offload not in ("auto", "stream", "mapped", "cpu"):
            raise TernaryError(f"offload must be auto, stream, mapped or cpu, got {offload!r}")
        if decode_activations not in (None, "int8", "exact"):
            raise TernaryError(f"decode activations must be int8 or exact, got {decode_activations!r}")
        dev = resolve_device(device)
        if dev.type == "cpu":
            from runtime.host_memory import keep_large_buffers_out_of_heap

            keep_large_buffers_out_of_heap()  # per-token buffers must not keep the heap grown
        if decode_activations is not None and dev.type == "cuda":
            from runtime.kernels.triton import matvec

            matvec.set_decode_activations(decode_activations)
        elif decode_activations is not None and dev.type == "cpu":
            from runtime.kernels.cpu import ternary as cpu_ternary

            cpu_ternary.set_default_activations(decode_activations)

        def report(stage: str, fraction: float) -> None:
            if cancel is not None and cancel.cancelled:
                raise CancelledError("model loading was cancelled")
            if progress is not None:
                progress(stage, fraction)

        report("reading model file", 0.0)
        if isinstance(path, ModelData):
            data = path
        else:
            from runtime.embedding import is_embedding_file

            if is_embedding_file(path):
                raise UnsupportedModelError(
                    f"{Path(path).name} is an embedding model (it turns text into vectors for document "
                    "search), not a chat model: load a chat model and let the app use this one for "
                    "knowledge bases")
            data = _read_model(Path(path))
        model_cls = _model_class(data.config.arch)
        if data.tokenizer is None:
            raise UnsupportedModelError("the model file has no tokenizer, so it cannot be used for chat")
        report("planning memory", 0.1)
        act_dtype = dtype or (torch.float32 if dev.type == "cpu" else torch.bfloat16)
        try:
            kv = resolve_kv_dtype(kv_dtype, default_kv_dtype(dev.type, act_dtype))  # CPU: fp16 cache
        except ValueError as exc:
            raise TernaryError(str(exc)) from exc
        # mapped offload moves Triton linears' matrices to host memory: other backends cannot map
        can_map = backend in ("auto", "triton")
        if offload == "mapped" and not can_map:
            raise TernaryError(f"offload 'mapped' needs the triton backend, not {backend!r}")
        ctx, plan = _choose_context(data, dev, context_length, max_vram_bytes, kv, offload, can_map)
        tokenizer = Tokenizer(data.tokenizer)
        kwargs: dict[str, Any] = dict(dtype=act_dtype, max_positions=ctx, backend=backend, kv_dtype=kv)
        if plan is not None and dev.type == "cuda" and _needs_placement(plan):
            if "placement" not in inspect.signature(model_cls.__init__).parameters:
                raise OutOfMemoryError(f"the model needs offloading to fit this GPU, which is not implemented for "
                                       f"{data.config.arch}; use --device cpu or a smaller --ctx")
            from runtime.offload import Placement

            kwargs["placement"] = Placement(plan, dev)
        if max_vram_bytes is not None and dev.type == "cuda":
            from runtime.gpu_decode import enforce_max_vram

            enforce_max_vram(max_vram_bytes, dev)
        elif dev.type == "cuda":  # the allocator cap is process-wide: lift one an earlier capped load left
            torch.cuda.set_per_process_memory_fraction(1.0, dev if dev.index is not None else torch.cuda.current_device())

        def model_progress(stage: str, fraction: float) -> None:
            report(stage, 0.15 + 0.85 * fraction)

        notices: list[str] = []
        while True:
            try:
                model = model_cls.from_model_data(data, dev, progress=model_progress, cancel=cancel, **kwargs)
                break
            except torch.OutOfMemoryError as exc:
                if plan is None or context_length is not None:  # a context the user asked for: no guessing
                    raise OutOfMemoryError(f"not enough {dev.type.upper()} memory to load the model with "
                                           f"{ctx} tokens of context; try a smaller --ctx") from exc
                _release_memory(dev)
                plan, ctx = _smaller_plan(data, plan, ctx, can_map)  # OutOfMemoryError when nothing smaller fits
                kwargs["max_positions"] = ctx
                kwargs.pop("placement", None)
                if dev.type == "cuda" and _needs_placement(plan):
                    from runtime.offload import Placement

                    kwargs["placement"] = Placement(plan, dev)
                where = f", {len(plan.cpu_layers)} layers offloaded to host memory" if dev.type == "cuda" else ""
                notices.append(f"{plan.reasons[-1]} Loaded with a context of {ctx} tokens{where}.")
        engine = cls(model, tokenizer, data, dev, plan.to_dict() if plan is not None else None)
        if plan is not None:
            engine.info.plan["context_length"] = ctx
        dense = data.notices or [n for n in [dense_matrices_notice(data.config, data.tensors)] if n]
        engine._pending_notices = list(dense) + notices
        engine.graph_decode = dev.type == "cuda" if graph_decode is None else graph_decode
        report("ready", 1.0)
        return engine

    def close(self) -> None:
        """Release the model and cache (the engine is unusable afterwards)."""
        self.enable_batching(1)
        self.model = None  # type: ignore[assignment]
        self._decoder = None  # its step closure and captured graphs hold the model's buffers
        self._cpu_step, self._cpu_step_built = None, False  # and so does the CPU step's
        self._cached_tokens = []
        self._end_logits = None
        if self.device.type == "cuda":
            import gc

            gc.collect()
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ settings and prompts

    def default_settings(self) -> GenerationSettings:
        """Settings resolved from the model file's generation defaults, then the architecture's
        (:attr:`runtime.formats.arch.ArchSpec.sampling_defaults`, ``thinking_default``)."""
        gd = self.generation_defaults
        spec = get_arch(self.config.arch)
        fallback = spec.sampling_defaults(self.config)
        values: dict[str, Any] = {}
        for name in _SAMPLING_FIELDS:
            values[name] = _model_default(name, gd.get(name), fallback[name])
        if gd.get("do_sample") is False:
            values["temperature"] = 0.0
        thinking = gd.get("enable_thinking")
        values["enable_thinking"] = bool(thinking) if thinking is not None else spec.thinking_default
        if self.info.supports_thinking is False:
            values["enable_thinking"] = False
        max_new = gd.get("max_new_tokens")
        if isinstance(max_new, int) and not isinstance(max_new, bool) and check_setting("max_new_tokens", max_new) is None:
            values["max_new_tokens"] = max_new
        return GenerationSettings(**values)

    def resolve_settings(self, settings: GenerationSettings | None) -> GenerationSettings:
        """``settings`` with every ``None`` replaced by the model default."""
        base = self.default_settings()
        if settings is None:
            return base
        merged = {}
        for f in fields(GenerationSettings):
            v = getattr(settings, f.name)
            merged[f.name] = getattr(base, f.name) if v is None else v
        return replace(base, **merged)

    def render_prompt(self, messages: list[Message], settings: GenerationSettings | None = None, *,
                      tools: list[dict[str, Any]] | None = None) -> str:
        """The exact prompt text the model sees for ``messages`` (chat template applied); ``tools`` (OpenAI
        function schemas) reach the template as its ``tools`` variable."""
        s = self.resolve_settings(settings)
        return render_chat(self.chat_template, messages, add_generation_prompt=True, source=self.info.name,
                           special_tokens=self.tokenizer.special_tokens_map(), tools=tools,
                           enable_thinking=s.enable_thinking, reasoning_effort=s.reasoning_effort)

    def encode_prompt(self, messages_or_prompt: list[Message] | str, settings: GenerationSettings | None = None,
                      *, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Prompt token ids: a plain string as it is (special tokens added), messages through the template."""
        if isinstance(messages_or_prompt, str):
            return self.tokenizer.encode(messages_or_prompt, add_special_tokens=True)
        return self.tokenizer.encode(self.render_prompt(messages_or_prompt, settings, tools=tools),
                                     add_special_tokens=False)

    def count_tokens(self, messages: list[Message] | str, settings: GenerationSettings | None = None, *,
                     tools: list[dict[str, Any]] | None = None) -> int:
        """Prompt tokens after the chat template (what counts against the context)."""
        return len(self.encode_prompt(messages, settings, tools=tools))

    def enable_batching(self, max_batch: int, context: int | None = None) -> BatchDecoder | None:
        """Decode up to ``max_batch`` requests at once (continuous batching, :mod:`runtime.batching`); from then on
        :meth:`generate` may be called from several threads at once. ``context``: positions per request (default
        the engine's; shrunk to what fits in free GPU memory). ``max_batch`` 1 turns it off.

        Raises :class:`UnsupportedModelError` on a CPU (requests there run one at a time) or for a model without
        a batched step, :class:`OutOfMemoryError` when not even 512 positions per request fit."""
        if self._batch is not None:
            self._batch.stop()
            self._batch = None
        if max_batch <= 1:
            return None
        if self.device.type != "cuda":
            raise UnsupportedModelError("continuous batching runs on a CUDA GPU; on the CPU requests run one at a time")
        from runtime.batching import BatchDecoder, slot_cache_bytes

        model = self.model
        ctx = min(context or model.max_positions, model.max_positions)
        _release_memory(self.device)
        free = torch.cuda.mem_get_info(self.device)[0] - BATCH_RESERVE_BYTES
        per_position = slot_cache_bytes(model, max_batch + 1, 1)
        if per_position * ctx > free:
            fitting = max(0, free) // per_position // CTX_ALIGN * CTX_ALIGN
            if fitting < 512:
                raise OutOfMemoryError(f"{max_batch} requests at once do not fit in free GPU memory "
                                       f"({max(0, free) / 2**30:.1f} GiB after a reserve); use a smaller batch")
            ctx = fitting  # the caller reports it: batch.context
        self._batch = BatchDecoder(self, max_batch, ctx)
        return self._batch

    @property
    def request_context(self) -> int:
        """Positions one request may use (prompt and answer): a batch slot's with continuous batching on, else the
        engine's context."""
        return self._batch.context if self._batch is not None else self.model.max_positions

    @property
    def batch(self) -> BatchDecoder | None:
        """The continuous-batching driver, when :meth:`enable_batching` turned it on."""
        return self._batch

    def reset(self) -> None:
        """Forget the cached conversation prefix (the next call prefills from scratch)."""
        self._cached_tokens = []
        self._end_logits = None

    # ------------------------------------------------------------------ generation

    def generate(self, messages_or_prompt: list[Message] | str, settings: GenerationSettings | None = None,
                 cancel: CancelToken | None = None, started_at: float | None = None, *,
                 tools: list[dict[str, Any]] | None = None, logprobs: int | None = None,
                 constraint: TokenConstraint | None = None) -> Iterator[GenerationEvent]:
        """Stream events for one answer. Raises :class:`ContextOverflowError` here, before any work.

        ``started_at`` is the ``time.perf_counter()`` moment the user asked (the app's Send): the
        time to first token counts from there, so the waiting before this call (a busy worker,
        counting tokens) is included; without it, it counts from this call. Either way it covers
        tokenization and prefill up to the first sampled token.

        ``tools`` go to the chat template. ``logprobs=k`` (0..20) adds a :class:`TokenEvent` per generated
        token (not for the EOS that ends the answer) before the text it produces, with the ``k`` most likely
        alternatives. ``constraint`` (a :class:`runtime.constrained.TokenConstraint`) masks each step's logits
        to its allowed tokens before sampling and is advanced with each sampled token; when it is finished
        the answer ends with finish reason "stop". Either one runs the eager decode loop.
        """
        if self.model is None:
            raise TernaryError("the engine was closed")
        t0 = time.perf_counter()
        origin = started_at if started_at is not None and started_at <= t0 else t0
        if settings is not None:
            validate_generation_settings(settings)  # the same ranges as the app and the CLI
        hooks = _hooks(logprobs, constraint)
        s = self.resolve_settings(settings)
        return self._start(self.encode_prompt(messages_or_prompt, s, tools=tools), s, cancel, origin, hooks)

    def generate_tokens(self, prompt_ids: list[int], settings: GenerationSettings | None = None,
                        cancel: CancelToken | None = None, *, logprobs: int | None = None,
                        constraint: TokenConstraint | None = None) -> Iterator[GenerationEvent]:
        """:meth:`generate` for a prompt that is already token ids (``ternary bench``, API servers):
        the same loop, stops, statistics, hooks and errors, without the chat template."""
        if self.model is None:
            raise TernaryError("the engine was closed")
        origin = time.perf_counter()
        if settings is not None:
            validate_generation_settings(settings)
        hooks = _hooks(logprobs, constraint)
        vocab = self.model.vocab_size
        if any(not 0 <= int(t) < vocab for t in prompt_ids):
            raise TernaryError(f"prompt token ids must be in 0..{vocab - 1}")
        return self._start([int(t) for t in prompt_ids], self.resolve_settings(settings), cancel, origin, hooks)

    def decode_path(self) -> dict[str, Any]:
        """How decoding ran so far: CUDA graph or eager, graph replays, the fused step, fallbacks."""
        dec = self._decoder
        if dec is None:
            return {"graph": False, "graph_replays": 0, "step": "eager forward", "fallback_reason": None}
        return {"graph": bool(dec.use_graph), "graph_replays": int(dec.graph_replays),
                "step": "fused triton step" if self._fused_step else "engine forward",
                "fallback_reason": dec.fallback_reason}

    def _start(self, prompt_ids: list[int], s: GenerationSettings, cancel: CancelToken | None,
               origin: float, hooks: _Hooks | None = None) -> Iterator[GenerationEvent]:
        """Checks that must fail before any work (so the caller gets them from the call itself)."""
        ctx = self.model.max_positions
        if not prompt_ids:
            raise TernaryError("the prompt is empty")
        if len(prompt_ids) >= ctx:
            raise ContextOverflowError(
                f"the prompt is {len(prompt_ids)} tokens but the context holds {ctx} "
                f"(at least one token must be left for the answer); shorten the conversation or load with a "
                f"larger context")
        if s.max_new_tokens < 1:
            raise TernaryError("max_new_tokens must be at least 1")
        return self._generate(prompt_ids, s, cancel or CancelToken(), origin, hooks or _Hooks())

    def _generate(self, prompt_ids: list[int], s: GenerationSettings, cancel: CancelToken,
                  origin: float, hooks: _Hooks) -> Iterator[GenerationEvent]:
        if self._batch is not None:  # continuous batching (ternary serve --max-batch): the batch's driver runs it
            yield from self._batch.generate(prompt_ids, s, cancel, origin, hooks)
            return
        while self._pending_notices:
            yield NoticeEvent(self._pending_notices.pop(0))
        model, dev = self.model, self.device
        ctx = model.max_positions
        stats = GenerationStats(prompt_tokens=len(prompt_ids), device=str(dev), context_length=ctx)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        try:
            with torch.inference_mode():
                # ---- prefill (only what the cache does not already hold)
                common = _common_prefix(self._cached_tokens, prompt_ids)
                rewind = model.supports_prefix_rewind
                logits = None
                saved = self._end_logits
                if rewind and saved is not None and saved[0] == len(prompt_ids) and common >= len(prompt_ids):
                    reuse, logits = len(prompt_ids), saved[1].clone()  # same prompt again: nothing to compute
                else:
                    reuse = min(common, len(prompt_ids) - 1)
                    if not rewind and reuse < len(self._cached_tokens):
                        reuse = 0  # recurrent state (hybrid) cannot be rewound: only pure extensions reuse
                self._cached_tokens = prompt_ids[:reuse]
                stats.reused_prompt_tokens = reuse
                chunk = self._prefill_chunk()
                pos = reuse
                t_prefill = time.perf_counter()
                while pos < len(prompt_ids) and not cancel.cancelled:
                    end = min(pos + chunk, len(prompt_ids))
                    try:
                        logits = self._forward(prompt_ids[pos:end], pos)
                    except torch.OutOfMemoryError:
                        if chunk <= 16:
                            raise
                        torch.cuda.empty_cache()
                        chunk //= 4
                        yield NoticeEvent(f"Out of GPU memory during prefill; retrying in chunks of {chunk} tokens.")
                        continue
                    self._cached_tokens.extend(prompt_ids[pos:end])
                    pos = end
                    if pos == len(prompt_ids):
                        self._end_logits = (pos, logits[-1:].clone())
                if self.device.type == "cuda":  # graph replays return at once: time the GPU work itself
                    torch.cuda.synchronize(self.device)
                prefill_s = time.perf_counter() - t_prefill
                computed = pos - reuse
                stats.prefill_tok_s = computed / prefill_s if computed and prefill_s > 0 else 0.0

                # ---- decode: a stream of token ids; stopping = not asking for the next one
                stream: Iterator[int] | None = None
                if pos == len(prompt_ids) and logits is not None:  # else: cancelled during prefill
                    # the first token needs no cache slot; each further one is fed at the next position
                    further = min(s.max_new_tokens - 1, ctx - len(prompt_ids))
                    stream = self._token_stream(logits, prompt_ids, s, further, hooks)
                answer = Answer(self.tokenizer, prompt_ids, s, stats, origin)
                yield from answer.run(stream, cancel, hooks, self._token_event, self._resume_after_oom(prompt_ids, s, hooks))
                if not answer.exhausted and self.graph_decode and not model.supports_prefix_rewind:
                    # the graph decoder runs one step ahead: a recurrent (DeltaNet) state has already
                    # taken a token past _cached_tokens and cannot be rewound, so nothing is reusable
                    self._cached_tokens = []
                    self._end_logits = None
                if self._decoder is not None and self._decoder.fallback_reason and not self._notified_fallback:
                    self._notified_fallback = True
                    yield NoticeEvent(self._decoder.fallback_reason)
                yield from answer.flush()
        except torch.OutOfMemoryError as exc:
            self._cached_tokens = []
            self._end_logits = None
            raise OutOfMemoryError(
                f"out of {dev.type.upper()} memory while generating; load with a smaller context") from exc
        except GeneratorExit:
            if not model.supports_prefix_rewind:
                self._cached_tokens = []
                self._end_logits = None  # the recurrent state may be ahead of the listed tokens
            raise  # the caller stopped iterating; _cached_tokens only ever lists fully written positions
        except BaseException:
            self._cached_tokens = []
            self._end_logits = None  # be conservative after a failure inside a forward pass
            raise
        yield answer.done(peak_memory_bytes(dev))

    def _resume_after_oom(self, prompt_ids: list[int], s: GenerationSettings,
                          hooks: _Hooks) -> Callable[[list[int], int], tuple[Iterator[int], int] | None]:
        """For :meth:`_Answer.run`: after an out-of-memory error mid-answer, halve the context, rebuild the cache
        from the conversation so far and return ``(a stream that continues the answer, the new context)``;
        ``None`` when the context cannot shrink further."""
        def resume(generated: list[int], ctx: int) -> tuple[Iterator[int], int] | None:
            seq = prompt_ids + generated
            new_ctx = ctx // 2 // CTX_ALIGN * CTX_ALIGN
            if new_ctx <= len(seq):
                return None
            return self._resume_with_context(seq, s, new_ctx, len(generated), hooks), new_ctx
        return resume

    def _resume_with_context(self, seq: list[int], s: GenerationSettings, new_ctx: int,
                             done: int, hooks: _Hooks) -> Iterator[int]:
        """After an OOM: reallocate the cache for ``new_ctx`` tokens, prefill ``seq`` again, and
        return a token stream that continues the answer (``done`` tokens of it already exist)."""
        model = self.model
        self._cached_tokens = []
        self._end_logits = None
        self._decoder = None  # its step and graphs hold the old cache buffers: rebuilt on next use
        self._cpu_step, self._cpu_step_built = None, False
        if self.device.type == "cuda":
            from runtime.prefill import release_graphs

            release_graphs(model)  # same for the prefill graphs (and their memory pool)
        model.setup_cache(1)  # release the big cache before allocating the smaller one
        _release_memory(self.device)
        model.setup_cache(new_ctx)
        self.info.context_length = new_ctx
        logits = None
        chunk = self._prefill_chunk()
        for start in range(0, len(seq), chunk):
            part = seq[start:start + chunk]
            logits = self._forward(part, start)
            self._cached_tokens.extend(part)
        further = min(s.max_new_tokens - done - 1, new_ctx - len(seq))
        return self._token_stream(logits, seq, s, max(0, further), hooks)

    def _token_stream(self, logits: torch.Tensor, prompt_ids: list[int], s: GenerationSettings,
                      further: int, hooks: _Hooks) -> Iterator[int]:
        """Sampled token ids: the first from the prefill logits, then up to ``further`` more.

        Asking for the next token runs the forward pass of the previous one (writing its K/V), so
        a consumer that stops asking never computes a token it does not want. With logprobs requested,
        ``hooks.last`` holds the yielded token's; a constraint is advanced before the token is yielded.
        """
        if self.graph_decode and hooks.logprobs is None and hooks.constraint is None:
            yield from self._graph_token_stream(logits, prompt_ids, s, further)
            return
        sampler = TokenSampler(self.model.vocab_size, self.device)
        sampler.configure(s, prompt_ids)
        eos = set() if s.ignore_eos else self.tokenizer.eos_token_ids

        def pick(row: torch.Tensor) -> int:
            tok, hooks.last = pick_token(sampler, row, hooks.constraint, hooks.logprobs, eos)
            return tok

        tok = pick(logits[-1])
        yield tok
        pos = len(prompt_ids)
        with _cpu_kernel_threads(self.device, self.info.backend):
            for _ in range(further):
                row = self._forward([tok], pos)[-1]
                self._cached_tokens.append(tok)
                pos += 1
                tok = pick(row)
                yield tok

    def _cpu_decode_step(self) -> CpuStep | None:
        """``runtime.kernels.cpu.decode_step``'s step for this model: one token, or a prompt chunk through
        ``.prompt`` (the same K/V writes and logits as ``model.forward``, faster), built once per model and
        cache; ``None``: use the forward."""
        if not self._cpu_step_built:
            self._cpu_step_built = True
            try:
                from runtime.kernels.cpu.decode_step import cpu_decode_step
            except ImportError:
                cpu_decode_step = None
            self._cpu_step = cpu_decode_step(self.model) if cpu_decode_step is not None else None
        return self._cpu_step

    def _token_event(self, tok: int, info: tuple[float, list[tuple[int, float]]]) -> TokenEvent:
        logprob, top = info
        token_bytes = self.tokenizer.token_bytes
        return TokenEvent(tok, token_bytes(tok), logprob, [(i, token_bytes(i), v) for i, v in top])

    def _graph_token_stream(self, logits: torch.Tensor, prompt_ids: list[int], s: GenerationSettings,
                            further: int) -> Iterator[int]:
        """Same contract through :class:`runtime.gpu_decode.GraphDecoder` (one step in flight)."""
        if self._decoder is None:
            from runtime.gpu_decode import graph_decoder_for

            model = self.model
            fused = model.decode_step()
            self._fused_step = fused is not None
            step = fused or (lambda tok, pos: model(tok, pos)[-1])
            self._decoder = graph_decoder_for(model, step, self.device)  # recurrent state: warm-up keeps it
        dec = self._decoder
        dec.configure(s, prompt_ids)
        prev = dec.sample_first(logits[-1])
        yield prev
        for tok in dec.tokens(prev, len(prompt_ids), further):
            self._cached_tokens.append(prev)
            prev = tok
            yield tok

    def _prefill_chunk(self) -> int:
        """Tokens per prefill forward: the plan's (the planner shrinks it only when the default chunk
        cannot reach the context), never more than :data:`PREFILL_CHUNK`."""
        planned = int((self.info.plan or {}).get("prefill_chunk") or PREFILL_CHUNK)
        return max(1, min(PREFILL_CHUNK, planned))

    def _forward(self, tokens: list[int], start: int) -> torch.Tensor:
        """Run ``tokens`` at positions ``start..``; return the last position's logits ``[1, vocab]``.

        With CUDA graphs on (``graph_decode``) a prompt chunk goes through the model's shared
        :class:`runtime.prefill.GraphPrefill` (padded, graph-captured; it falls back to this eager
        forward by itself for models it cannot capture and re-captures after ``setup_cache``). On the CPU
        one token or a prompt chunk goes through ``runtime.kernels.cpu.decode_step`` when it supports
        the model.
        """
        dev = self.device
        if len(tokens) > 1 and self.graph_decode and dev.type == "cuda":
            from runtime.prefill import graph_prefill_runner

            return graph_prefill_runner(self.model, self._prefill_chunk())(tokens, start)
        ids = torch.tensor(tokens, dtype=torch.long, device=dev)
        pos = torch.arange(start, start + len(tokens), dtype=torch.long, device=dev)
        step = self._cpu_decode_step() if dev.type == "cpu" else None  # same K/V writes and logits, faster
        if step is not None and len(tokens) == 1:
            return step(ids, pos).reshape(1, -1)
        with _cpu_kernel_threads(dev, self.info.backend):
            if step is not None:
                return step.prompt(ids, pos).reshape(1, -1)
            return self.model(ids, pos, kv_len=start + len(tokens), last_only=True)

    # ------------------------------------------------------------------ memory

    def memory_stats(self) -> MemoryStats:
        import psutil

        vm = psutil.virtual_memory()
        model = self.model
        plan = self.info.plan or {}
        st = MemoryStats(
            device=str(self.device),
            context_length=model.max_positions if model is not None else 0,
            kv_cache_bytes=model.cache.nbytes if model is not None else 0,
            weight_bytes=self.info.weight_bytes,
            cached_tokens=len(self._cached_tokens),
            ram_process_bytes=int(psutil.Process().memory_info().rss),
            ram_peak_bytes=process_peak_rss_bytes(),
            ram_total_bytes=int(vm.total),
            ram_available_bytes=int(vm.available),
            layers_on_gpu=self.config.num_layers if self.device.type == "cuda" else 0,
            layers_on_cpu=0 if self.device.type == "cuda" else self.config.num_layers,
        )
        if plan:
            st.layers_on_gpu = int(plan.get("layers_on_gpu", st.layers_on_gpu)) if self.device.type == "cuda" \
                else st.layers_on_gpu
        if self.device.type == "cuda":
            idx = self.device.index or 0
            st.device_allocated_bytes = int(torch.cuda.memory_allocated(idx))
            st.device_reserved_bytes = int(torch.cuda.memory_reserved(idx))
            st.device_peak_bytes = int(torch.cuda.max_memory_allocated(idx))
            free, total = torch.cuda.mem_get_info(idx)
            st.device_total_bytes = int(total)
            st.device_used_bytes = int(total - free)
            try:
                from runtime.devices import device_used_bytes

                nvml = device_used_bytes(idx)
                if nvml is not None:
                    st.device_used_bytes = int(nvml)
            except ImportError:
                pass
        return st


# ---------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _cpu_kernel_threads(dev: torch.device, backend: str) -> Iterator[None]:
    """CPU forward passes on the C kernels: torch's small ops (norms, RoPE, attention, SiLU, sampling)
    on one thread, the ternary matmuls on all of torch's threads.

    Every torch op ends at an OpenMP barrier, after which the idle OpenMP thread spins on the core
    the matmul kernels need. Measured on the 2-core machine (1.7B shapes): decode 12.6-14.2 ->
    20.3-21.6 tok/s (a busy machine); a 128-token prefill 66-83 -> 103-128 tok/s (quiet; the
    prompt's SDPA and SiLU on one thread cost less than the stolen core). torch's thread count is
    per calling thread under OpenMP, and restored at the end. Re-entrant (a prefill inside the
    decode loop, after an out-of-memory retry, keeps the outer setting); a backend that is not the
    C kernels (torch does its matmuls) keeps torch's threads."""
    if dev.type != "cpu" or not backend.startswith("cpu_ternary"):
        yield
        return
    from runtime.kernels.cpu import ternary as cpu_ternary

    if cpu_ternary.kernel_threads_set():
        yield
        return
    n = torch.get_num_threads()
    cpu_ternary.set_kernel_threads(n)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
        cpu_ternary.set_kernel_threads(0)


@dataclass
class _Hooks:
    """A generation's token-level requests: ``logprobs`` (``None``: no :class:`TokenEvent`), a constraint,
    and the last sampled token's ``(logprob, [(id, logprob), ...])`` the token stream leaves for the loop."""

    logprobs: int | None = None
    constraint: TokenConstraint | None = None
    last: tuple[float, list[tuple[int, float]]] | None = None


def _hooks(logprobs: Any, constraint: Any) -> _Hooks:
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise InvalidSettingError(f"logprobs must be a whole number from 0 to {MAX_TOP_LOGPROBS} (the number of "
                                  f"alternatives per token), or None; got {logprobs!r}", "logprobs")
    if constraint is not None and not all(callable(getattr(constraint, name, None))
                                          for name in ("allowed_tokens", "advance", "is_finished")):
        raise TernaryError("constraint must have allowed_tokens(), advance(token_id) and is_finished()")
    return _Hooks(logprobs, constraint)


def _read_model(path: Path) -> ModelData:
    from runtime.formats.loader import load_model

    return load_model(path)


def _model_class(arch: str) -> Any:
    """The forward-pass class for an architecture, from its ArchSpec (imported only when needed)."""
    return get_arch(arch).load_model_class()


def _needs_placement(plan: Any) -> bool:
    """Anything in host memory (layers, the embedding, the LM head, mapped ones included)."""
    return bool(plan.cpu_layers) or plan.embedding_device == "cpu" or plan.lm_head_device == "cpu"


def _release_memory(dev: torch.device) -> None:
    """Give back what a failed load allocated before trying a smaller plan."""
    import gc

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _smaller_plan(data: ModelData, plan: Any, ctx: int, can_map: bool = True) -> tuple[Any, int]:
    """The planner's next smaller plan after an out-of-memory error: a shorter context, else more offload.

    The engine may run with less context than the plan allows (the CPU cap), so plans are asked for
    until one is actually smaller than what failed.
    """
    from runtime import planner

    cpu_layers = len(plan.cpu_layers)
    kw = {} if can_map else {"mapped": False}
    for _ in range(16):
        plan = planner.fallback_plan(data, plan, **kw)
        if plan.context_length < ctx or len(plan.cpu_layers) > cpu_layers:
            return plan, min(int(plan.context_length), ctx)
    raise OutOfMemoryError(f"out of memory loading the model, and no smaller plan than {ctx} tokens of context exists")


def _choose_context(data: ModelData, dev: torch.device, requested: int | None, max_vram: int | None,
                    kv_dtype: torch.dtype, offload: str = "auto", can_map: bool = True) -> tuple[int, Any]:
    """(context length, the planner's Plan). On the CPU the planner's context is capped further."""
    from runtime import planner

    cfg = data.config
    model_max = cfg.max_position_embeddings
    if requested is not None:
        if requested < 2:
            raise TernaryError(f"context length must be at least 2 tokens, got {requested}")
        if requested > model_max:
            raise TernaryError(f"context length {requested} exceeds the model's maximum of {model_max}")
    kv_name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8"}.get(kv_dtype, "fp16")
    kw: dict[str, Any] = {} if can_map else {"mapped": False}
    try:
        plan = planner.plan_for_this_machine(data, device=str(dev), max_vram=max_vram, ctx_cap=requested,
                                             kv_dtype=kv_name, offload_mode=None if offload == "auto" else offload,
                                             **kw)
    except ValueError as exc:  # e.g. mapped offload forced on a GPU that cannot read host memory
        raise TernaryError(str(exc)) from exc
    planned = int(plan.context_length)
    if requested is not None:
        if dev.type == "cuda" and planned < requested:
            raise OutOfMemoryError(f"a context of {requested} tokens does not fit on {dev}; at most {planned} does")
        return requested, plan
    ctx = min(planned, model_max)
    if dev.type == "cpu":
        import psutil

        kv_bytes = (planner.kv_bytes_per_token(cfg, "int8") if kv_dtype == torch.int8  # scales included
                    else cfg.kv_bytes_per_token(torch.tensor([], dtype=kv_dtype).element_size()))
        ram_cap = int(psutil.virtual_memory().available * CPU_KV_RAM_FRACTION) // max(1, kv_bytes)
        ctx = min(ctx, CPU_DEFAULT_MAX_CONTEXT, ram_cap)
        ctx = max(CTX_ALIGN, ctx // CTX_ALIGN * CTX_ALIGN) if ctx >= CTX_ALIGN else ctx
        ctx = min(ctx, model_max)
    return ctx, plan
