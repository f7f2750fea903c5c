"""One answer's token ids turned into events: text by channel, stop strings, finish reason, statistics.

Why its own module: the engine's own decode loop and the continuous-batching driver
(:mod:`runtime.batching`) produce token ids in different ways, but what an answer *is* (where it stops,
which text is thinking, what its statistics say) must not depend on which of them ran it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from runtime.generation import (
    CancelToken,
    DoneEvent,
    GenerationEvent,
    GenerationSettings,
    GenerationStats,
    NoticeEvent,
    TextEvent,
    TokenEvent,
)
from runtime.sampling import StopStringMatcher
from runtime.tokenizer import ChannelSplitter, Tokenizer, prompt_opens_thinking

MAX_OOM_RETRIES = 3
# after an out-of-memory error: (generated so far, context) -> (a stream that goes on, new context) or None
Resume = Callable[[list[int], int], "tuple[Iterator[int], int] | None"]


def peak_memory_bytes(dev: torch.device) -> int:
    """What a generation reports as its peak: the allocator's on CUDA, the process's peak RSS elsewhere."""
    if dev.type == "cuda":
        return int(torch.cuda.max_memory_allocated(dev))
    return process_peak_rss_bytes()


def process_peak_rss_bytes() -> int:
    """Peak resident set of this process (Linux/macOS via getrusage, Windows via psutil)."""
    import psutil

    info = psutil.Process().memory_info()
    peak = int(getattr(info, "peak_wset", info.rss))
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = max(peak, int(maxrss if sys.platform == "darwin" else maxrss * 1024))
    except ImportError:
        pass
    return peak


class Answer:
    """Consumes one answer's token stream (:meth:`run`), then :meth:`flush` and :meth:`done`."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], settings: GenerationSettings,
                 stats: GenerationStats, origin: float) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.stats = stats
        self.origin = origin
        self.splitter = ChannelSplitter(tokenizer, prompt_opens_thinking(tokenizer, prompt_ids))
        self.matchers = {"answer": StopStringMatcher(settings.stop), "thinking": StopStringMatcher(settings.stop)}
        self.channel = self.splitter.channel
        self.texts: dict[str, list[str]] = {"answer": [], "thinking": []}
        self.prompt_ids = prompt_ids
        self.generated: list[int] = []
        self.finish = "length"
        self.exhausted = False  # the stream ended by itself: the context or max_new_tokens ran out
        self.decode_s, self.decode_steps = 0.0, 0

    def run(self, stream: Iterator[int] | None, cancel: CancelToken, hooks: Any,
            token_event: Callable[[int, Any], TokenEvent], resume: Resume | None = None) -> Iterator[GenerationEvent]:
        """Read ``stream`` (``None``: cancelled before the first token) until the answer ends; stopping means
        not asking for the next token. ``hooks.last`` holds each token's logprobs when asked for;
        ``resume`` continues after an out-of-memory error (the engine's single-sequence loop only)."""
        if stream is None:
            self.finish = "cancelled"
            return
        s, stats = self.settings, self.stats
        eos = self.tokenizer.eos_token_ids
        ctx = stats.context_length
        t_step = time.perf_counter()
        oom_retries = 0
        try:
            while True:
                try:
                    tok = next(stream)
                except StopIteration:
                    self.exhausted = True
                    break
                except torch.OutOfMemoryError:
                    oom_retries += 1
                    resumed = resume(self.generated, ctx) if resume is not None and oom_retries <= MAX_OOM_RETRIES \
                        else None
                    if resumed is None:
                        raise
                    stream, ctx = resumed
                    stats.context_length = ctx
                    yield NoticeEvent(f"Out of {stats.device.split(':')[0].upper()} memory while generating: the "
                                      f"context was reduced to {ctx} tokens and the answer continues.")
                    continue
                now = time.perf_counter()
                if self.generated:
                    self.decode_s += now - t_step
                    self.decode_steps += 1
                else:
                    stats.ttft_s = now - self.origin  # wall time: waiting, tokenizing and prefill included
                if tok in eos and not s.ignore_eos:
                    self.finish = "stop"
                    break
                self.generated.append(tok)
                if hooks.logprobs is not None and hooks.last is not None:
                    yield token_event(tok, hooks.last)
                stopped = False
                for piece in self.splitter.add(tok):
                    if piece.channel != self.channel:
                        yield from self._flush_channel(self.channel)
                        self.channel = piece.channel
                    m = self.matchers[piece.channel]
                    out = m.feed(piece.text)
                    if out:
                        self.texts[piece.channel].append(out)
                        yield TextEvent(out, piece.channel)  # type: ignore[arg-type]
                    if m.stopped:
                        stopped = True
                        break
                if stopped:
                    self.finish = "stop_string"
                    break
                if hooks.constraint is not None and hooks.constraint.is_finished():
                    self.finish = "stop"
                    break
                if len(self.generated) >= s.max_new_tokens:
                    self.finish = "length"
                    break
                if cancel.cancelled:
                    self.finish = "cancelled"
                    break
                t_step = time.perf_counter()
            if self.exhausted and self.finish != "cancelled":
                self.finish = "length"
                if len(self.generated) < s.max_new_tokens:
                    yield NoticeEvent(f"The context ({ctx} tokens) is full.")
        finally:
            if hasattr(stream, "close"):
                stream.close()  # type: ignore[union-attr]

    def _flush_channel(self, channel: str) -> Iterator[TextEvent]:
        tail = self.matchers[channel].flush()
        if tail:
            self.texts[channel].append(tail)
            yield TextEvent(tail, channel)  # type: ignore[arg-type]

    def flush(self) -> Iterator[TextEvent]:
        """Text still held back (a partial stop string that never completed, an open channel)."""
        if self.finish == "stop_string":
            return
        for piece in self.splitter.flush():
            out = self.matchers[piece.channel].feed(piece.text)
            if out:
                self.texts[piece.channel].append(out)
                yield TextEvent(out, piece.channel)  # type: ignore[arg-type]
        for channel in self.matchers:
            yield from self._flush_channel(channel)

    def done(self, peak_memory: int) -> DoneEvent:
        """The closing event, with the statistics filled in."""
        stats = self.stats
        stats.generated_tokens = len(self.generated)
        stats.token_ids = self.generated
        stats.finish_reason = self.finish  # type: ignore[assignment]
        stats.decode_tok_s = self.decode_steps / self.decode_s if self.decode_steps and self.decode_s > 0 else 0.0
        stats.total_s = time.perf_counter() - self.origin
        if stats.ttft_s == 0.0:
            stats.ttft_s = stats.total_s
        stats.peak_memory_bytes = peak_memory
        return DoneEvent(stats=stats, text="".join(self.texts["answer"]), thinking="".join(self.texts["thinking"]))
