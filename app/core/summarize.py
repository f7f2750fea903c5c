"""Map-reduce summarization of a document of any length over the engine.

Why map-reduce: a dropped document is often far longer than the context. Peers either inline it
(and the runtime silently truncates: the Ollama complaints) or only retrieve a few chunks. Here
the text is cut by *tokens* into chunks that fit ``context - prompt overhead - answer budget``,
each chunk is summarized ("map"), and the partial summaries are combined ("reduce", repeated
in groups while they do not fit one prompt; a group that does not fit is combined in smaller
groups, down to pairs). The result says exactly how much of the document was read.

Why the work is never thrown away: a summary of a long document takes minutes. Once the first
part is being summarized, every way of stopping (Cancel, an engine error, partial summaries that
cannot be combined in this context) returns a :class:`SummaryResult` with the partial summaries
done so far and ``chunks_used`` of ``chunks``; only a context too small to start raises.

Runs in the worker thread that owns the engine; ``progress``, ``on_step``, ``on_text`` and
``cancel`` make it interactive (progress with time left, streamed text, speed per generation).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationSettings, TextEvent

MAP_INSTRUCTION = ("Summarize the following part {index} of {total} of the document \"{name}\". "
                   "Keep names, numbers and conclusions. Write only the summary.")
REDUCE_INSTRUCTION = ("Below are summaries of consecutive parts of the document \"{name}\". Combine them into "
                      "one coherent summary with the main points. Write only the summary.")
SINGLE_INSTRUCTION = "Summarize the document \"{name}\". Keep names, numbers and conclusions. Write only the summary."
SAFETY_TOKENS = 16  # template/tokenization slack between the estimate and the real prompt
MIN_TEXT_TOKENS = 64  # below this a part is a sentence or two: too little to summarize

# The answer budget of every partial summary, from the context alone (never the chat's "Max new
# tokens": tied to it, 3000 on a 4,096-token context left ~1,000 tokens per part — 36 parts instead
# of 11 — and partial summaries too long to combine). One eighth: a part fills the rest of the
# context, so each map step compresses ~6:1 and one reduce prompt holds ~6 partial summaries.
ANSWER_CONTEXT_DIVISOR = 8
MIN_ANSWER_TOKENS = 48  # shorter summaries drop the names and numbers the instruction asks for
MAX_ANSWER_TOKENS = 1024  # longer is no longer a summary, and slows every reduce step on long contexts


def answer_budget(context_length: int) -> int:
    """Tokens each partial summary may use: an eighth of the context, at least 48, at most 1024."""
    return max(MIN_ANSWER_TOKENS, min(MAX_ANSWER_TOKENS, int(context_length) // ANSWER_CONTEXT_DIVISOR))


class SummaryError(ContextOverflowError):
    """A summarizing problem with a ``code`` and ``params``, so the app can say it in the user's language.

    Codes: ``context_too_small`` (context, answer, room) and ``part_too_long`` (tokens, room).
    """

    def __init__(self, code: str, message: str, **params: int) -> None:
        super().__init__(message)
        self.code = code
        self.params = params


@dataclass
class SummaryProgress:
    stage: str  # "map" | "reduce"
    done: int  # steps finished
    total: int  # steps planned (reduce steps are estimated until the map stage ends)
    chunk_tokens: int = 0
    eta_s: float | None = None  # seconds left, from the measured speed; None until one step is measured
    elapsed_s: float = 0.0


@dataclass
class SummaryStep:
    """One generation of the summary: reported when it starts (``stats is None``) and when it ends."""

    stage: str  # "map" | "reduce"
    step: int  # 1-based number among all generations of this summary
    total: int  # generations planned (an estimate while combining)
    part: int  # map: the part's number (1-based); reduce: 0
    parts: int  # number of parts the document was cut into
    prompt_tokens: int
    text: str = ""  # the generated text, once it ended
    stats: dict[str, Any] | None = None  # the engine's GenerationStats as a dict, once it ended


@dataclass
class SummaryResult:
    summary: str  # the combined summary; "" when it was not combined (cancelled or stopped by an error)
    chunks: int  # number of chunks the document was cut into
    chunks_used: int  # chunks whose content went into the summary
    total_chars: int
    used_chars: int
    total_tokens: int
    used_tokens: int
    cancelled: bool = False
    chunk_summaries: list[str] = field(default_factory=list)
    failure: Exception | None = None  # what stopped it (the partial summaries are still here)
    answer_tokens: int = 0  # the per-part answer budget that was used
    combined: bool = False  # ``summary`` is the finished summary of every part

    @property
    def fraction_used(self) -> float:
        return self.used_chars / self.total_chars if self.total_chars else 1.0

    @property
    def complete(self) -> bool:
        """The whole document was read and combined into ``summary``."""
        return self.combined and not self.cancelled and self.failure is None

    def partial_text(self, heading: Callable[[int, int], str]) -> str:
        """The partial summaries done so far, each under ``heading(k, chunks)`` (the caller's language)."""
        if len(self.chunk_summaries) == 1 and self.chunks == 1:
            return self.chunk_summaries[0]
        return "\n\n".join(f"**{heading(k + 1, self.chunks)}**\n\n{s}" for k, s in enumerate(self.chunk_summaries))


class _Cancelled(Exception):
    """Internal: the user cancelled; unwinds to :meth:`Summarizer.summarize`."""


class _Speed:
    """Measured prefill and decode speed over the finished generations of one summary."""

    def __init__(self) -> None:
        self.prompt_tokens = self.generated_tokens = 0
        self.prefill_s = self.decode_s = 0.0
        self.steps = 0

    def add(self, prompt_tokens: int, generated_tokens: int, prefill_s: float, decode_s: float) -> None:
        self.prompt_tokens += prompt_tokens
        self.generated_tokens += generated_tokens
        self.prefill_s += max(prefill_s, 0.0)
        self.decode_s += max(decode_s, 0.0)
        self.steps += 1

    @property
    def mean_generated(self) -> float:
        return self.generated_tokens / self.steps if self.steps else 0.0

    def seconds(self, prompt_tokens: float, generated_tokens: float) -> float | None:
        """Time for that much work at the speed measured so far (None before any measurement)."""
        if not self.steps:
            return None
        prefill = prompt_tokens * self.prefill_s / self.prompt_tokens if self.prompt_tokens else 0.0
        decode = generated_tokens * self.decode_s / self.generated_tokens if self.generated_tokens else 0.0
        return prefill + decode


class Summarizer:
    """Summarizes text with an engine that follows docs/engine.md (generate, count_tokens, info)."""

    def __init__(self, engine: Any, settings: GenerationSettings | None = None, answer_tokens: int | None = None,
                 context_length: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.context_length = int(context_length or engine.info.context_length)
        # From the context, never from the chat's max_new_tokens (see answer_budget).
        self.answer_tokens = int(answer_tokens or answer_budget(self.context_length))
        base = settings or GenerationSettings()
        # Summaries need no chain of thought; it would eat the answer budget.
        self.settings = GenerationSettings(**{**base.to_dict(), "max_new_tokens": self.answer_tokens,
                                              "enable_thinking": False, "stop": list(base.stop)})
        self._clock = clock
        self._speed = _Speed()

    # -- token budget --------------------------------------------------------------------------
    def _messages(self, instruction: str, body: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{instruction}\n\n---\n{body}\n---"}]

    def _room(self, instruction: str) -> int:
        overhead = self.engine.count_tokens(self._messages(instruction, ""), self.settings)
        return self.context_length - overhead - self.answer_tokens - SAFETY_TOKENS

    def chunk_budget(self, instruction: str, minimum: int = MIN_TEXT_TOKENS) -> int:
        """Tokens of text that fit one prompt next to the instruction and the answer."""
        budget = self._room(instruction)
        if budget < minimum:
            room = max(budget, 0)
            raise SummaryError(
                "context_too_small",
                f"The context ({self.context_length} tokens) is too small to summarize: the instructions and "
                f"a {self.answer_tokens}-token answer leave only {room} tokens for text. "
                "Load the model with a longer context.",
                context=self.context_length, answer=self.answer_tokens, room=room)
        return budget

    def _tokens(self, text: str) -> int:
        return int(self.engine.count_tokens(text))

    def split(self, text: str, budget: int) -> list[str]:
        """Cut ``text`` into consecutive pieces of at most ``budget`` tokens, at paragraph or
        sentence boundaries where possible; no character is dropped."""
        pieces = _atoms(text, budget, self._tokens)
        chunks: list[str] = []
        current, current_tokens = "", 0
        for piece, n in pieces:
            if current and current_tokens + n > budget:
                chunks.append(current)
                current, current_tokens = "", 0
            current += piece
            current_tokens += n
        if current.strip():
            chunks.append(current)
        # Token counts of concatenations can differ slightly from sums; check and re-split.
        checked: list[str] = []
        for c in chunks:
            checked += self._fit(c, budget)
        return checked

    def _fit(self, chunk: str, budget: int) -> list[str]:
        if self._tokens(chunk) <= budget or len(chunk) < 2:
            return [chunk]
        mid = len(chunk) // 2
        cut = chunk.rfind("\n", 0, mid)
        cut = cut if cut > 0 else mid
        return self._fit(chunk[:cut], budget) + self._fit(chunk[cut:], budget)

    def _prompt_fits(self, group: list[str], instruction: str) -> bool:
        prompt = self.engine.count_tokens(self._messages(instruction, _reduce_body(group)), self.settings)
        return prompt + self.answer_tokens <= self.context_length

    def _fit_groups(self, groups: list[list[str]], instruction: str) -> list[list[str]]:
        """Split any group whose real prompt (labels and template included) does not fit, in halves,
        down to single partial summaries; a single one that does not fit alone is an error."""
        out: list[list[str]] = []
        for g in groups:
            if self._prompt_fits(g, instruction):
                out.append(g)
            elif len(g) > 1:
                half = len(g) // 2
                out += self._fit_groups([g[:half], g[half:]], instruction)
            else:
                tokens = self._tokens(g[0])
                room = max(self._room(instruction), 0)
                raise SummaryError(
                    "part_too_long",
                    f"A partial summary ({tokens} tokens) is too long to combine in this context (room for "
                    f"{room} tokens); the partial summaries are kept uncombined. Load the model with a longer "
                    "context to combine them.", tokens=tokens, room=room)
        return out

    # -- running -------------------------------------------------------------------------------
    def _generate(self, step: SummaryStep, instruction: str, body: str, cancel: CancelToken | None,
                  on_step: Callable[[SummaryStep], None], on_text: Callable[[str], None]) -> str:
        """One generation, streamed; raises :class:`_Cancelled` when the user cancelled it."""
        if cancel is not None and cancel.cancelled:
            raise _Cancelled
        messages = self._messages(instruction, body)
        step.prompt_tokens = int(self.engine.count_tokens(messages, self.settings))
        on_step(step)
        done: DoneEvent | None = None
        pieces = 0
        t0 = self._clock()
        t_first = 0.0
        for event in self.engine.generate(messages, self.settings, cancel=cancel):
            if isinstance(event, TextEvent) and event.text and event.channel == "answer":
                if not pieces:
                    t_first = self._clock()
                pieces += 1
                on_text(event.text)
            elif isinstance(event, DoneEvent):
                done = event
        t_end = self._clock()
        stats = done.stats.to_dict() if done is not None else {"finish_reason": "cancelled"}
        stats.pop("token_ids", None)  # the gauges and the history need the numbers, not every token id
        ended = SummaryStep(step.stage, step.step, step.total, step.part, step.parts, step.prompt_tokens,
                            done.text.strip() if done is not None else "", stats)
        on_step(ended)
        if done is None or done.stats.finish_reason == "cancelled":
            raise _Cancelled
        t_first = t_first or t_end
        self._speed.add(step.prompt_tokens, int(done.stats.generated_tokens or pieces), t_first - t0, t_end - t_first)
        return ended.text

    def _eta(self, map_prompts: list[int], reduce_steps: int, reduce_prompt: float) -> float | None:
        """Seconds left: remaining prompt tokens at the measured prefill speed plus the expected
        answer tokens (the mean so far) at the measured decode speed, for every remaining step."""
        steps = len(map_prompts) + reduce_steps
        return self._speed.seconds(sum(map_prompts) + reduce_steps * reduce_prompt,
                                   steps * self._speed.mean_generated)

    def summarize(self, text: str, name: str = "document",
                  progress: Callable[[SummaryProgress], None] | None = None,
                  cancel: CancelToken | None = None,
                  on_step: Callable[[SummaryStep], None] | None = None,
                  on_text: Callable[[str], None] | None = None) -> SummaryResult:
        """Summarize ``text``; raises :class:`SummaryError` only if the context is too small to start."""
        t_start = self._clock()
        self._speed = _Speed()
        total_chars = len(text)
        map_instruction = MAP_INSTRUCTION.format(index=999, total=999, name=name)
        reduce_instruction = REDUCE_INSTRUCTION.format(name=name)
        budget = self.chunk_budget(map_instruction)
        # Any two partial summaries must fit one reduce prompt, or combining could never finish.
        label = self._tokens(_reduce_body(["", ""])) // 2 + 2
        reduce_budget = self.chunk_budget(reduce_instruction, minimum=2 * (self.answer_tokens + label))
        map_overhead = self.context_length - self.answer_tokens - SAFETY_TOKENS - budget
        reduce_overhead = self.context_length - self.answer_tokens - SAFETY_TOKENS - reduce_budget
        total_tokens = self._tokens(text)
        chunks = [text] if total_tokens <= budget else self.split(text, budget)
        chunk_tokens = [self._tokens(c) for c in chunks]
        report = progress or (lambda p: None)
        step_cb = on_step or (lambda s: None)
        text_cb = on_text or (lambda t: None)
        n = len(chunks)

        def reduce_plan(items: int) -> tuple[int, float]:
            """(reduce steps, prompt tokens of one) for ``items`` partial summaries of the mean size."""
            if items <= 1:
                return 0, 0.0
            size = max(self._speed.mean_generated, 1.0) + 8
            fan_in = max(2, int(reduce_budget // size))
            return _reduce_steps_estimate(items, fan_in), reduce_overhead + min(reduce_budget, fan_in * size)

        planned = n + _reduce_steps_estimate(n) if n > 1 else 1
        report(SummaryProgress("map", 0, planned, budget, None, 0.0))
        result = SummaryResult("", n, 0, total_chars, 0, total_tokens, 0, answer_tokens=self.answer_tokens)
        step = 0
        try:
            for i, chunk in enumerate(chunks):
                instruction = (SINGLE_INSTRUCTION.format(name=name) if n == 1
                               else MAP_INSTRUCTION.format(index=i + 1, total=n, name=name))
                out = self._generate(SummaryStep("map", step + 1, planned, i + 1, n, 0), instruction, chunk,
                                     cancel, step_cb, text_cb)
                step += 1
                result.chunk_summaries.append(out)
                result.chunks_used += 1
                result.used_chars += len(chunk)
                result.used_tokens += chunk_tokens[i]
                r_steps, r_prompt = reduce_plan(n)
                planned = n + r_steps
                eta = self._eta([t + map_overhead for t in chunk_tokens[i + 1:]], r_steps, r_prompt)
                report(SummaryProgress("map", step, planned, budget, eta, self._clock() - t_start))
            if n == 1:
                result.summary, result.combined = result.chunk_summaries[0], True
                return result
            level = list(result.chunk_summaries)
            all_single_before = False
            while len(level) > 1:
                if cancel is not None and cancel.cancelled:  # before any fitting: a cancel always keeps the work
                    raise _Cancelled
                groups = self._fit_groups(_group(level, reduce_budget, self._tokens), reduce_instruction)
                all_single = all(len(g) == 1 for g in groups)
                if all_single and all_single_before:  # condensing alone did not make any two fit together
                    raise SummaryError(
                        "part_too_long",
                        "The partial summaries stay too long to combine in this context; they are kept "
                        "uncombined. Load the model with a longer context to combine them.",
                        tokens=max(self._tokens(s) for s in level), room=max(reduce_budget, 0))
                all_single_before = all_single
                nxt: list[str] = []
                for k, g in enumerate(groups):
                    if len(g) == 1 and not all_single:
                        nxt.append(g[0])  # nothing to combine it with in this round: it goes on as it is
                        continue
                    r_steps, _ = reduce_plan(len(nxt) + len(groups) - k)
                    total = max(planned, step + 1 + (len(groups) - k - 1) + r_steps)
                    out = self._generate(SummaryStep("reduce", step + 1, total, 0, n, 0), reduce_instruction,
                                         _reduce_body(g), cancel, step_cb, text_cb)
                    step += 1
                    nxt.append(out)
                    left = sum(1 for h in groups[k + 1:] if len(h) > 1 or all_single)
                    r_steps, r_prompt = reduce_plan(len(nxt) + len(groups) - k - 1)
                    planned = max(planned, step + left + r_steps)
                    eta = self._eta([], left + r_steps, r_prompt)
                    report(SummaryProgress("reduce", step, planned, budget, eta, self._clock() - t_start))
                level = nxt
            result.summary, result.combined = level[0], True
        except _Cancelled:
            result.cancelled = True
        except Exception as exc:  # noqa: BLE001 - keep the work done; the caller shows what stopped it
            result.failure = exc
        return result


def _reduce_body(group: list[str]) -> str:
    return "\n\n".join(f"[Part summary {k + 1}]\n{s}" for k, s in enumerate(group))


def _reduce_steps_estimate(n: int, fan_in: int = 4) -> int:
    steps = 0
    while n > 1:
        n = -(-n // fan_in)
        steps += n
    return steps


def _group(items: list[str], budget: int, count: Callable[[str], int]) -> list[list[str]]:
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    for s in items:
        n = count(f"[Part summary {len(current) + 1}]\n{s}\n\n")
        if current and used + n > budget:
            groups.append(current)
            current, used = [], 0
            n = count(f"[Part summary 1]\n{s}\n\n")
        current.append(s)
        used += n
    if current:
        groups.append(current)
    return groups


_PARAGRAPH = re.compile(r"(?<=\n\n)")
_SENTENCE = re.compile(r"(?<=[.!?。！？;；])\s*")


def _atoms(text: str, budget: int, count: Callable[[str], int]) -> list[tuple[str, int]]:
    """Paragraphs (then sentences, then fixed windows) that each fit the budget, with token counts."""
    out: list[tuple[str, int]] = []
    for para in _split_keep(text, _PARAGRAPH):
        n = count(para)
        if n <= budget:
            out.append((para, n))
            continue
        for sent in _split_keep(para, _SENTENCE):
            m = count(sent)
            if m <= budget:
                out.append((sent, m))
                continue
            # one enormous "sentence" (tables, code, CJK without punctuation): fixed windows
            chars_per_token = max(1, len(sent) // max(m, 1))
            width = max(1, budget * chars_per_token * 9 // 10)
            for i in range(0, len(sent), width):
                w = sent[i:i + width]
                out.append((w, count(w)))
    return out


def _split_keep(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Split after each match, keeping every character (concatenation gives back ``text``)."""
    parts, start = [], 0
    for m in pattern.finditer(text):
        end = m.end()
        if end > start:
            parts.append(text[start:end])
            start = end
    if start < len(text):
        parts.append(text[start:])
    return parts
