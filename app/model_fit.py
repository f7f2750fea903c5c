"""Will a catalog model fit this machine? Which one should a first-time user download?

Why plain Python: the model manager, the first-run page and tests share it. The numbers are the
catalog's ``min_vram_bytes`` / ``min_ram_bytes`` (computed with the planner's arithmetic at a
4096-token context) compared with what :func:`runtime.devices.detect` reports right now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FITS_GPU = "gpu"
FITS_CPU = "cpu"  # fits in RAM only: runs on the CPU, slowly
NO_FIT = "none"
UNKNOWN = "unknown"


@dataclass
class Hardware:
    """The part of the device report the fit check needs (kept small so tests can build one)."""

    gpu_name: str = ""
    gpu_total_bytes: int = 0
    gpu_free_bytes: int = 0
    ram_total_bytes: int = 0
    ram_available_bytes: int = 0
    cpu_name: str = ""

    @classmethod
    def detect(cls) -> Hardware:
        from runtime import devices

        rep = devices.detect()
        hw = cls(ram_total_bytes=rep.ram_total_bytes, ram_available_bytes=rep.ram_available_bytes,
                 cpu_name=rep.cpu_name)
        if rep.gpus:
            g = rep.gpus[0]
            hw.gpu_name, hw.gpu_total_bytes, hw.gpu_free_bytes = g.name, g.total_bytes, g.free_bytes
        return hw


def fit(file: Any, hw: Hardware) -> str:
    """FITS_GPU, FITS_CPU, NO_FIT or UNKNOWN for one catalog file."""
    vram = getattr(file, "min_vram_bytes", None)
    ram = getattr(file, "min_ram_bytes", None)
    if vram is None and ram is None:
        return UNKNOWN
    if hw.gpu_total_bytes and vram is not None and vram <= hw.gpu_free_bytes:
        return FITS_GPU
    if ram is not None and ram <= hw.ram_available_bytes:
        return FITS_CPU
    return NO_FIT


def recommend(models: list[Any], hw: Hardware) -> tuple[Any, Any] | None:
    """(model, file): the largest default-variant model that fits on the GPU; without a fitting GPU
    the smallest one that fits in RAM (CPU decoding of a bigger model is too slow to chat with)."""
    for wanted in (FITS_GPU, FITS_CPU):
        best = None
        for m in models:
            if getattr(m, "user", False) or getattr(m, "local_path", None):
                continue
            f = m.default_file()
            if fit(f, hw) != wanted:
                continue
            size = getattr(f, "packed_bytes", None) or f.size or f.approx_size or 0
            better = size > best[2] if best is not None and wanted == FITS_GPU else (
                best is None or size < best[2])
            if better:
                best = (m, f, size)
        if best is not None:
            return best[0], best[1]
    return None
