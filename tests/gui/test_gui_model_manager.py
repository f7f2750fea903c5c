"""Model manager against the hub helper's loopback fake Hugging Face server (tests/hub)."""

from __future__ import annotations

import hashlib

from app.core.model_fit import FITS_CPU, FITS_GPU, NO_FIT, Hardware, fit, recommend
from app.model_manager import ModelManagerDialog, partial_bytes
from runtime.hub.catalog import Catalog, CatalogFile, CatalogModel, HubRepo
from runtime.hub.fetch import ModelFetcher
from runtime.hub.paths import HubPaths
from runtime.hub.settings import HubSettings
from runtime.hub.store import ModelStore
from runtime.hub.tokens import TokenStore
from tests.hub.hub_fake_server import FAST_RETRY, FakeHub, tiny_gguf

REPO = "prism-ml/Tiny-Bonsai-gguf"
GIB = 1024**3


def _catalog() -> Catalog:
    def model(mid, name, fname, vram, ram):
        f = CatalogFile(variant="PQ2_0", file=fname, format="gguf", default=True, approx_size=400_000,
                        min_vram_bytes=vram, min_ram_bytes=ram, packed_bytes=vram // 2)
        return CatalogModel(id=mid, name=name, architecture="qwen3", context_length=512, files=[f],
                            huggingface=HubRepo(REPO, "main"), description="test model")

    return Catalog([model("tiny-good", "Tiny Good", "good.gguf", 2 * GIB, 1 * GIB),
                    model("tiny-bad", "Tiny Corrupt", "bad.gguf", 3 * GIB, 2 * GIB),
                    model("tiny-slow", "Tiny Slow", "slow.gguf", 40 * GIB, 30 * GIB)], HubPaths.resolve())


def _dialog(qtbot, window, hub, hardware=None):
    fetcher = ModelFetcher(HubPaths.resolve(), HubSettings(source="hf", hf_endpoint=hub.url,
                                                            modelscope_endpoint=hub.url),
                           TokenStore(), retry=FAST_RETRY, stall_timeout_s=10.0)
    hw = hardware or Hardware(gpu_name="Test GPU", gpu_total_bytes=8 * GIB, gpu_free_bytes=7 * GIB,
                              ram_total_bytes=16 * GIB, ram_available_bytes=12 * GIB)
    dlg = ModelManagerDialog(window, catalog=_catalog(), hardware=hw, fetcher=fetcher)
    qtbot.addWidget(dlg)
    dlg.show()
    return dlg


def test_fit_and_recommendation():
    cat = _catalog()
    gpu = Hardware(gpu_total_bytes=8 * GIB, gpu_free_bytes=7 * GIB, ram_available_bytes=12 * GIB)
    cpu = Hardware(ram_available_bytes=12 * GIB)
    good, bad, slow = (m.default_file() for m in cat.models)
    assert (fit(good, gpu), fit(slow, gpu), fit(good, cpu)) == (FITS_GPU, NO_FIT, FITS_CPU)
    assert recommend(cat.models, gpu)[0].id == "tiny-bad"  # largest that fits the GPU
    assert recommend(cat.models, cpu)[0].id == "tiny-good"  # smallest that fits in RAM on a CPU
    assert recommend(cat.models, Hardware(ram_available_bytes=GIB // 2)) is None


def test_gui_model_manager_downloads_verifies_and_rejects_corrupt_file(qtbot, make_window):
    w = make_window(load=False)
    with FakeHub() as hub:
        good = tiny_gguf(300_000, seed=1)
        hub.add(REPO, "good.gguf", good)
        hub.add(REPO, "bad.gguf", tiny_gguf(300_000, seed=2), served=tiny_gguf(300_000, seed=3))  # bytes differ
        dlg = _dialog(qtbot, w, hub)
        names = [dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount())]
        assert names[1].startswith("Tiny Corrupt") and "Recommended" in names[1]
        assert dlg.table.item(2, 3).text().startswith("No")  # 40 GiB model does not fit
        assert dlg.table.item(0, 4).text() == "Not downloaded"

        dlg.select_key(("tiny-good", "good.gguf"))
        progress = []
        dlg.download_button.click()
        dlg.job.progress.connect(lambda p: progress.append(p))
        qtbot.waitUntil(lambda: dlg.job is None, timeout=60_000)
        assert dlg.last_result is not None and not dlg.last_error
        assert "Downloaded and verified: good.gguf" in dlg.result_label.text()
        assert hashlib.sha256(good).hexdigest()[:16] in dlg.result_label.text()
        installed = ModelStore().installed()
        assert [i.filename for i in installed] == ["good.gguf"] and installed[0].path.read_bytes() == good
        assert dlg.table.item(0, 4).text() == "Installed, verified"
        assert any(str(installed[0].path) == p for _label, p in w.available_models())  # in the model picker

        dlg.select_key(("tiny-bad", "bad.gguf"))
        dlg.download_button.click()
        qtbot.waitUntil(lambda: dlg.job is None, timeout=60_000)
        assert dlg.last_result is None and "Verification failed" in dlg.result_label.text()
        assert "sha256" in dlg.last_error and "quarantine" in dlg.last_error
        assert [i.filename for i in ModelStore().installed()] == ["good.gguf"]  # nothing unverified installed
        assert ModelStore().quarantined()[0]["file"] == "bad.gguf"
        assert dlg.table.item(1, 4).text() == "Not downloaded"

        dlg.select_key(("tiny-good", "good.gguf"))
        assert dlg.delete_button.isEnabled()
        dlg.delete_selected(confirm=False)
        assert ModelStore().installed() == [] and not installed[0].path.exists()
        assert dlg.table.item(0, 4).text() == "Not downloaded" and w.available_models() == []


def test_gui_model_manager_pause_resume_cancel(qtbot, make_window):
    w = make_window(load=False)
    with FakeHub() as hub:
        content = tiny_gguf(2_000_000, seed=4)
        hub.add(REPO, "slow.gguf", content, chunk_delay_s=0.02)
        dlg = _dialog(qtbot, w, hub, Hardware(gpu_total_bytes=80 * GIB, gpu_free_bytes=79 * GIB,
                                              ram_available_bytes=64 * GIB))
        dlg.select_key(("tiny-slow", "slow.gguf"))
        dlg.download_button.click()
        qtbot.waitUntil(lambda: "Downloading:" in dlg.progress_label.text(), timeout=30_000)
        qtbot.waitUntil(lambda: partial_bytes("slow.gguf") > 100_000, timeout=30_000)
        dlg.pause_button.click()
        qtbot.waitUntil(lambda: dlg.job is None, timeout=30_000)
        kept = partial_bytes("slow.gguf")
        assert 0 < kept < len(content) and "Paused" in dlg.progress_label.text()
        assert dlg.table.item(2, 4).text().startswith("Paused at")
        assert dlg.resume_button.isEnabled() and not dlg.download_button.isEnabled()
        dlg.resume_button.click()
        qtbot.waitUntil(lambda: dlg.job is None, timeout=60_000)
        assert "Downloaded and verified: slow.gguf" in dlg.result_label.text()
        assert dlg.last_result.resumed_from >= kept  # continued, not restarted
        # cancel deletes the partial file
        ModelStore().remove(ModelStore().installed()[0])
        dlg.refresh()
        dlg.select_key(("tiny-slow", "slow.gguf"))
        dlg.download_button.click()
        qtbot.waitUntil(lambda: partial_bytes("slow.gguf") > 100_000, timeout=30_000)
        dlg.cancel_button.click()
        qtbot.waitUntil(lambda: dlg.job is None, timeout=30_000)
        assert partial_bytes("slow.gguf") == 0 and "cancelled" in dlg.progress_label.text()


def test_gui_convert_hf_folder_to_ternary_and_load_it(qtbot, make_window, tiny_model_path, tmp_path):
    from app.convert_dialog import ConvertDialog

    w = make_window(load=False)
    dlg = ConvertDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.src_edit.setText(tiny_model_path)
    assert dlg.out_edit.text().endswith("hf.ternary")
    dlg.out_edit.setText(str(tmp_path / "tiny.ternary"))
    stages = []
    dlg.start_button.click()
    dlg.job.progress.connect(lambda p: stages.append(p[0]))
    qtbot.waitUntil(lambda: dlg.job is None, timeout=60_000)
    assert dlg.result is not None, dlg.error
    assert (tmp_path / "tiny.ternary").is_file() and dlg.progress.value() == 1000
    assert "Done:" in dlg.status.text()
    out = str((tmp_path / "tiny.ternary").resolve())
    assert out in [p for _label, p in w.available_models()]
    with qtbot.waitSignal(w.modelLoaded, timeout=60_000):
        w.load_model(out)
    assert w.model_info["path"] == out and w.model_info["context_length"] == 512  # the converted file runs


def test_gui_first_run_recommends_a_catalog_model_for_this_hardware(qtbot, make_window):
    w = make_window(load=False)
    assert w.stack.currentWidget() is w.welcome  # no model, no conversation: the first-run page
    w.welcome.set_hardware(Hardware(gpu_name="RTX 4060", gpu_total_bytes=8 * GIB, gpu_free_bytes=7 * GIB,
                                    ram_total_bytes=32 * GIB, ram_available_bytes=24 * GIB))
    text = w.welcome.recommend_label.text()
    assert text.startswith("Recommended for this computer: Ternary-Bonsai") and "on the GPU" in text
    m, f = w.welcome.recommendation
    assert f.min_vram_bytes <= 7 * GIB and w.welcome.start_button.isEnabled()
    w.welcome.set_hardware(Hardware(ram_total_bytes=2 * GIB, ram_available_bytes=GIB // 4))
    assert "None of the catalog models fits" in w.welcome.recommend_label.text()
    assert not w.welcome.start_button.isEnabled()


def _answer_delete(qtbot, dlg, button_text: str, seen: list[str]) -> None:
    """Click ``button_text`` in the delete confirmation once it is on screen (it runs its own event loop)."""
    from PySide6.QtCore import QTimer

    def act() -> None:
        box = getattr(dlg, "confirm_box", None)
        if box is None or not box.isVisible():
            QTimer.singleShot(20, act)
            return
        seen.append(box.text())
        seen.append("|".join(sorted(b.text() for b in box.buttons())))
        next(b for b in box.buttons() if b.text() == button_text).click()

    QTimer.singleShot(0, act)


def test_gui_delete_asks_what_happens_to_the_file_and_selects_nothing_after(qtbot, make_window, tmp_path):
    import os

    w = make_window(load=False)
    mine = [tmp_path / "mine-a.gguf", tmp_path / "mine-b.gguf"]
    for i, p in enumerate(mine):
        p.write_bytes(tiny_gguf(10_000, seed=10 + i))
    w.settings.local_models = [str(p) for p in mine]
    downloaded = tmp_path / "downloaded.gguf"
    content = tiny_gguf(2_000_000, seed=12)
    downloaded.write_bytes(content)
    item = ModelStore().install(downloaded, "prism-ml--Tiny-Bonsai-gguf", "good.gguf", size=len(content),
                                sha256=hashlib.sha256(content).hexdigest(), record={"source": "hf"})
    with FakeHub() as hub:
        dlg = _dialog(qtbot, w, hub)
        # imported in place: the user's own file is only forgotten, and the question says so
        assert dlg.select_key(("local", str(mine[0])))
        seen: list[str] = []
        _answer_delete(qtbot, dlg, "Cancel", seen)
        dlg.delete_button.click()
        assert seen and seen[0] == f"Remove mine-a.gguf from the list? The file stays at {mine[0]}."
        assert seen[1] == "Cancel|Remove from list"
        assert w.settings.local_models == [str(p) for p in mine]  # Cancel kept it
        seen.clear()
        _answer_delete(qtbot, dlg, "Remove from list", seen)
        dlg.delete_button.click()
        assert w.settings.local_models == [str(mine[1])] and mine[0].exists()
        # the next row (mine-b) must not have become the selection: a second click deletes nothing
        assert dlg.selected_row() is None and not dlg.delete_button.isEnabled()
        dlg.delete_button.click()
        assert w.settings.local_models == [str(mine[1])]

        # downloaded into the models folder: Delete deletes the file, and the question says how big it is
        assert dlg.select_key(("tiny-good", "good.gguf"))
        seen.clear()
        _answer_delete(qtbot, dlg, "Delete file", seen)
        dlg.delete_button.click()
        assert seen[0].startswith("Remove Tiny Good from the list and delete the file (1.91 MiB)?\n")
        assert str(item.path) in seen[0] and seen[1] == "Cancel|Delete file"
        assert not item.path.exists() and ModelStore().installed() == []
        assert dlg.selected_row() is None and not dlg.delete_button.isEnabled()
        assert os.path.exists(mine[1])


def test_gui_embedding_model_is_listed_downloadable_but_never_a_chat_model(qtbot, make_window):
    """The catalog's embedding model: its own label, a working Download, no recommendation, no Use."""
    w = make_window(load=False)
    emb_file = CatalogFile(variant="F16", file="emb.gguf", format="gguf", default=True, approx_size=300_000,
                           min_vram_bytes=GIB // 8, min_ram_bytes=GIB // 4, packed_bytes=300_000)
    emb = CatalogModel(id="tiny-emb", name="Tiny Embedding", architecture="qwen3", context_length=512,
                       files=[emb_file], huggingface=HubRepo(REPO, "main"), role="embedding")
    cat = _catalog()
    cat.models.append(emb)
    small = Hardware(ram_total_bytes=2 * GIB, ram_available_bytes=GIB // 2)  # only the embedding model fits
    assert fit(emb_file, small) == FITS_CPU  # it fits, yet the shared rule never suggests it for chat
    assert recommend([emb], small) is None
    with FakeHub() as hub:
        hub.add(REPO, "emb.gguf", tiny_gguf(300_000, seed=7))
        dlg = _dialog(qtbot, w, hub, small)
        dlg.catalog = cat
        dlg.refresh()
        row = next(r for r in range(dlg.table.rowCount()) if dlg.table.item(r, 0).text().startswith("Tiny Embedding"))
        assert dlg.table.item(row, 1).text() == "Embedding model (for document search)"
        assert not any("Recommended" in dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount()))
        dlg.select_key(("tiny-emb", "emb.gguf"))
        assert dlg.download_button.isEnabled() and not dlg.use_button.isEnabled()
        dlg.download_button.click()
        qtbot.waitUntil(lambda: dlg.job is None, timeout=60_000)
        assert "Downloaded and verified: emb.gguf" in dlg.result_label.text()
        assert dlg.table.item(row, 4).text() == "Installed, verified"
        dlg.select_key(("tiny-emb", "emb.gguf"))
        assert not dlg.use_button.isEnabled() and "document search" in dlg.use_button.toolTip()
        dlg.use_selected()  # even when called directly, nothing is loaded for chat
        assert w.model_path != str(ModelStore().installed()[0].path)
        dlg.select_key(("tiny-good", "good.gguf"))
        assert dlg.use_button.toolTip() == "Load the selected model and chat"
    w.welcome.catalog = cat
    w.welcome.set_hardware(small)
    assert w.welcome.recommendation is None and "None of the catalog models fits" in w.welcome.recommend_label.text()
