"""Catch a float tensor whose dtype label does not match its bytes (F16 data labelled BF16).

Why: F16 and BF16 are both two bytes per value, so a header that says BF16 for F16 data passes
every size and offset check and the model loads silently with every weight wrong. What *is*
checkable is the values: F16 weights of ordinary size (|w| < 0.5) read as BF16 land below 1e-12,
a magnitude no trained weight has, and garbage read as floats is NaN/inf or astronomically large.
A strided sample (a few thousand values) decides, so the check costs nothing next to loading.
Values near 1 (norm weights) look plausible under both labels; those cannot be told apart.
"""

from __future__ import annotations

import torch

from runtime.errors import ModelFormatError

SAMPLE = 4096
TINY, HUGE = 1e-12, 1e12
MIN_NONZERO = 32  # fewer nonzero values than this: nothing to judge
BAD_FRACTION = 0.5

_NAMES = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64"}


def _sample(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    step = max(1, flat.numel() // SAMPLE)
    return flat[::step][:SAMPLE]


def _implausible_fraction(values: torch.Tensor) -> float | None:
    v = values.to(torch.float32)
    v = v[v != 0]  # NaN != 0, so NaNs stay in
    if v.numel() < MIN_NONZERO:
        return None
    a = v.abs()
    bad = ~torch.isfinite(a) | (a < TINY) | (a > HUGE)
    return float(bad.float().mean())


def check_float_values(t: torch.Tensor, tensor: str, source: str, label: str | None = None) -> None:
    """Raise ModelFormatError when most sampled values of ``t`` are not plausible weights.

    ``label`` is the file's name for the dtype (default: from ``t.dtype``); for a two-byte type
    the message says whether the bytes read as the *other* two-byte type look right.
    """
    if not t.is_floating_point() or t.numel() == 0:
        return
    s = _sample(t)
    frac = _implausible_fraction(s)
    if frac is None or frac <= BAD_FRACTION:
        return
    label = label or _NAMES.get(t.dtype, str(t.dtype))
    hint = ""
    other = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}.get(t.dtype)
    if other is not None:
        alt = _implausible_fraction(s.view(torch.int16).view(other))
        if alt is not None and alt < 0.05:
            hint = f"; read as {_NAMES[other]} they are ordinary weights, so the file labels {_NAMES[other]} data as {label}"
    raise ModelFormatError(f"{source}: tensor {tensor} is labelled {label} but {frac:.0%} of its values are "
                           f"not plausible weights (NaN, infinite, below {TINY:g} or above {HUGE:g}){hint}")
