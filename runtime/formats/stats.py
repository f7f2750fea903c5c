"""Cheap statistics of stored tensors (for ``ternary inspect --stats`` and sanity checks).

Why table-driven: counting -1/0/+1 over a 300M-weight embedding by unpacking would allocate
gigabytes; a byte histogram times a 256-entry "codes per byte" table is exact and tiny.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from runtime.formats.model_data import T2, DenseTensor, Tensor, TernaryTensor, t3_bytes_per_group

_T2_COUNTS = np.stack([((np.arange(256)[:, None] >> np.array([0, 2, 4, 6])) & 3 == c).sum(1) for c in range(4)], 1)
_T3_DIGITS = (np.arange(256)[:, None] // np.array([1, 3, 9, 27, 81])) % 3
_T3_COUNTS = np.stack([(_T3_DIGITS == c).sum(1) for c in range(3)] + [np.zeros(256, dtype=np.int64)], 1)


def code_counts(t: TernaryTensor) -> np.ndarray:
    """Counts of codes 0..3 (weights -1, 0, +1, +2) in a ternary tensor."""
    hist = np.bincount(t.codes.contiguous().numpy().reshape(-1), minlength=256).astype(np.int64)
    if t.encoding == T2:
        return hist @ _T2_COUNTS
    counts = hist @ _T3_COUNTS
    rows, cols = t.shape
    groups = cols // t.group_size
    counts[0] -= rows * groups * (t3_bytes_per_group(t.group_size) * 5 - t.group_size)  # padding trits are 0
    return counts


def tensor_stats(t: Tensor) -> dict[str, Any]:
    if isinstance(t, TernaryTensor):
        c = code_counts(t)
        n = max(int(c.sum()), 1)
        s = t.scales.to(torch.float32)
        return {"minus": c[0] / n, "zero": c[1] / n, "plus": c[2] / n, "two": c[3] / n,
                "scale_min": float(s.min()), "scale_mean": float(s.mean()), "scale_max": float(s.max()),
                "zero_scales": int((s == 0).sum())}
    d = t.data.to(torch.float32) if isinstance(t, DenseTensor) else t
    return {"min": float(d.min()), "mean": float(d.mean()), "max": float(d.max()),
            "std": float(d.std()) if d.numel() > 1 else 0.0}
