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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationStats:
    """Honest numbers for one generation. ``ttft_s`` includes tokenization and prefill."""

    prompt_tokens: int = 0
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


GenerationEvent = TextEvent | DoneEvent | NoticeEvent


class CancelToken:
    """Thread-safe cancellation flag checked by the engine once per token."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}
