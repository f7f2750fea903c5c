"""Does a catalog model fit this machine, which one to suggest, and one sentence saying why.

The one fit rule: ``ternary models``, the app's model manager and its first-run page all use
:func:`fit_of` and :func:`recommend_for` (the app through :mod:`app.core.model_fit`).

Why from the catalog's memory columns: they are the planner's own numbers (weights + KV cache at
4096 tokens + recurrent state + workspace + CUDA context), so the suggestion agrees with what
``ternary plan`` and the engine will do. A file fits the GPU when its minimum VRAM is within
``GPU_HEADROOM`` of the card's free memory, else the CPU when its minimum RAM is within
``RAM_HEADROOM`` of the available RAM. With a GPU we suggest the largest model that fits it; on a
CPU the smallest that fits in RAM, and none above ``CPU_MAX_PARAMETERS`` (about 8B), because decode
speed on a CPU is bound by memory bandwidth: every token reads all the weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runtime.devices import format_bytes
from runtime.hub.catalog import Catalog, CatalogFile, CatalogModel, chat_models

FITS_GPU = "gpu"
FITS_CPU = "cpu"  # fits in RAM only: runs on the CPU, slowly
NO_FIT = "none"
UNKNOWN = "unknown"  # the catalog has no memory figures for the file

CPU_MAX_PARAMETERS = 9_000_000_000
GPU_HEADROOM = 0.95  # keep 5% of free VRAM for the desktop and fragmentation
RAM_HEADROOM = 0.85  # leave room for the OS, the GUI and the browser the user has open


@dataclass
class MachineMemory:
    gpu_name: str | None
    gpu_free_bytes: int  # 0 without a CUDA GPU
    ram_available_bytes: int

    @classmethod
    def detect(cls) -> MachineMemory:
        from runtime.devices import detect

        rep = detect()
        best = max(rep.gpus, key=lambda g: g.free_bytes, default=None)
        return cls(best.name if best else None, best.free_bytes if best else 0, rep.ram_available_bytes)


@dataclass
class Fit:
    where: str  # FITS_GPU, FITS_CPU, NO_FIT or UNKNOWN
    need_bytes: int | None
    have_bytes: int

    def describe(self) -> str:
        if self.need_bytes is None:
            return "unknown"
        if self.where == FITS_GPU:
            return f"fits GPU ({format_bytes(self.need_bytes)} of {format_bytes(self.have_bytes)} free)"
        if self.where == FITS_CPU:
            return f"CPU only (needs {format_bytes(self.need_bytes)} RAM)"
        return f"too big (needs {format_bytes(self.need_bytes)})"


def fit_of(f: CatalogFile, mem: MachineMemory) -> Fit:
    """Where ``f`` runs on this machine; a missing figure only rules out its own device."""
    vram, ram = f.min_vram_bytes, f.min_ram_bytes
    if vram is None and ram is None:
        return Fit(UNKNOWN, None, 0)
    if mem.gpu_free_bytes and vram is not None and vram <= mem.gpu_free_bytes * GPU_HEADROOM:
        return Fit(FITS_GPU, vram, mem.gpu_free_bytes)
    if ram is not None and ram <= mem.ram_available_bytes * RAM_HEADROOM:
        return Fit(FITS_CPU, ram, mem.ram_available_bytes)
    return Fit(NO_FIT, vram if mem.gpu_free_bytes and vram is not None else ram,
               mem.gpu_free_bytes or mem.ram_available_bytes)


@dataclass
class Recommendation:
    model: CatalogModel | None
    file: CatalogFile | None
    device: str  # "gpu" | "cpu" | "none"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.id if self.model else None, "file": self.file.file if self.file else None,
                "device": self.device, "reason": self.reason}


def _rank(m: CatalogModel) -> tuple[int, int, int]:
    # Bigger first (in whole billions: 26.90B and 26.896B are the same class); then Bonsai 2 first;
    # then the bigger default file (the only measure of size where the catalog has no parameter count).
    d = m.default_file()
    size = d.packed_bytes or d.size or d.approx_size or 0
    return (round((m.parameters or 0) / 1e9), 1 if m.generation == "bonsai-2" else 0, size)


def recommend_model(catalog: Catalog, mem: MachineMemory | None = None) -> Recommendation:
    """The suggestion for this machine (detected when ``mem`` is None) among the catalog's models."""
    return recommend_for(catalog.models, mem or MachineMemory.detect())


def recommend_for(candidates: Iterable[CatalogModel], mem: MachineMemory) -> Recommendation:
    """The suggestion among ``candidates``; user additions and embedding models are never suggested."""
    # embedding models serve document search: never suggested as the model to chat with
    models = sorted((m for m in chat_models(list(candidates)) if not m.user and not m.local_path and m.files),
                    key=_rank, reverse=True)

    def options(m: CatalogModel) -> list[CatalogFile]:
        d = m.default_file()
        rest = sorted((f for f in m.files if f is not d and not f.legacy), key=lambda f: f.min_vram_bytes or 0)
        return [d, *rest]

    if mem.gpu_free_bytes:
        for m in models:
            for f in options(m):
                if fit_of(f, mem).where == FITS_GPU:
                    variant = "" if f.default else f" in its smaller {f.variant} packing"
                    return Recommendation(m, f, FITS_GPU, (
                        f"{m.name}{variant} is the largest model whose minimum footprint "
                        f"({format_bytes(f.min_vram_bytes)} at 4096 tokens of context) fits the "
                        f"{format_bytes(mem.gpu_free_bytes)} free on {mem.gpu_name or 'your GPU'}; longer contexts "
                        "use the remaining memory."))
    # On the CPU decode speed falls with model size (measured on 2 cores: 1.7B ~38 tok/s; the 8B reads
    # 4.7x the bytes per token), so the smallest model that fits is the one that feels like a chat.
    for m in reversed(models):
        if (m.parameters or 0) > CPU_MAX_PARAMETERS:
            continue
        for f in options(m):
            if fit_of(f, mem).where == FITS_CPU:
                why_cpu = ("no CUDA GPU was found" if not mem.gpu_free_bytes
                           else f"even the smallest model does not fit the {format_bytes(mem.gpu_free_bytes)} free on the GPU")
                return Recommendation(m, f, FITS_CPU, (
                    f"{m.name} runs on the CPU because {why_cpu}; it needs {format_bytes(f.min_ram_bytes)} of the "
                    f"{format_bytes(mem.ram_available_bytes)} RAM available. It is the smallest catalog model: on a "
                    "CPU every token reads all weights, so bigger models answer several times slower."))
    smallest = min((f for m in models for f in m.files), key=lambda f: f.min_ram_bytes or 1 << 62, default=None)
    owner = next((m for m in models if smallest in m.files), None)
    need = format_bytes(smallest.min_ram_bytes) if smallest else "?"
    return Recommendation(None, None, NO_FIT, (
        f"no catalog model fits: the smallest ({owner.name if owner else '?'}) needs {need} but only "
        f"{format_bytes(mem.ram_available_bytes)} RAM is available"
        + (f" and {format_bytes(mem.gpu_free_bytes)} VRAM is free" if mem.gpu_free_bytes else "") + "."))
