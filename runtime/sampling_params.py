"""What a valid sampling / generation parameter is: one definition for the CLI, the engine and the app.

Why one module: the app refused temperature -1 while ``ternary generate --temperature -1`` ran it
and ``--temperature nan`` crashed deep in the sampler; limits that live in two places drift. The
app's settings (``app.core.settings_model.LIMITS``), the CLI's argparse types (:func:`cli_type`) and
the engine (:func:`validate_generation_settings`, called by ``Engine.generate`` and the
:class:`~runtime.sampling.TokenSampler`) all read :data:`RULES`. No torch import: the app's settings
model loads this without the runtime.

Seeds: ``torch.Generator.manual_seed`` (eager sampler) and ``torch.cuda.manual_seed`` (CUDA-graph decoder)
take any integer in 0 .. 2**64 - 1, so that is the range; 2**64 raises inside torch.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.errors import InvalidSettingError

MAX_SEED = 2**64 - 1


@dataclass(frozen=True)
class Range:
    """Allowed numeric range of a setting and the sentence a user reads when a value is outside it."""

    low: float
    high: float
    explanation: str
    integer: bool = False

    def check(self, value: Any) -> str | None:
        """``None`` when ``value`` is allowed, else :attr:`explanation`. Refuses bools, text, NaN and
        infinities, and fractions for whole-number settings."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return self.explanation
        if isinstance(value, float) and not math.isfinite(value):
            return self.explanation
        if self.integer and int(value) != value:
            return self.explanation
        if not self.low <= value <= self.high:
            return self.explanation
        return None


# The sentences are the app's (translated in app/settings_dialog.py): change both together.
RULES: dict[str, Range] = {
    "temperature": Range(0.0, 2.0, "Temperature must be between 0 (greedy, always the likeliest token) and 2."),
    "top_p": Range(0.01, 1.0, "Top-p must be above 0 and at most 1 (1 turns it off)."),
    "top_k": Range(0, 1000, "Top-k must be a whole number from 0 (off) to 1000.", integer=True),
    "min_p": Range(0.0, 1.0, "Min-p must be between 0 (off) and 1."),
    "repetition_penalty": Range(0.5, 2.0, "Repetition penalty must be between 0.5 and 2 (1 turns it off)."),
    "presence_penalty": Range(-2.0, 2.0, "Presence penalty must be between -2 and 2 (0 turns it off)."),
    "frequency_penalty": Range(-2.0, 2.0, "Frequency penalty must be between -2 and 2 (0 turns it off)."),
    "max_new_tokens": Range(1, 262144, "Max new tokens must be a whole number from 1 to 262144.", integer=True),
    "seed": Range(0, MAX_SEED, "The seed must be a whole number from 0 to 18446744073709551615 (empty = random).", integer=True),
}

DEVICE_EXPLANATION = "Device must be auto, cpu, cuda or cuda:N (N = GPU number)."
_DEVICE = re.compile(r"(auto|cpu|cuda)|cuda:[0-9]{1,4}")


def check(name: str, value: Any) -> str | None:
    """The explanation when ``value`` is not allowed for setting ``name`` (``None`` when it is)."""
    return RULES[name].check(value)


def check_device(value: Any) -> str | None:
    """``None`` for auto, cpu, cuda or cuda:N; else :data:`DEVICE_EXPLANATION`."""
    if isinstance(value, str) and _DEVICE.fullmatch(value):
        return None
    return DEVICE_EXPLANATION


def validate_generation_settings(settings: Any, where: str = "") -> None:
    """Raise :class:`InvalidSettingError` for the first field of ``settings`` (a
    ``GenerationSettings`` or anything with the same attributes) that is set and not allowed.

    ``None`` fields mean "the model's default" and are not checked. ``where`` prefixes the
    message (e.g. "the model file's default") when the value did not come from the user.
    """
    for name, rule in RULES.items():
        value = getattr(settings, name, None)
        if value is None:
            continue
        problem = rule.check(value)
        if problem:
            prefix = f"{where}: " if where else ""
            raise InvalidSettingError(f"{prefix}{problem} Got {_shown(value)}.", name)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_number(name: str, text: str) -> int | float:
    """A setting typed as text (CLI), checked: raises ``ValueError`` with the user's sentence."""
    rule = RULES[name]
    raw = text.strip()
    try:
        value: int | float = int(raw, 10) if rule.integer else float(raw)
    except ValueError:
        kind = "a whole number" if rule.integer else "a number"
        raise ValueError(f"{_shown(text)} is not {kind}. {rule.explanation}") from None
    problem = rule.check(value)
    if problem:
        raise ValueError(f"{problem} Got {_shown(text)}.")
    return value


def cli_type(name: str) -> Callable[[str], int | float]:
    """An argparse ``type=`` for setting ``name``: bad values end in argparse's one-line error and
    exit code 2, never a traceback."""

    def parse(text: str) -> int | float:
        try:
            return parse_number(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def cli_device(text: str) -> str:
    """argparse ``type=`` for ``--device``."""
    if check_device(text):
        raise argparse.ArgumentTypeError(f"{DEVICE_EXPLANATION} Got {_shown(text)}.")
    return text


def cli_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """argparse ``type=`` for a whole number in ``low .. high`` (context lengths, run counts)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number from {low} to {high}; "
                                             f"got {_shown(text)}.") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number from {low} to {high}; got {value}.")
        return value

    parse.__name__ = what
    return parse
