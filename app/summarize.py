"""Map-reduce summarization of a document of any length over the engine.

Why map-reduce: a dropped document is often far longer than the context. Peers either inline it
(and the runtime silently truncates: the Ollama complaints) or only retrieve a few chunks. Here
the text is cut by *tokens* into chunks that fit ``context - prompt overhead - answer budget``,
each chunk is summarized ("map"), and the partial summaries are combined ("reduce", repeated
in groups while they do not fit one prompt). The result says exactly how much of the document
was read: all of it, or — after Cancel — the chunks that were done.

Runs in the worker thread that owns the engine; ``progress`` and ``cancel`` make it interactive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationSettings

MAP_INSTRUCTION = ("Summarize the following part {index} of {total} of the document \"{name}\". "
                   "Keep names, numbers and conclusions. Write only the summary.")
REDUCE_INSTRUCTION = ("Below are summaries of consecutive parts of the document \"{name}\". Combine them into "
                      "one coherent summary with the main points. Write only the summary.")
SINGLE_INSTRUCTION = "Summarize the document \"{name}\". Keep names, numbers and conclusions. Write only the summary."
SAFETY_TOKENS = 16  # template/tokenization slack between the estimate and the real prompt


@dataclass
class SummaryProgress:
    stage: str  # "map" | "reduce"
    done: int  # steps finished
    total: int  # steps planned (reduce steps are estimated until the map stage ends)
    chunk_tokens: int = 0


@dataclass
class SummaryResult:
    summary: str
    chunks: int  # number of chunks the document was cut into
    chunks_used: int  # chunks whose content went into the summary
    total_chars: int
    used_chars: int
    total_tokens: int
    used_tokens: int
    cancelled: bool = False
    chunk_summaries: list[str] = field(default_factory=list)

    @property
    def fraction_used(self) -> float:
        return self.used_chars / self.total_chars if self.total_chars else 1.0


class Summarizer:
    """Summarizes text with an engine that follows docs/engine.md (generate, count_tokens, info)."""

    def __init__(self, engine: Any, settings: GenerationSettings | None = None, answer_tokens: int = 384,
                 context_length: int | None = None) -> None:
        self.engine = engine
        base = settings or GenerationSettings()
        # Summaries need no chain of thought; it would eat the answer budget.
        self.settings = GenerationSettings(**{**base.to_dict(), "max_new_tokens": answer_tokens,
                                              "enable_thinking": False, "stop": list(base.stop)})
        self.answer_tokens = answer_tokens
        self.context_length = int(context_length or engine.info.context_length)

    # -- token budget --------------------------------------------------------------------------
    def _messages(self, instruction: str, body: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{instruction}\n\n---\n{body}\n---"}]

    def chunk_budget(self, instruction: str) -> int:
        """Tokens of document text that fit one prompt next to the instruction and the answer."""
        overhead = self.engine.count_tokens(self._messages(instruction, ""), self.settings)
        budget = self.context_length - overhead - self.answer_tokens - SAFETY_TOKENS
        if budget < 64:
            raise ContextOverflowError(
                f"The context ({self.context_length} tokens) is too small to summarize: the instructions and "
                f"a {self.answer_tokens}-token answer leave only {max(budget, 0)} tokens for text. "
                "Load the model with a longer context.")
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

    def _fit_groups(self, groups: list[list[str]], instruction: str) -> list[list[str]]:
        """Split any group whose real prompt (labels and template included) would not fit."""
        out: list[list[str]] = []
        for g in groups:
            prompt = self.engine.count_tokens(self._messages(instruction, _reduce_body(g)), self.settings)
            if len(g) > 1 and prompt + self.answer_tokens > self.context_length:
                half = len(g) // 2
                out += self._fit_groups([g[:half], g[half:]], instruction)
            else:
                out.append(g)
        return out

    # -- running -------------------------------------------------------------------------------
    def _generate(self, instruction: str, body: str, cancel: CancelToken | None) -> tuple[str, bool]:
        done: DoneEvent | None = None
        for event in self.engine.generate(self._messages(instruction, body), self.settings, cancel=cancel):
            if isinstance(event, DoneEvent):
                done = event
        if done is None:
            return "", True
        return done.text.strip(), done.stats.finish_reason == "cancelled"

    def summarize(self, text: str, name: str = "document",
                  progress: Callable[[SummaryProgress], None] | None = None,
                  cancel: CancelToken | None = None) -> SummaryResult:
        total_chars = len(text)
        map_instruction = MAP_INSTRUCTION.format(index=999, total=999, name=name)
        budget = self.chunk_budget(map_instruction)
        total_tokens = self._tokens(text)
        if total_tokens <= budget:
            chunks = [text]
        else:
            chunks = self.split(text, budget)
        planned = len(chunks) + (_reduce_steps_estimate(len(chunks)) if len(chunks) > 1 else 0)
        report = progress or (lambda p: None)
        report(SummaryProgress("map", 0, planned, budget))

        summaries: list[str] = []
        used_chars = used_tokens = 0
        for i, chunk in enumerate(chunks):
            if cancel is not None and cancel.cancelled:
                break
            instruction = (SINGLE_INSTRUCTION.format(name=name) if len(chunks) == 1
                           else MAP_INSTRUCTION.format(index=i + 1, total=len(chunks), name=name))
            out, was_cancelled = self._generate(instruction, chunk, cancel)
            if was_cancelled:
                break
            summaries.append(out)
            used_chars += len(chunk)
            used_tokens += self._tokens(chunk)
            report(SummaryProgress("map", i + 1, planned, budget))
        cancelled = len(summaries) < len(chunks)
        result = SummaryResult("", len(chunks), len(summaries), total_chars, used_chars, total_tokens,
                               used_tokens, cancelled, list(summaries))
        if not summaries:
            return result
        if len(summaries) == 1:
            result.summary = summaries[0]
            return result

        step = len(chunks)
        reduce_instruction = REDUCE_INSTRUCTION.format(name=name)
        reduce_budget = self.chunk_budget(reduce_instruction)
        level = summaries
        while len(level) > 1:
            groups = self._fit_groups(_group(level, reduce_budget, self._tokens), reduce_instruction)
            if len(groups) == len(level):  # no two summaries fit together: pair them and let _fit_groups cut
                groups = self._fit_groups([level[i:i + 2] for i in range(0, len(level), 2)], reduce_instruction)
                if len(groups) == len(level):
                    raise ContextOverflowError(
                        "The partial summaries are too long to combine in this context; load the model with a "
                        "longer context or lower 'max new tokens'.")
            nxt = []
            for g in groups:
                if cancel is not None and cancel.cancelled:
                    break
                out, was_cancelled = self._generate(reduce_instruction, _reduce_body(g), cancel)
                if was_cancelled:
                    break
                nxt.append(out)
                step += 1
                report(SummaryProgress("reduce", step, max(planned, step + len(groups) - len(nxt)), budget))
            if len(nxt) < len(groups):  # cancelled during reduce: keep the partial summaries joined
                result.cancelled = True
                result.summary = "\n\n".join(level)
                return result
            level = nxt
        result.summary = level[0]
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
    for k, s in enumerate(items):
        n = count(f"[Part summary {k + 1}]\n{s}\n\n")
        if current and used + n > budget:
            groups.append(current)
            current, used = [], 0
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
