"""The ARM64 NEON kernel (runtime/kernels/cpu/ternary_neon.c) computes what the contract says.

No one here has ARM hardware, so the kernel is cross-compiled with the distribution's aarch64 gcc and
run under qemu-user: once for ARMv8.2 with the dot-product extension (sdot, qemu -cpu max) and once for
plain ARMv8.0 (vmull/vpadal fallback, qemu -cpu cortex-a53, which has no sdot: a stray sdot would
fault). tests/cpu/neon_harness.c runs every exported function on cases written here and the results
are checked against torch: the exact path against float64 on the exact weights, int8 quantisation bit
for bit against the rule, the int8 matmul against a float64 evaluation of its formula, the row gather
for equality. scripts/install_arm_toolchain.sh (run by scripts/test.sh) installs the tools; a missing
toolchain is a failure, not a skip, so CI cannot silently stop testing the ARM path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from runtime.formats.codecs import pack_t2

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "runtime" / "kernels" / "cpu"
HARNESS = Path(__file__).with_name("neon_harness.c")
EXACT_REL = 8 * torch.finfo(torch.float32).eps  # per output, times sum_k |w x|, as test_cpu_backends
Q8_REL = 1e-5  # per output, times sum_b |s d dot|: only fp32 summation order and d*s rounding differ


@dataclass(frozen=True)
class Build:
    name: str
    flags: tuple[str, ...]
    qemu_cpu: str
    kernel_name: str


BUILDS = [
    Build("dotprod", ("-march=armv8.2-a+dotprod", "-pthread"), "max", "neon-dotprod"),
    Build("armv8", ("-march=armv8-a", "-pthread"), "cortex-a53", "neon"),
]


def _toolchain_root() -> Path:
    return Path(os.environ.get("TERNARY_ARM_TOOLCHAIN", ROOT / ".venv" / "arm-toolchain"))


def _arm_tools() -> tuple[list[str], dict[str, str], str]:
    """The cross gcc command, the environment it runs in and the qemu binary: the packages that
    scripts/install_arm_toolchain.sh unpacked without root if it did, else the system's."""
    cache, env = _toolchain_root(), dict(os.environ)
    qemus = [cache / "usr/bin" / name for name in ("qemu-aarch64-static", "qemu-aarch64")]  # Debian 13: unsuffixed
    if (cache / ".complete").exists():
        host_libs = [str(p) for p in sorted((cache / "usr/lib").glob("*-linux-gnu"))]  # binutils' libbfd
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*host_libs, env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
        qemu = next((str(q) for q in qemus if q.exists()), None)
        assert qemu, f"{cache} has no qemu-aarch64: delete it and run scripts/install_arm_toolchain.sh"
        return [str(cache / "usr/bin/aarch64-linux-gnu-gcc"), f"--sysroot={cache}"], env, qemu
    gcc = shutil.which("aarch64-linux-gnu-gcc")
    qemu = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    assert gcc and qemu, (
        "aarch64 cross compiler or qemu-aarch64 missing: run scripts/install_arm_toolchain.sh "
        "(apt packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)")
    return [gcc], env, qemu


@dataclass
class Case:
    m: int
    n: int
    k: int
    g: int
    x: torch.Tensor  # (M, K) float32
    codes: torch.Tensor  # (N, K) int64, 0..3
    scales: torch.Tensor  # (N, K/G) float16
    ids: torch.Tensor  # (count,) int64

    @property
    def ldy(self) -> int:
        return self.n + 3  # a row stride wider than N: the kernel must write only columns < N

    @property
    def int8(self) -> bool:
        """The int8 path's contract: K and G multiples of 32 (the harness runs it only then)."""
        return self.k % 32 == 0 and self.g % 32 == 0


def _make_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(28)
    shapes = [(m, k, g) for m in (1, 3, 17) for k in (64, 128, 256, 1024) for g in (64, 128) if g <= k]
    shapes += [(37, 256, 64),  # more than one 32-token tile
               (3, 320, 64), (2, 192, 64),  # the int8 path's K % 128 == 64 tail after full 128-steps
               (1, 64, 32), (17, 96, 32),  # G = 32: the int8 path's scalar fallback
               (1, 48, 16), (9, 48, 16)]  # exact path only (K, G multiples of 16): one word per group
    widths = [7, 13, 37, 5, 22, 41]  # never a multiple of 4: 4-row blocks plus a row tail
    cases = []
    for i, (m, k, g) in enumerate(shapes):
        n = widths[i % len(widths)]
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        codes = torch.randint(0, 4, (n, k), generator=gen)  # code 3 (+2, Q2_0) included
        scales = (torch.rand(n, k // g, generator=gen) * 0.1 + 0.005).half()
        scales[0, 0] = -scales[0, 0]
        scales[-1, -1] = 2.0**-20  # an fp16 subnormal
        ids = torch.tensor([0, n - 1, n // 2, 0, 1])
        if i == 0:  # ties of round-half-away (d = 1 exactly) and an all-zero block (d = 0)
            ties = torch.tensor([127.0, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5, -0.0, 3.5, -3.5])
            x[0, : len(ties)] = ties
            x[0, len(ties):32] = torch.linspace(-100, 100, 32 - len(ties)).round() + 0.5
            x[0, 32:64] = 0.0
        cases.append(Case(m, n, k, g, x, codes, scales, ids))
    return cases


def _write_cases(cases: list[Case], path: Path) -> None:
    parts = [np.array([len(cases)], "<i8").tobytes()]
    for c in cases:
        parts.append(np.array([c.m, c.n, c.k, c.g, c.ldy, len(c.ids), 2], "<i8").tobytes())
        parts.append(c.x.numpy().astype("<f4").tobytes())
        parts.append(pack_t2(c.codes).numpy().tobytes())  # the file layout, read by the kernel as words
        parts.append(c.scales.numpy().view("<u2").tobytes())
        parts.append(c.ids.numpy().astype("<i8").tobytes())
    path.write_bytes(b"".join(parts))


@dataclass
class Result:
    y: torch.Tensor
    rows: torch.Tensor
    q: torch.Tensor | None  # the int8 path's outputs, None where the case is exact-only
    d: torch.Tensor | None
    qsum: torch.Tensor | None
    y8: torch.Tensor | None


def _read_results(cases: list[Case], path: Path) -> list[Result]:
    data, pos, out = path.read_bytes(), 0, []

    def take(dtype: str, count: int) -> torch.Tensor:
        nonlocal pos
        arr = np.frombuffer(data, dtype, count, pos)
        pos += arr.nbytes
        return torch.from_numpy(arr.copy())

    for c in cases:
        nb = c.m * c.k // 32
        y = take("<f4", c.m * c.ldy).view(c.m, c.ldy)
        q8 = (take("i1", c.m * c.k).view(c.m, c.k), take("<f4", nb).view(c.m, -1), take("<i4", nb).view(c.m, -1),
              take("<f4", c.m * c.ldy).view(c.m, c.ldy)) if c.int8 else (None, None, None, None)
        out.append(Result(y, take("<f4", len(c.ids) * c.k).view(-1, c.k), *q8))
    assert pos == len(data), "harness wrote more than the cases ask for"
    return out


@dataclass
class Run:
    build: Build
    cases: list[Case]
    results: list[Result]
    stdout: str


@pytest.fixture(scope="module", params=BUILDS, ids=lambda b: b.name)
def neon_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    build: Build = request.param
    gcc_cmd, env, qemu = _arm_tools()
    tmp = tmp_path_factory.mktemp(f"neon_{build.name}")
    exe = tmp / "neon_harness"
    cmd = [*gcc_cmd, "-O3", "-static", *build.flags, f"-I{KERNEL_DIR}", str(HARNESS),
           str(KERNEL_DIR / "ternary_neon.c"), "-lm", "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert built.returncode == 0, f"cross compile failed:\n{built.stderr}"
    cases = _make_cases()
    _write_cases(cases, tmp / "cases.bin")
    ran = subprocess.run([qemu, "-cpu", build.qemu_cpu, str(exe), str(tmp / "cases.bin"), str(tmp / "out.bin")],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"harness under qemu failed ({ran.returncode}):\n{ran.stderr}"
    return Run(build, cases, _read_results(cases, tmp / "out.bin"), ran.stdout)


def _weights(c: Case) -> torch.Tensor:
    """(N, K) float64 weights (code - 1) * s."""
    s = c.scales.double().repeat_interleave(c.g, dim=1)
    return (c.codes - 1).double() * s


def _quantize_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The contract's rule in float64 where that equals one fp32 operation (a/b and a*b of fp32 values
    rounded once to fp32), and round half away from zero exactly (v + 0.5 is exact in float64)."""
    xb = x.view(x.shape[0], -1, 32)
    amax = xb.abs().amax(-1)
    d = (amax.double() / 127).float()
    inv = torch.where(d != 0, (1 / d.double()).float(), torch.zeros_like(d))
    v = (xb.double() * inv.double().unsqueeze(-1)).float().double()
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).to(torch.int8).view_as(x)
    return q, d, q.view(x.shape[0], -1, 32).to(torch.int32).sum(-1)


def _int8_cases(run: Run) -> list[tuple[Case, Result]]:
    pairs = [(c, r) for c, r in zip(run.cases, run.results, strict=True) if c.int8]
    assert pairs and all(r.q is not None for _, r in pairs)
    return pairs


def test_kernel_name_matches_build(neon_run: Run) -> None:
    assert neon_run.stdout.split() == [neon_run.build.kernel_name, "128"]


def test_exact_mm_matches_dense_float64(neon_run: Run) -> None:
    for c, r in zip(neon_run.cases, neon_run.results, strict=True):
        w = _weights(c)
        y = r.y[:, : c.n]
        assert not bool(y.isnan().any()), f"case {c.m}x{c.n}x{c.k} g{c.g}: output not written"
        assert bool(r.y[:, c.n:].isnan().all()), f"case {c.m}x{c.n}x{c.k} g{c.g}: wrote past column N"
        err = (y.double() - c.x.double() @ w.t()).abs()
        bound = (c.x.double().abs() @ w.abs().t()) * EXACT_REL + 1e-30
        assert bool((err <= bound).all()), (
            f"case {c.m}x{c.n}x{c.k} g{c.g}: worst err/bound {(err / bound).max().item():.3g}")


def test_quantize_q8_bit_identical(neon_run: Run) -> None:
    for c, r in _int8_cases(neon_run):
        q, d, qsum = _quantize_ref(c.x)
        assert torch.equal(r.d.view(torch.int32), d.view(torch.int32)), f"case {c.m}x{c.k}: d differs"
        assert torch.equal(r.q, q), f"case {c.m}x{c.k}: q differs at {(r.q != q).nonzero()[:5].tolist()}"
        assert torch.equal(r.qsum, qsum), f"case {c.m}x{c.k}: qsum differs"
    first = neon_run.results[0]
    assert first.q[0, :12].tolist() == [127, 3, -3, 1, -1, 2, -2, 127, -127, 0, 4, -4]  # half away from zero
    assert first.d[0, 1].item() == 0.0 and not bool(first.q[0, 32:64].any())


def test_mm_q8_matches_float64_formula(neon_run: Run) -> None:
    for c, r in _int8_cases(neon_run):
        nb = c.k // 32
        dots = torch.einsum("mbi,nbi->mnb", r.q.double().view(c.m, nb, 32), (c.codes - 1).double().view(c.n, nb, 32))
        s = c.scales.double().repeat_interleave(c.g // 32, dim=1)  # (N, NB)
        terms = r.d.double().unsqueeze(1) * s.unsqueeze(0) * dots  # (M, N, NB)
        y8 = r.y8[:, : c.n]
        assert not bool(y8.isnan().any()) and bool(r.y8[:, c.n:].isnan().all()), "wrote the wrong columns"
        err = (y8.double() - terms.sum(-1)).abs()
        bound = terms.abs().sum(-1) * Q8_REL + 1e-30
        assert bool((err <= bound).all()), (
            f"case {c.m}x{c.n}x{c.k} g{c.g}: worst err/bound {(err / bound).max().item():.3g}")


def test_ternary_rows_exact(neon_run: Run) -> None:
    for c, r in zip(neon_run.cases, neon_run.results, strict=True):
        assert torch.equal(r.rows, _weights(c)[c.ids].float()), f"case {c.n}x{c.k} g{c.g}: rows differ"
