"""Next-token selection: one semantics, written once in torch, run by every decode path; and stop strings.

The semantics (each step is the well-known reference's, tested against it in tests/engine):

* repetition penalty: Hugging Face ``RepetitionPenaltyLogitsProcessor`` over prompt + generated tokens
  (``seen``): divide positive logits by the penalty, multiply negative ones;
* presence / frequency penalty: OpenAI, over generated tokens (``counts``):
  ``logit -= presence * [count > 0] + frequency * count``;
* temperature, top-k, top-p, min-p: HF's ``*LogitsWarper`` classes in HF's order (top-k keeps exactly
  ``k`` tokens: ties at the boundary are broken by ``torch.topk``); ``temperature == 0`` is greedy
  (penalties still apply, as in HF);
* the draw is an exponential race, ``argmax(p / E)`` with ``E ~ Exp(1)``: exactly a draw from ``p``, with
  no host sync and no data-dependent shape, so it can sit inside a CUDA graph.

Why one module: the engine's eager loop and :class:`runtime.gpu_decode.GraphDecoder` both run
:class:`TokenSampler`. Its settings are device tensors of fixed shape; what does change the ops (greedy or
not, the top-k size, whether a top-p cut needs sorted candidates, which penalties are on) is a
:class:`SamplingPlan`, which is also the graph's key. On CUDA the penalties (and, greedy, the argmax and the
loop's bookkeeping) run as one Triton launch, :class:`runtime.kernels.triton.sampling.DecoderSampler`, which
computes the same fp32 numbers as :func:`penalize` op for op (tests/kernels/test_decoder_sampler.py,
tests/gpu/test_gpu_decoder_sampler.py).

Seeds: the same seed, prompt and settings give the same tokens on the same device.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

import torch

from runtime import flags
from runtime.errors import TernaryError
from runtime.generation import GenerationSettings
from runtime.sampling_params import validate_generation_settings

NEG_INF = float("-inf")
# the parameter tensor's layout (fp32, on the device; DecoderSampler reads the same slots)
P_TEMPERATURE, P_TOP_P, P_MIN_P, P_REPETITION, P_PRESENCE, P_FREQUENCY = range(6)
N_PARAMS = 6


@dataclass(frozen=True)
class SamplingPlan:
    """Which ops a token's selection runs, and their shapes: fixed for one generation, a CUDA graph's key.
    The values (temperature, p, penalties) live in the parameter tensor and change without recapture."""

    greedy: bool = True
    top_k: int = 0  # 0: every token is a candidate
    top_p: bool = False  # a top-p cut (sorts the candidates)
    min_p: bool = False
    repetition: bool = False
    presence_frequency: bool = False


ALL_PENALTIES = SamplingPlan(repetition=True, presence_frequency=True)


def sampling_plan(settings: GenerationSettings, vocab_size: int) -> SamplingPlan:
    """The plan for resolved ``settings`` (neutral values turn their op off; bit-identical either way)."""
    s = settings
    greedy = not s.temperature or s.temperature <= 0
    top_k = int(s.top_k or 0)
    return SamplingPlan(
        greedy=greedy,
        top_k=0 if greedy or top_k >= vocab_size else top_k,
        top_p=not greedy and s.top_p is not None and s.top_p < 1.0,
        min_p=not greedy and bool(s.min_p) and s.min_p > 0.0,
        repetition=s.repetition_penalty is not None and s.repetition_penalty != 1.0,
        presence_frequency=bool(s.presence_penalty) or bool(s.frequency_penalty),
    )


def sampling_values(settings: GenerationSettings) -> list[float]:
    """The parameter tensor's values (layout ``P_*``); greedy runs at temperature 1 (nothing divides)."""
    s = settings
    temp = float(s.temperature or 0.0)
    return [temp if temp > 0 else 1.0, float(s.top_p if s.top_p is not None else 1.0), float(s.min_p or 0.0),
            float(s.repetition_penalty or 1.0), float(s.presence_penalty or 0.0), float(s.frequency_penalty or 0.0)]


def penalize(logits: torch.Tensor, seen: torch.Tensor, counts: torch.Tensor, params: torch.Tensor,
             plan: SamplingPlan = ALL_PENALTIES) -> torch.Tensor:
    """fp32 ``[V]`` logits after the repetition (``seen``: bool ``[V]``) and presence/frequency (``counts``:
    int32 ``[V]``) penalties. The op order is the fused kernel's: keep them in step."""
    x = logits.reshape(-1)[: seen.numel()].to(torch.float32)
    if plan.repetition:
        rep = params[P_REPETITION]
        x = torch.where(seen, torch.where(x < 0, x * rep, x / rep), x)
    if plan.presence_frequency:
        c = counts.to(torch.float32)
        x = x - params[P_PRESENCE] * (c > 0).to(torch.float32)
        x = x - params[P_FREQUENCY] * c
    return x


def candidates(scaled: torch.Tensor, params: torch.Tensor,
               plan: SamplingPlan) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(probabilities, token ids)`` of the tokens top-k, top-p and min-p keep, from temperature-scaled
    logits ``[V]``; dropped ones have probability 0 (not renormalised: the draw does not need it). With
    top-k or top-p the candidates are sorted best first; otherwise ``ids`` is ``None`` (index = token id)
    and nothing is sorted. Top-k never sorts the whole vocabulary."""
    if plan.top_k:
        vals, idx = torch.topk(scaled, plan.top_k)
    elif plan.top_p:
        vals, idx = torch.sort(scaled, descending=True)
    else:
        vals, idx = scaled, None
    probs = torch.softmax(vals, dim=-1)
    keep = None
    if plan.top_p:  # HF: drop tokens whose ascending cumulative mass (this one and all below) <= 1 - p
        tail = torch.flip(torch.cumsum(torch.flip(probs, (0,)), 0), (0,))
        keep = tail > 1.0 - params[P_TOP_P]
    if plan.min_p:  # relative to the best token: unchanged by the renormalisation HF does after top-p
        best = probs[0] if idx is not None else probs.max()
        by_ratio = probs >= params[P_MIN_P] * best
        keep = by_ratio if keep is None else keep & by_ratio
    if keep is None:
        return probs, idx
    if idx is not None:
        keep[:1].fill_(True)  # the best token always stays (HF's min_tokens_to_keep=1); a fill, graph-safe
    return torch.where(keep, probs, torch.zeros_like(probs)), idx


def race(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Index ``[1]`` (long) drawn with probability proportional to ``probs``: ``argmax(p / E)``, ``E ~ Exp(1)``
    from ``generator`` (``None``: the device's default generator, which CUDA graphs can replay)."""
    noise = torch.empty_like(probs).exponential_(1.0, generator=generator)
    noise.clamp_min_(torch.finfo(torch.float32).tiny)  # a zero draw must not turn p = 0 into NaN
    return torch.argmax(probs / noise).reshape(1)


def token_logprobs(logits: torch.Tensor, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """``log_softmax`` of raw logits (temperature 1, no penalties or truncation, as vLLM and OpenAI report)
    at ``token``, and the ``top`` most likely ``(id, logprob)``, best first."""
    lp = torch.log_softmax(logits.reshape(-1).to(torch.float32), dim=-1)
    chosen = float(lp[token])
    if top <= 0:
        return chosen, []
    vals, ids = torch.topk(lp, min(top, lp.numel()))
    return chosen, list(zip(ids.tolist(), vals.tolist(), strict=True))


def _fused_default(device: torch.device) -> bool:
    return device.type == "cuda" and flags.value("TERNARY_FUSED_SAMPLING") != "0"


class TokenSampler:
    """Sampling state of one decode loop on one device: settings and penalty state as device tensors.

    :meth:`configure` loads a generation's settings (refusing values outside
    :data:`runtime.sampling_params.RULES` with :class:`~runtime.errors.InvalidSettingError`, before a NaN
    temperature reaches softmax). :meth:`sample` is the eager step (one host sync, for the token id);
    :meth:`step` is the graph-safe one. ``fused`` (default: on CUDA, unless ``TERNARY_FUSED_SAMPLING=0``)
    runs the penalties through the Triton kernel.
    """

    def __init__(self, vocab_size: int, device: torch.device | str, *, fused: bool | None = None) -> None:
        dev = torch.device(device)
        self.vocab_size = vocab_size
        self.device = dev
        self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=dev)
        self.counts = torch.zeros(vocab_size, dtype=torch.int32, device=dev)
        self.params = torch.tensor(sampling_values(GenerationSettings(temperature=0.0)), dtype=torch.float32,
                                   device=dev)
        self.plan = SamplingPlan()
        self.generator: torch.Generator | None = None
        self.seed = 0
        self._one = torch.ones(1, dtype=torch.int32, device=dev)
        self.kernel = None  # runtime.kernels.triton.sampling.DecoderSampler
        if _fused_default(dev) if fused is None else fused:
            try:
                from runtime.kernels.triton.sampling import DecoderSampler
            except ImportError:  # no Triton: the torch ops
                DecoderSampler = None  # noqa: N806
            if DecoderSampler is not None:
                self.kernel = DecoderSampler(vocab_size, dev)

    def configure(self, settings: GenerationSettings, prompt_ids: list[int] | torch.Tensor, *,
                  device_generator: bool = False) -> None:
        """Load a generation's settings and the prompt's tokens (for the repetition penalty). The draws come
        from an own generator seeded with ``settings.seed`` (random when ``None``), or, with
        ``device_generator``, from the device's default generator, seeded here (what CUDA graphs replay)."""
        validate_generation_settings(settings)
        self.plan = sampling_plan(settings, self.vocab_size)
        self.params.copy_(torch.tensor(sampling_values(settings), dtype=torch.float32))
        self.seen.zero_()
        self.counts.zero_()
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).flatten()
        ids = ids[(ids >= 0) & (ids < self.vocab_size)]
        if ids.numel():
            self.seen[ids.to(self.device)] = True
        self.seed = settings.seed if settings.seed is not None else secrets.randbits(63)
        if device_generator:
            if self.device.type == "cuda":
                torch.cuda.manual_seed(self.seed)
            else:
                torch.manual_seed(self.seed)
            self.generator = None
        else:
            self.generator = torch.Generator(device=self.device)
            self.generator.manual_seed(self.seed)

    def graph_key(self) -> SamplingPlan:
        """The plan as far as it changes captured ops (the kernel computes every penalty anyway)."""
        if self.kernel is not None:
            return replace(self.plan, repetition=True, presence_frequency=True)
        return self.plan

    @property
    def writes_host(self) -> bool:
        """Whether :meth:`step` writes the token into the pinned host buffer itself (fused greedy)."""
        return self.plan.greedy and self.kernel is not None

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """Penalized logits divided by the temperature, fp32 ``[V]``."""
        if self.kernel is not None:
            return self.kernel.scaled(logits, self.seen, self.counts, self.params)
        return penalize(logits, self.seen, self.counts, self.params, self.plan) / self.params[P_TEMPERATURE]

    def next_token(self, logits: torch.Tensor) -> torch.Tensor:
        """Token id ``[1]`` (long) from logits ``[>= V]``; device tensors only, state untouched."""
        if self.plan.greedy:
            return torch.argmax(penalize(logits, self.seen, self.counts, self.params, self.plan)).reshape(1)
        probs, idx = candidates(self.scaled(logits), self.params, self.plan)
        choice = race(probs, self.generator)
        return choice if idx is None else idx[choice]

    def record(self, token: torch.Tensor) -> None:
        """Count a generated token ``[1]`` for the penalties."""
        self.seen.index_fill_(0, token, True)
        self.counts.index_add_(0, token, self._one)

    def step(self, logits: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor,
             host: torch.Tensor | None = None) -> None:
        """Graph-safe: ``tok[0]`` = the next token, ``pos += 1``, the token recorded; fused greedy also writes
        it to ``host[old pos % 2]`` (see :attr:`writes_host`), all in one launch."""
        if self.writes_host:
            self.kernel.greedy_step(logits, self.seen, self.counts, self.params, tok, pos, host)
            return
        nxt = self.next_token(logits)
        tok.copy_(nxt)
        pos.add_(1)
        self.record(nxt)

    def sample(self, logits: torch.Tensor, allowed: torch.Tensor | None = None) -> int:
        """The next token id from logits ``[>= V]``, recorded. ``allowed`` (bool, True = may come next) masks
        the logits to -inf first, so penalties, temperature and truncation apply to the allowed tokens."""
        if allowed is not None:
            x = logits.reshape(-1)[: self.vocab_size]
            mask = allowed.reshape(-1).to(torch.bool)
            if mask.numel() != self.vocab_size:  # a shorter mask allows nothing beyond its end
                padded = torch.zeros(self.vocab_size, dtype=torch.bool, device=mask.device)
                n = min(self.vocab_size, mask.numel())
                padded[:n] = mask[:n]
                mask = padded
            logits = x.masked_fill(~mask.to(x.device, non_blocking=True), NEG_INF)
        nxt = self.next_token(logits)
        self.record(nxt)
        return int(nxt.item())


def pick_token(sampler: TokenSampler, logits: torch.Tensor, constraint: Any, logprobs: int | None,
               end_ids: set[int]) -> tuple[int, tuple[float, list[tuple[int, float]]] | None]:
    """One host-side step of an answer that asked for logprobs or an output constraint (the engine's eager loop
    and the batch's host-sampled rows): the token drawn from ``logits`` among the constraint's allowed ones, its
    logprobs (``None`` unless asked), the constraint advanced unless the token is one of ``end_ids``."""
    allowed = None
    if constraint is not None:
        allowed = constraint.allowed_tokens()
        if not bool(allowed.any()):
            raise TernaryError("the output constraint allows no next token")
    tok = sampler.sample(logits, allowed)
    info = token_logprobs(logits[: sampler.vocab_size], tok, logprobs) if logprobs is not None else None
    if constraint is not None and tok not in end_ids:
        constraint.advance(tok)
    return tok, info


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
