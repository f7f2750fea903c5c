"""Next-token selection and stop strings.

Each logits transform is a small function with the semantics of its well-known reference, so the
tests can compare them one by one:

* repetition penalty: Hugging Face ``RepetitionPenaltyLogitsProcessor`` (over prompt + generated
  tokens, divide positive logits by the penalty, multiply negative ones);
* presence / frequency penalty: OpenAI (over generated tokens, ``logit -= presence * [count > 0]
  + frequency * count``);
* temperature, top-k, top-p, min-p: HF's ``*LogitsWarper`` classes, applied in HF's order.

``temperature == 0`` is greedy (penalties still apply, as in HF). A seed makes a run repeatable:
the same seed, prompt and settings give the same tokens.
"""

from __future__ import annotations

import secrets

import torch

from runtime.generation import GenerationSettings
from runtime.sampling_params import validate_generation_settings

NEG_INF = float("-inf")


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """HF semantics; ``seen`` is a bool mask ``[..., vocab]`` of tokens in prompt + output."""
    if penalty == 1.0:
        return logits
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def apply_presence_frequency(logits: torch.Tensor, counts: torch.Tensor, presence: float,
                             frequency: float) -> torch.Tensor:
    """OpenAI semantics; ``counts`` holds how often each token was generated so far."""
    if presence == 0.0 and frequency == 0.0:
        return logits
    c = counts.to(logits.dtype)
    return logits - presence * (c > 0).to(logits.dtype) - frequency * c


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits if temperature == 1.0 else logits / temperature


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep tokens scoring at least the k-th best (ties at the boundary are kept, as in HF)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k).values[..., -1, None]
    return logits.masked_fill(logits < kth, NEG_INF)


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Smallest set whose probability reaches ``p`` (HF: sort ascending, drop cum <= 1 - p)."""
    if p >= 1.0:
        return logits
    sorted_logits, sorted_idx = torch.sort(logits, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cum <= (1 - p)
    remove_sorted[..., -1:] = False
    remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens whose probability is below ``min_p`` times the top token's (HF semantics)."""
    if min_p <= 0.0:
        return logits
    probs = logits.softmax(dim=-1)
    remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
    remove.scatter_(-1, probs.argmax(dim=-1, keepdim=True), False)
    return logits.masked_fill(remove, NEG_INF)


class Sampler:
    """Picks tokens for one generation; remembers prompt and output for the penalties.

    ``settings`` must be resolved (no ``None`` sampling fields; see ``Engine.default_settings``).
    Values outside :data:`runtime.sampling_params.RULES` raise
    :class:`~runtime.errors.InvalidSettingError` here, before a NaN temperature reaches softmax.
    """

    def __init__(self, settings: GenerationSettings, vocab_size: int, prompt_ids: list[int],
                 device: torch.device | str = "cpu") -> None:
        validate_generation_settings(settings)
        self.s = settings
        self.vocab_size = vocab_size
        self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        ids = [i for i in prompt_ids if 0 <= i < vocab_size]
        if ids:
            self.seen[torch.tensor(ids, device=device)] = True
        self.counts = torch.zeros(vocab_size, dtype=torch.int32, device=device)
        self.seed = settings.seed if settings.seed is not None else secrets.randbits(63)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(self.seed)

    def observe(self, token_id: int) -> None:
        """Record a generated token (for repetition / presence / frequency penalties)."""
        if 0 <= token_id < self.vocab_size:
            self.seen[token_id] = True
            self.counts[token_id] += 1

    def penalize(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.s
        logits = apply_repetition_penalty(logits, self.seen, float(s.repetition_penalty or 1.0))
        return apply_presence_frequency(logits, self.counts, float(s.presence_penalty or 0.0),
                                        float(s.frequency_penalty or 0.0))

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """Temperature, top-k, top-p, min-p in HF order (full-vocabulary reference form)."""
        s = self.s
        logits = apply_temperature(logits, float(s.temperature))
        logits = apply_top_k(logits, int(s.top_k or 0))
        logits = apply_top_p(logits, float(s.top_p if s.top_p is not None else 1.0))
        return apply_min_p(logits, float(s.min_p or 0.0))

    def sample(self, logits: torch.Tensor) -> int:
        """Next token id from fp32 logits ``[vocab]``."""
        logits = self.penalize(logits[: self.vocab_size].to(torch.float32))
        if not self.s.temperature or self.s.temperature <= 0:
            return int(torch.argmax(logits))
        top_k = int(self.s.top_k or 0)
        if 0 < top_k < logits.shape[-1]:
            # Same distribution as warping the full vocabulary, but top-p/min-p sort k values, not
            # 150k: everything outside the top-k set is -inf after top-k anyway.
            kth = torch.topk(logits, top_k).values[-1]
            candidates = torch.nonzero(logits >= kth).flatten()
            sub = self.warp(logits[candidates])
        else:
            candidates = None
            sub = self.warp(logits)
        probs = torch.softmax(sub, dim=-1)
        choice = int(torch.multinomial(probs, 1, generator=self.generator))
        return int(candidates[choice]) if candidates is not None else choice


class StopStringMatcher:
    """Withholds text that could be the start of a stop string; reports a completed stop string.

    Works on the decoded text stream, so a stop string split across several tokens is caught and
    nothing after its start is ever emitted.
    """

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.buffer = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Text that is safe to emit now; sets :attr:`stopped` when a stop string completed."""
        if not self.stops:
            return text
        self.buffer += text
        hits = [i for i in (self.buffer.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.buffer, self.stopped = self.buffer[: min(hits)], "", True
            return out
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.buffer)), hold, -1):
                if self.buffer.endswith(s[:k]):
                    hold = k
                    break
        out = self.buffer[: len(self.buffer) - hold]
        self.buffer = self.buffer[len(self.buffer) - hold:]
        return out

    def flush(self) -> str:
        out, self.buffer = self.buffer, ""
        return out
