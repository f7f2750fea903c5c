"""CPU linear backends compute what the dense weight computes.

cpu_ternary's exact path must be exact up to fp32 summation order; cpu_int4 (torch's int4 kernel,
bf16 activations) within bf16 rounding. Ground truth is float64 on the dequantized weight. The int8
activation path and the other ISA variants are checked in test_cpu_isa.py.
"""

from __future__ import annotations

import pytest
import torch

from runtime.formats.codecs import pack_t2
from runtime.formats.model_data import T2, T3, TernaryTensor
from runtime.kernels import linear
from runtime.kernels.cpu.int4 import CpuInt4Linear
from runtime.kernels.cpu.ternary import CpuTernaryLinear, kernel_isa, kernel_name
from runtime.synthetic import random_ternary, to_encoding

# per-output error allowed, as a multiple of sum_k |w_k x_k|
REL_BOUND = {"cpu_ternary": 8 * torch.finfo(torch.float32).eps, "cpu_int4": 2.0**-7}


@pytest.fixture(autouse=True)
def _exact_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "exact")


def _exact(t: TernaryTensor, x: torch.Tensor) -> torch.Tensor:
    return x.double() @ t.dequantize(torch.float64).t()


def _bound(t: TernaryTensor, x: torch.Tensor, backend: str) -> torch.Tensor:
    return (x.double().abs() @ t.dequantize(torch.float64).abs().t()) * REL_BOUND[backend] + 1e-30


def _check(t: TernaryTensor, x: torch.Tensor, y: torch.Tensor, backend: str) -> None:
    err = (y.double() - _exact(t, x)).abs()
    bound = _bound(t, x, backend)
    assert bool((err <= bound).all()), f"{backend}: max err {err.max().item():.3g}, worst ratio {(err / bound).max():.3g}"


SHAPES = [
    (2048, 2048, 128, 1),
    (256, 6144, 128, 1),
    (1000, 512, 128, 3),  # rows not a multiple of 4/16 (padding / tail rows)
    (160, 640, 64, 1),  # Q2_0 g64
    (64, 256, 64, 37),  # many rows: prefill path, token tiles and token tails
    (37, 128, 128, 5),
    (6, 256, 256, 70),  # TQ2_0 g256, more than one 32-token tile
    (33, 96, 32, 2),
    (20, 48, 16, 1),  # one word per group (odd word count in the decode loop)
    (20, 48, 16, 9),
]


CASES = [(b, *shape) for b in ("cpu_ternary", "cpu_int4") for shape in SHAPES
         if b == "cpu_ternary" or shape[2] >= 32]  # torch's int4 kernel has no group 16


@pytest.mark.parametrize(("backend", "rows", "cols", "group", "batch"), CASES)
def test_cpu_backend_matches_dense(backend: str, rows: int, cols: int, group: int, batch: int) -> None:
    t = random_ternary(f"w{rows}x{cols}", (rows, cols), seed=3, group_size=group)
    x = torch.randn(batch, cols, generator=torch.Generator().manual_seed(rows + cols))
    w = linear.prepare_linear(t, "cpu", backend=backend)
    assert w.backend == (f"cpu_ternary[{kernel_name()},exact]" if backend == "cpu_ternary" else backend)
    y = w(x)
    assert y.shape == (batch, rows) and y.dtype == torch.float32
    _check(t, x, y, backend)


@pytest.mark.parametrize("cls", [CpuTernaryLinear, CpuInt4Linear])
def test_cpu_backend_code_three_and_zero_scales(cls: type) -> None:
    """Q2_0's code 3 (t = +2) and all-zero groups (s = 0) are computed exactly."""
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 4, (48, 256), generator=gen, dtype=torch.uint8)
    scales = (torch.rand(48, 2, generator=gen) * 0.05).to(torch.float16)
    scales[5, 1] = 0.0
    t = TernaryTensor((48, 256), 128, pack_t2(codes), scales, T2)
    x = torch.randn(6, 256, generator=gen)
    _check(t, x, cls(t)(x), cls.backend)
    _check(t, x[:1], cls(t)(x[:1]), cls.backend)


def test_cpu_ternary_t3_leading_dims_dtypes_and_rows() -> None:
    t2 = random_ternary("t3case", (96, 640), seed=1, group_size=128)
    t3 = to_encoding(t2, T3)
    assert t3.encoding == T3
    x = torch.randn(2, 3, 640)
    y2 = CpuTernaryLinear(t2)(x)
    y3 = CpuTernaryLinear(t3)(x)
    assert y3.shape == (2, 3, 96)
    assert torch.equal(y2, y3)
    yh = CpuTernaryLinear(t2)(x.to(torch.bfloat16))
    assert yh.dtype == torch.bfloat16
    xt = torch.randn(640, 4).t()  # non-contiguous input
    assert torch.equal(CpuTernaryLinear(t2)(xt), CpuTernaryLinear(t2)(xt.contiguous()))
    # embedding rows straight from the codes equal the dequantized rows exactly
    ids = torch.tensor([[0, 95], [17, 17]])
    rows = CpuTernaryLinear(t2).rows(ids)
    assert rows.shape == (2, 2, 640)
    assert torch.equal(rows, t2.dequantize(torch.float32)[ids])
    with pytest.raises(IndexError):
        CpuTernaryLinear(t2).rows(torch.tensor([96]))


def test_cpu_ternary_rows_with_code_three_and_g16() -> None:
    codes = torch.full((4, 32), 3, dtype=torch.uint8)
    codes[:, ::3] = 0
    t = TernaryTensor((4, 32), 16, pack_t2(codes), torch.full((4, 2), 0.5, dtype=torch.float16), T2)
    assert torch.equal(CpuTernaryLinear(t).rows(torch.arange(4)), t.dequantize(torch.float32))


def test_cpu_ternary_is_the_default_cpu_backend() -> None:
    assert linear.default_backend(torch.device("cpu")) == "cpu_ternary"
    w = linear.prepare_linear(random_ternary("d", (32, 128)), "cpu")
    assert w.backend_family == "cpu_ternary" and w.backend == f"cpu_ternary[{kernel_name()},exact]"
    # the t2 codes (2 bits per weight) + fp16 scale per group of 128, used in place
    assert w.nbytes == 32 * 128 // 4 + 32 * 1 * 2
    t = random_ternary("z", (64, 256))
    assert CpuTernaryLinear(t).codes.data_ptr() == t.codes.data_ptr()  # no copy of t2 codes
    assert kernel_isa() in (0, 128, 256, 512)


def test_cpu_int4_memory_cost() -> None:
    w = CpuInt4Linear(random_ternary("m", (32, 128)))
    assert w.nbytes == 32 * 128 // 2 + 32 * 1 * 2 * 2  # int4 + bf16 (scale, zero) per group


def test_cpu_backends_refuse_bad_input() -> None:
    t = random_ternary("e", (32, 128))
    for cls in (CpuTernaryLinear, CpuInt4Linear):
        with pytest.raises(ValueError, match="CPU"):
            cls(t, "meta")
    with pytest.raises(ValueError, match="unknown linear backend"):
        linear.prepare_linear(t, "cpu", backend="nonexistent")
    with pytest.raises(ValueError, match="width"):
        CpuTernaryLinear(t)(torch.randn(1, 64))
    with pytest.raises(ValueError, match="divisible by 16"):
        CpuTernaryLinear(random_ternary("g8", (4, 64), group_size=8))
    with pytest.raises(ValueError, match="group size 32, 64"):
        CpuInt4Linear(random_ternary("g16", (16, 64), group_size=16))


def test_auto_backend_falls_back_to_reference_for_unsupported_layouts() -> None:
    t = random_ternary("g8auto", (8, 64), group_size=8)  # group 8: no fast CPU backend takes it
    w = linear.prepare_linear(t, "cpu")
    assert w.backend == "reference"
    x = torch.randn(2, 64)
    _check(t, x, w(x), "cpu_ternary")
