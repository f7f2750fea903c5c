"""Model recommendation from VRAM/RAM, with a reason."""

from __future__ import annotations

from runtime.hub.catalog import Catalog
from runtime.hub.recommend import MachineMemory, recommend_model

GiB = 1024**3


def test_big_gpu_gets_bonsai_2_27b(paths):
    rec = recommend_model(Catalog.load(paths), MachineMemory("RTX 4090", 22 * GiB, 32 * GiB))
    assert rec.model.id == "bonsai-2-27b" and rec.file.variant == "PQ2_0" and rec.device == "gpu"
    assert "RTX 4090" in rec.reason and "fits" in rec.reason


def test_8gb_card_gets_the_smaller_27b_packing(paths):
    cat = Catalog.load(paths)
    ptq = cat.get("bonsai-2-27b").file_named("PTQ1_0")
    pq = cat.get("bonsai-2-27b").default_file()
    free = int((ptq.min_vram_bytes + pq.min_vram_bytes) / 2 / 0.95)  # PTQ1_0 fits, PQ2_0 does not
    rec = recommend_model(cat, MachineMemory("RTX 3070", free, 16 * GiB))
    assert rec.model.id == "bonsai-2-27b" and rec.file.variant == "PTQ1_0" and "PTQ1_0" in rec.reason


def test_small_gpu_gets_a_small_model(paths):
    rec = recommend_model(Catalog.load(paths), MachineMemory("GTX 1650", 4 * GiB, 16 * GiB))
    assert rec.device == "gpu" and rec.model.id == "bonsai-8b"


def test_cpu_only_machine_gets_the_smallest_model_like_the_app(paths):
    """CLI and app agree: on a CPU the smallest model that fits (app.core.model_fit.recommend does the same)."""
    from app.core.model_fit import Hardware
    from app.core.model_fit import recommend as app_recommend

    rec = recommend_model(Catalog.load(paths), MachineMemory(None, 0, 64 * GiB))
    assert rec.device == "cpu" and rec.model.id == "bonsai-1.7b" and "no CUDA GPU" in rec.reason
    app_choice = app_recommend(Catalog.load(paths).models, Hardware(ram_total_bytes=64 * GiB,
                                                                     ram_available_bytes=64 * GiB))
    assert app_choice is not None and app_choice[0].id == rec.model.id
    cat = Catalog.load(paths)
    one7, four = cat.get("bonsai-1.7b").default_file(), cat.get("bonsai-4b").default_file()
    ram = int((one7.min_ram_bytes + four.min_ram_bytes) / 2 / 0.85)
    rec = recommend_model(cat, MachineMemory(None, 0, ram))
    assert rec.model.id == "bonsai-1.7b"


def test_nothing_fits(paths):
    rec = recommend_model(Catalog.load(paths), MachineMemory(None, 0, 512 * 1024**2))
    assert rec.model is None and rec.device == "none" and "smallest" in rec.reason
