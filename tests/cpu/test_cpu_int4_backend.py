"""The cpu_int4 backend computes exactly what the reference backend computes (up to fp32 sums)."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.codecs import pack_t2
from runtime.formats.model_data import T2, T3, TernaryTensor
from runtime.kernels import linear
from runtime.kernels.cpu_int4 import CpuInt4Linear
from runtime.synthetic import random_ternary, to_encoding


def _exact(t: TernaryTensor, x: torch.Tensor) -> torch.Tensor:
    """float64 ground truth: the dense weight times x."""
    return x.double() @ t.dequantize(torch.float64).t()


def _tolerance(t: TernaryTensor, x: torch.Tensor) -> torch.Tensor:
    """fp32 accumulation bound per output: ~eps * K * sum|w||x| (generous constant, still tiny)."""
    bound = x.double().abs() @ t.dequantize(torch.float64).abs().t()
    return bound * (8 * torch.finfo(torch.float32).eps) + 1e-30


@pytest.mark.parametrize(
    ("rows", "cols", "group", "batch"),
    [
        (2048, 2048, 128, 1),
        (256, 6144, 128, 1),
        (1000, 512, 128, 3),  # rows not a multiple of 16 -> padded inside, cut back
        (160, 640, 64, 1),  # Q2_0 g64
        (64, 256, 64, 37),  # many rows (prefill-like)
        (37, 128, 128, 5),
    ],
)
def test_cpu_int4_matches_exact(rows: int, cols: int, group: int, batch: int) -> None:
    t = random_ternary(f"w{rows}x{cols}", (rows, cols), seed=3, group_size=group)
    x = torch.randn(batch, cols, generator=torch.Generator().manual_seed(rows + cols))
    w = linear.prepare_linear(t, "cpu", backend="cpu_int4")
    y = w(x)
    assert y.shape == (batch, rows) and y.dtype == torch.float32
    err = (y.double() - _exact(t, x)).abs()
    assert bool((err <= _tolerance(t, x)).all()), f"max err {err.max().item():.3g}"
    ref = linear.prepare_linear(t, "cpu", backend="reference")(x)
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_cpu_int4_code_three_and_zero_scales() -> None:
    """Q2_0's code 3 (t = +2) and all-zero groups (s = 0) survive the int4 mapping exactly."""
    codes = torch.randint(0, 4, (48, 256), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    scales = (torch.rand(48, 2, generator=torch.Generator().manual_seed(1)) * 0.05).to(torch.float16)
    scales[5, 1] = 0.0
    t = TernaryTensor((48, 256), 128, pack_t2(codes), scales, T2)
    x = torch.randn(2, 256)
    y = CpuInt4Linear(t)(x)
    err = (y.double() - _exact(t, x)).abs()
    assert bool((err <= _tolerance(t, x)).all())


def test_cpu_int4_t3_and_leading_dims_and_dtypes() -> None:
    t2 = random_ternary("t3case", (96, 640), seed=1, group_size=128)
    t3 = to_encoding(t2, T3)
    assert t3.encoding == T3
    x = torch.randn(2, 3, 640)
    y2 = CpuInt4Linear(t2)(x)
    y3 = CpuInt4Linear(t3)(x)
    assert y3.shape == (2, 3, 96)
    assert torch.equal(y2, y3)
    yh = CpuInt4Linear(t2)(x.to(torch.bfloat16))
    assert yh.dtype == torch.bfloat16
    assert torch.allclose(yh.float(), y2, rtol=2e-2, atol=2e-2)
    xt = torch.randn(640, 4).t()  # non-contiguous input
    assert torch.allclose(CpuInt4Linear(t2)(xt), CpuInt4Linear(t2)(xt.contiguous()))


def test_cpu_int4_is_the_default_cpu_backend() -> None:
    assert linear.default_backend(torch.device("cpu")) == "cpu_int4"
    w = linear.prepare_linear(random_ternary("d", (32, 128)), "cpu")
    assert w.backend == "cpu_int4"
    # 4-bit weight + fp32 (scale, zero) per group of 128 = 4.5 bits per weight
    assert w.nbytes == 32 * 128 // 2 + 32 * 1 * 2 * 4


def test_cpu_int4_refuses_other_devices_and_unknown_backends() -> None:
    t = random_ternary("e", (32, 128))
    with pytest.raises(ValueError, match="CPU"):
        CpuInt4Linear(t, "meta")
    with pytest.raises(ValueError, match="unknown linear backend"):
        linear.prepare_linear(t, "cpu", backend="nonexistent")
