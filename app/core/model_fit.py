"""Will a catalog model fit this machine? Which one should a first-time user download?

Why here: the model manager and the first-run page describe the machine with :class:`Hardware`
(totals and names for display as well as what is free). The rule itself is the runtime's one,
:mod:`runtime.hub.recommend`, so the app and ``ternary models`` never disagree: the catalog's
``min_vram_bytes`` / ``min_ram_bytes`` (the planner's arithmetic at a 4096-token context) against
what :func:`runtime.devices.detect` reports right now, with the same headroom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.hub.recommend import FITS_CPU, FITS_GPU, NO_FIT, UNKNOWN, MachineMemory, fit_of, recommend_for

__all__ = ["FITS_CPU", "FITS_GPU", "NO_FIT", "UNKNOWN", "Hardware", "fit", "recommend"]


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

    def memory(self) -> MachineMemory:
        """What the fit rule compares against (no GPU counted without a detected card)."""
        return MachineMemory(self.gpu_name or None, self.gpu_free_bytes if self.gpu_total_bytes else 0,
                             self.ram_available_bytes)


def fit(file: Any, hw: Hardware) -> str:
    """FITS_GPU, FITS_CPU, NO_FIT or UNKNOWN for one catalog file (:func:`runtime.hub.recommend.fit_of`)."""
    return fit_of(file, hw.memory()).where


def recommend(models: list[Any], hw: Hardware) -> tuple[Any, Any] | None:
    """(model, file) that :func:`runtime.hub.recommend.recommend_for` suggests, or None when none fits."""
    rec = recommend_for(models, hw.memory())
    return (rec.model, rec.file) if rec.model is not None else None
