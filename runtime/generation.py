"""Types of the engine API: generation settings, streamed events and final statistics.

Kept apart from :mod:`runtime.engine` so the GUI, the CLI and a future server can import them
without loading torch models. See ``docs/engine.md``.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass
class GenerationSettings:
    """Sampling and stopping controls. ``temperature == 0`` means greedy decoding.

    ``None`` means "use the model file's default" (PrismML small models: temp 0.5, top-p 0.85,
    top-k 20); :meth:`runtime.engine.Engine.default_settings` gives the resolved values.
    """

    temperature: float | None = None
    top_k: int | None = None  # 0 = off
    top_p: float | None = None  # 1.0 = off
    min_p: float | None = None  # 0.0 = off
    repetition_penalty: float | None = None  # 1.0 = off, HF semantics
    presence_penalty: float | None = None  # 0.0 = off, OpenAI semantics
    frequency_penalty: float | None = None  # 0.0 = off
    max_new_tokens: int = 512
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    enable_thinking: bool | None = None  # None = model default
    reasoning_effort: str | None = None  # models whose template accepts it (Bonsai 2)
    ignore_eos: bool = False  # keep going past end-of-sequence tokens (benchmarks, tests)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationStats:
    """Honest numbers for one generation.

    ``ttft_s`` is wall time from the request (``Engine.generate``'s ``started_at``, else the call)
    to the first sampled token: tokenization and prefill included. ``total_s`` counts from the same
    moment to the end."""

    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0  # prompt tokens whose K/V were kept from the previous call (not prefilled)
    generated_tokens: int = 0
    ttft_s: float = 0.0
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0
    total_s: float = 0.0
    peak_memory_bytes: int = 0  # device peak (torch.cuda.max_memory_allocated) or process RSS peak on CPU
    device: str = "cpu"
    context_length: int = 0
    token_ids: list[int] = field(default_factory=list)
    finish_reason: Literal["stop", "length", "stop_string", "cancelled", "error"] = "stop"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TextEvent:
    """A piece of decoded text. Never ends in half a UTF-8 character."""

    text: str
    channel: Literal["answer", "thinking"] = "answer"


@dataclass
class DoneEvent:
    """The last event of every generation, also after cancellation."""

    stats: GenerationStats
    text: str = ""  # full answer text (thinking excluded)
    thinking: str = ""


@dataclass
class NoticeEvent:
    """Something the user should know that is not text: e.g. an OOM fallback that shrank context."""

    message: str


@dataclass
class TokenEvent:
    """One sampled token with its log-probabilities; emitted only when logprobs were requested
    (``Engine.generate(..., logprobs=k)``), before the :class:`TextEvent` its text produces."""

    token_id: int
    token_bytes: bytes  # the token's own bytes (may be part of a UTF-8 character)
    # log_softmax of the model's raw logits (temperature 1, no penalties, no top-k/p, no constraint mask),
    # as vLLM reports by default
    logprob: float
    top: list[tuple[int, bytes, float]] = field(default_factory=list)  # k best (id, bytes, logprob), best first


GenerationEvent = TextEvent | DoneEvent | NoticeEvent | TokenEvent


class CancelToken:
    """Thread-safe cancellation flag: checked by the engine once per token, and the one type every
    long task takes (downloads and conversions read it like a ``threading.Event``: ``is_set``,
    ``set``, ``wait``)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    set = cancel

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once when cancelled (a retry back-off)."""
        return self._event.wait(timeout)


Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}


@dataclass
class ModelInfo:
    """What a loaded engine runs: shown by the GUI and ``ternary generate --json``."""

    name: str
    arch: str
    device: str
    context_length: int  # tokens the KV cache holds (prompt + output)
    max_context: int  # the model's own maximum
    parameter_count: int
    weight_bytes: int  # prepared weights resident for inference (not the file size)
    plan: dict[str, Any] = field(default_factory=dict)  # the planner's placement, when one ran
    supports_thinking: bool = False
    backend: str = ""  # ternary matmul backend ("reference", "cpu_int4", "triton", ...)
    dtype: str = ""  # activation dtype
    source_format: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MemoryStats:
    """Memory right now. Device figures are ``None`` on the CPU."""

    device: str
    context_length: int
    kv_cache_bytes: int
    weight_bytes: int
    cached_tokens: int  # prompt/answer tokens whose K/V the engine keeps for the next turn
    ram_process_bytes: int  # this process's resident set
    ram_peak_bytes: int  # this process's peak resident set so far
    ram_total_bytes: int
    ram_available_bytes: int
    device_allocated_bytes: int | None = None  # torch.cuda.memory_allocated
    device_reserved_bytes: int | None = None  # held by torch's caching allocator
    device_peak_bytes: int | None = None  # torch.cuda.max_memory_allocated
    device_used_bytes: int | None = None  # whole device, every process (driver / NVML)
    device_total_bytes: int | None = None
    layers_on_gpu: int = 0
    layers_on_cpu: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
