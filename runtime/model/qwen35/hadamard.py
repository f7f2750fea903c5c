"""Bonsai 2 rotation: explicit signs + blockwise normalized Sylvester Walsh-Hadamard transform.

Why: Bonsai 2 models (``prism.hadamard.*`` metadata) were quantized in a rotated basis. For each
folded weight ``W_stored = W R^T`` with ``R(x) = H_b (s * x)`` (``s`` the +-1 sign vector for the
input width, ``H_b`` the orthonormal Sylvester Hadamard matrix applied to every ``b``-wide block of
the last dimension), so the runtime computes ``W_stored @ R(x) == W @ x``. The embedding table rows
are stored as ``R(e)``; after the lookup ``R^T(z) = s * H_b(z)`` (transform first, then signs)
restores the residual stream. ``H_b`` is symmetric and orthonormal, so it is its own inverse.

Folding offline is the same operation as the runtime rotation, applied to every row of a weight:
``fold_rows(W) = R(W)`` along the input dim (see :func:`fold_rows`). A model that needs the rotation
must never run without it: it would produce fluent-looking garbage, so :func:`validate_rotation`
refuses a file whose metadata is incomplete and :func:`refuse_if_rotated_without_metadata` a file
that looks like Bonsai 2 but carries none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import torch

from runtime.errors import UnsupportedModelError
from runtime.model.config import HadamardConfig

TRANSFORM = "normalized-sylvester-walsh-hadamard"
AXIS = "input-last-dimension"


def fwht(x: torch.Tensor, block: int) -> torch.Tensor:
    """Normalized Walsh-Hadamard transform of every ``block``-wide slice of the last dim.

    ``H[r][c] = (-1)^popcount(r & c) / sqrt(block)`` (Sylvester / natural order), computed with
    ``log2(block)`` vectorised butterfly stages (each stage is one reshape + add/sub, no loop over
    elements). Works in fp32 for half inputs and returns the input dtype.
    """
    n = x.shape[-1]
    if block < 1 or block & (block - 1):
        raise ValueError(f"Hadamard block size {block} is not a power of two")
    if n % block:
        raise ValueError(f"width {n} is not a multiple of the Hadamard block size {block}")
    dtype = x.dtype
    y = x.to(torch.float32) if dtype in (torch.float16, torch.bfloat16) else x
    lead = y.shape[:-1]
    y = y.reshape(-1, n // block, block)
    h = 1
    while h < block:
        y = y.view(y.shape[0], y.shape[1], block // (2 * h), 2, h)
        a, b = y[:, :, :, 0, :], y[:, :, :, 1, :]
        y = torch.stack((a + b, a - b), dim=3)
        h *= 2
    y = y.reshape(*lead, n) * (1.0 / math.sqrt(block))
    return y.to(dtype)


def hadamard_matrix(block: int) -> torch.Tensor:
    """The dense normalized Sylvester matrix (for tests and documentation, never the hot path)."""
    r = torch.arange(block)
    bits = (r[:, None] & r[None, :])
    parity = torch.zeros_like(bits)
    while bool(bits.any()):
        parity ^= bits & 1
        bits = bits >> 1
    return (1.0 - 2.0 * parity.to(torch.float64)) / math.sqrt(block)


class HadamardRotation(torch.nn.Module):
    """The rotation for one model: sign vectors per input width and the block size.

    Two exact implementations: the ``log2(block)``-stage butterfly (CPU default: fewest FLOPs) and
    one GEMM with the +-1 Sylvester matrix (CUDA default: one kernel instead of ~20 launches per
    rotation, which matters inside a decode step; +-1 entries are exact in bf16 and the
    ``1/sqrt(block)`` factor is folded into the signs).
    """

    def __init__(self, block_size: int, signs: dict[int, torch.Tensor], device: torch.device | str = "cpu",
                 method: str = "auto") -> None:
        super().__init__()
        if block_size < 1 or block_size & (block_size - 1):
            raise UnsupportedModelError(f"rotation block size {block_size} is not a power of two")
        self.block_size = block_size
        self.widths = sorted(signs)
        device = torch.device(device)
        self.use_matmul = method == "matmul" or (method == "auto" and device.type == "cuda")
        for w, s in signs.items():
            self.register_buffer(f"signs_{w}", s.to(device=device, dtype=torch.float32), persistent=False)
        if self.use_matmul:
            pm1 = (hadamard_matrix(block_size) * math.sqrt(block_size)).round().to(torch.float32)
            self.register_buffer("pm1", pm1.to(device), persistent=False)
        self._cast: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def _cached(self, key: str, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        k = (key, dtype)
        if k not in self._cast or self._cast[k].device != t.device:
            self._cast[k] = t.to(dtype)
        return self._cast[k]

    def _matmul_rotate(self, x: torch.Tensor, scaled_signs: torch.Tensor, signs_first: bool) -> torch.Tensor:
        b = self.block_size
        h = self._cached("pm1", self.pm1, x.dtype)
        if signs_first:
            y = (x * scaled_signs).reshape(-1, b) @ h
            return y.reshape(x.shape)
        return ((x.reshape(-1, b) @ h).reshape(x.shape)) * scaled_signs

    @classmethod
    def from_config(cls, hc: HadamardConfig, device: torch.device | str = "cpu",
                    method: str = "auto") -> HadamardRotation:
        return cls(hc.block_size, signs_from_config(hc), device, method)

    def signs(self, width: int) -> torch.Tensor:
        try:
            return getattr(self, f"signs_{width}")
        except AttributeError:
            raise UnsupportedModelError(
                f"the rotation metadata has no sign vector for input width {width} "
                f"(has: {', '.join(map(str, self.widths))})") from None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``R(x)``: signs, then the blockwise transform (activation before a folded matmul)."""
        w = x.shape[-1]
        s = self.signs(w)
        if self.use_matmul:
            scaled = self._cached(f"s{w}", s / math.sqrt(self.block_size), x.dtype)
            return self._matmul_rotate(x, scaled, signs_first=True)
        return fwht(x * s.to(x.dtype), self.block_size)

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        """``R^T(x)``: transform, then signs (after the lookup in a rotated embedding table)."""
        w = x.shape[-1]
        s = self.signs(w)
        if self.use_matmul:
            scaled = self._cached(f"s{w}", s / math.sqrt(self.block_size), x.dtype)
            return self._matmul_rotate(x, scaled, signs_first=False)
        return fwht(x, self.block_size) * s.to(x.dtype)


def signs_from_config(hc: HadamardConfig) -> dict[int, torch.Tensor]:
    """``{width: float32 +-1 vector}`` from the metadata (``hc.signs``), checking every value."""
    raw = getattr(hc, "signs", None) or {}
    out: dict[int, torch.Tensor] = {}
    for w, values in raw.items():
        t = torch.as_tensor(values, dtype=torch.float32).flatten()
        if t.numel() != int(w):
            raise UnsupportedModelError(f"rotation sign vector for width {w} has {t.numel()} values")
        if not bool(((t == 1) | (t == -1)).all()):
            raise UnsupportedModelError(f"rotation sign vector for width {w} has values other than +1/-1")
        out[int(w)] = t
    return out


def split_sign_values(widths: Iterable[int], values: Iterable[float]) -> dict[int, list[int]]:
    """Cut the flat ``prism.hadamard.sign_values`` array into one vector per ``sign_widths`` entry."""
    widths = [int(w) for w in widths]
    flat = [int(v) for v in values]
    if sum(widths) != len(flat):
        raise UnsupportedModelError(
            f"prism.hadamard.sign_values has {len(flat)} values but sign_widths add up to {sum(widths)}")
    out, off = {}, 0
    for w in widths:
        out[w] = flat[off:off + w]
        off += w
    return out


def validate_rotation(hc: HadamardConfig, tensor_shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse metadata this runtime cannot apply exactly (one clear line, never garbage output)."""
    if hc.transform != TRANSFORM:
        raise UnsupportedModelError(f"unsupported rotation transform {hc.transform!r} (supported: {TRANSFORM})")
    axis = getattr(hc, "axis", AXIS)
    if axis and axis != AXIS:
        raise UnsupportedModelError(f"unsupported rotation axis {axis!r} (supported: {AXIS})")
    b = hc.block_size
    if b < 1 or b & (b - 1):
        raise UnsupportedModelError(f"rotation block size {b} is not a power of two")
    if not hc.weight_names:
        raise UnsupportedModelError("the rotation metadata lists no rotated weights (prism.hadamard.weight_names)")
    signs = signs_from_config(hc)
    for name in list(hc.weight_names) + list(hc.inverse_weight_names):
        if name not in tensor_shapes:
            raise UnsupportedModelError(f"rotation metadata names tensor {name!r}, which the model does not have")
        width = tensor_shapes[name][-1]
        if width % b:
            raise UnsupportedModelError(f"{name}: input width {width} is not a multiple of rotation block {b}")
        if width not in signs:
            raise UnsupportedModelError(f"{name}: no rotation sign vector for input width {width}")


_BONSAI2 = re.compile(r"bonsai[-_ ]?2(?![0-9])", re.IGNORECASE)


def refuse_if_rotated_without_metadata(hc: HadamardConfig | None, *names: str) -> None:
    """Bonsai 2 weights live in a rotated basis: without ``prism.hadamard.*`` they are unusable.

    The check is by name (file name, ``general.name``, provenance), because the weights themselves
    do not say whether they are rotated. Metadata present -> nothing to refuse here.
    """
    if hc is not None:
        return
    for n in names:
        if n and _BONSAI2.search(n):
            raise UnsupportedModelError(
                f"{n!r} looks like a Bonsai 2 model, whose weights are Hadamard-rotated, but the file has no "
                "prism.hadamard.* rotation metadata; running it would produce garbage. Use the original "
                "PrismML file (or convert it with its metadata kept).")


def fold_rows(w: torch.Tensor, rotation: HadamardRotation) -> torch.Tensor:
    """Offline folding (what PrismML's converter does): every row ``w_i -> R(w_i)``.

    For a linear weight this gives ``W R^T`` (so ``W_stored R(x) = W x``); for the embedding table
    it stores rows as ``R(e)``, undone by :meth:`HadamardRotation.inverse` after the lookup.
    """
    return rotation(w.to(torch.float32)).to(w.dtype)
