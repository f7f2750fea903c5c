"""What hardware this process can run on: CUDA GPUs, Apple MPS, the CPU, and how much memory each has.

Why a module of its own: the planner, the CLI (``ternary plan``), the benchmark and the GUI's
"will it fit" badge must agree on the numbers. Everything here is plain dataclasses and never
fails on a machine without a GPU; NVML (``nvidia-ml-py``) is used only when importable, because
``torch.cuda.mem_get_info`` already gives free/total and NVML only adds the device-level figure
(memory used by *all* processes, including other programs and the CUDA context).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

GiB = 1024**3
MiB = 1024**2

# Triton's GPU backend needs Volta (sm_70) or newer; older cards run the torch reference path.
TRITON_MIN_CAPABILITY = (7, 0)


@dataclass
class GPUInfo:
    """One CUDA device. ``free_bytes``/``total_bytes`` come from the driver (cudaMemGetInfo)."""

    index: int
    name: str
    capability: tuple[int, int]
    total_bytes: int
    free_bytes: int
    multiprocessors: int = 0
    device_used_bytes: int | None = None  # NVML: used by every process on the device
    triton_usable: bool = False

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}"


@dataclass
class DeviceReport:
    """Everything :func:`detect` found. ``best`` is the device the engine picks with device="auto"."""

    gpus: list[GPUInfo] = field(default_factory=list)
    mps: bool = False
    cpu_name: str = ""
    cpu_cores: int = 1
    ram_total_bytes: int = 0
    ram_available_bytes: int = 0
    triton_importable: bool = False
    torch_version: str = ""
    cuda_version: str | None = None

    @property
    def best(self) -> str:
        if self.gpus:
            return self.gpus[0].torch_device
        return "mps" if self.mps else "cpu"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best"] = self.best
        return d


def _triton_importable() -> bool:
    """Whether Triton is installed, without importing it: the import maps ~70 MiB of libtriton
    into every CPU-only process (measured on the 1.7B's peak RSS), for a fact the spec tells."""
    import importlib.util

    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def triton_supported(capability: tuple[int, int], triton_ok: bool | None = None) -> bool:
    """True when Triton kernels can run on a GPU of this compute capability."""
    if triton_ok is None:
        triton_ok = _triton_importable()
    return bool(triton_ok) and tuple(capability) >= TRITON_MIN_CAPABILITY


def nvml_used_bytes(index: int) -> int | None:
    """Device-level used memory (all processes) via NVML, or None if NVML is unavailable."""
    try:
        import pynvml  # provided by nvidia-ml-py
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def device_used_bytes(index: int = 0) -> int | None:
    """Device-level used memory: NVML if available, else total - free from the CUDA driver."""
    used = nvml_used_bytes(index)
    if used is not None:
        return used
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info(index)
        return int(total - free)
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def detect_gpus() -> list[GPUInfo]:
    """All visible CUDA devices (empty list on CPU-only torch builds or without a driver)."""
    try:
        import torch
    except Exception:
        return []
    if not torch.cuda.is_available():
        return []
    triton_ok = _triton_importable()
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        cap = (int(props.major), int(props.minor))
        try:
            free, total = torch.cuda.mem_get_info(i)
        except Exception:  # a broken/busy device: report it with what the properties say
            free, total = 0, int(props.total_memory)
        gpus.append(GPUInfo(
            index=i, name=str(props.name), capability=cap, total_bytes=int(total), free_bytes=int(free),
            multiprocessors=int(getattr(props, "multi_processor_count", 0)),
            device_used_bytes=nvml_used_bytes(i), triton_usable=triton_supported(cap, triton_ok),
        ))
    return gpus


def detect() -> DeviceReport:
    """Detect GPUs, MPS, CPU and RAM. Never raises; missing pieces are reported as absent."""
    import psutil

    rep = DeviceReport(cpu_name=_cpu_name(), cpu_cores=os.cpu_count() or 1)
    vm = psutil.virtual_memory()
    rep.ram_total_bytes, rep.ram_available_bytes = int(vm.total), int(vm.available)
    rep.triton_importable = _triton_importable()
    try:
        import torch

        rep.torch_version = torch.__version__
        rep.cuda_version = torch.version.cuda
        rep.mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    except Exception:
        return rep
    rep.gpus = detect_gpus()
    return rep


def format_bytes(n: int | float | None) -> str:
    """Human-readable binary size ("1.50 GiB")."""
    if n is None:
        return "n/a"
    n = float(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}


def parse_bytes(text: str | int) -> int:
    """Parse "6GiB", "8GB", "512MiB", "1.5 GiB" or a plain integer into bytes.

    GB/MB are decimal (10^9) and GiB/MiB binary (2^30), as printed on spec sheets vs by tools;
    a bare "G"/"M" is decimal too. Raises ``ValueError`` with the accepted forms on bad input.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"byte size must be non-negative, got {text}")
        return text
    s = str(text).strip().replace("_", "")
    i = len(s)
    while i > 0 and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    number, unit = s[:i].strip(), s[i:].strip().lower()
    if not number or unit not in _UNITS:
        raise ValueError(f"cannot parse byte size {text!r}: use e.g. 6GiB, 8GB, 512MiB or a number of bytes")
    try:
        value = float(number)
    except ValueError as exc:
        raise ValueError(f"cannot parse byte size {text!r}: use e.g. 6GiB, 8GB, 512MiB or a number of bytes") from exc
    if value < 0:
        raise ValueError(f"byte size must be non-negative, got {text!r}")
    return int(value * _UNITS[unit])


def resolve_device(device: str) -> torch.device:
    """``auto`` -> the first CUDA GPU if there is one, else the CPU."""
    import torch

    from runtime.errors import InvalidSettingError, UnsupportedModelError
    from runtime.sampling_params import DEVICE_EXPLANATION, check_device

    if isinstance(device, str) and check_device(device):
        raise InvalidSettingError(f"{DEVICE_EXPLANATION} Got {device!r}.", "device")
    if device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedModelError("CUDA was requested but no CUDA GPU is available (use --device cpu)")
    if dev.type not in ("cpu", "cuda"):
        raise UnsupportedModelError(f"device {device!r} is not supported (use auto, cpu or cuda)")
    if dev.type == "cuda" and dev.index is None:
        # "cuda" -> "cuda:N": tensors report an indexed device, and placement code compares devices
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev
