"""Importing a model file checks it first: a bad file never unloads the model in use, never enters the
model list (not even after a restart), and the refusal says why (issue 26, item 2)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from app.core.settings_model import AppSettings


@pytest.fixture(scope="module")
def tiny_ternary(tmp_path_factory, tiny_model_path) -> Path:
    """The tiny model as a valid ``.ternary`` file (the corpus below breaks copies of it)."""
    from runtime.formats.loader import load_model
    from runtime.formats.ternary_file import write_model

    path = tmp_path_factory.mktemp("ternary") / "tiny.ternary"
    write_model(load_model(tiny_model_path), path)
    return path


def _corpus(folder: Path, good: Path) -> dict[str, str]:
    """name -> a word the refusal must contain. Each one is a way real model files arrive broken."""
    data = good.read_bytes()
    files = {
        "error-page.gguf": (b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>", "HTML"),
        "pointer.ternary": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 123\n", "LFS"),
        "empty.gguf": (b"", "empty"),
        "truncated.ternary": (data[: len(data) // 2], "truncated"),
        "wrong-magic.ternary": (b"BONSAI9\0" + data[8:], "another format generation"),
        "future-version.gguf": (b"GGUF" + struct.pack("<IQQ", 7, 0, 0) + b"\0" * 64, "GGUF version 2 or 3"),
        "huge-header.ternary": (data[:12] + struct.pack("<Q", 1 << 60) + data[20:], "header length"),
        "absurd-count.gguf": (b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0) + b"\0" * 64, "implausible"),
    }
    out = {}
    for name, (content, word) in files.items():
        (folder / name).write_bytes(content)
        out[name] = word
    return out


def _import_and_wait(qtbot, w, path: str) -> None:
    """Drop ``path`` on the window and wait until its check (and any load it started) is over."""
    w.handle_dropped(path)
    qtbot.waitUntil(lambda: not getattr(w, "importing", "") and not w.loading, timeout=60_000)


def test_gui_bad_model_files_are_refused_before_touching_the_loaded_model(qtbot, make_window, tmp_path,
                                                                           tiny_model_path, tiny_ternary):
    w = make_window()  # the tiny model is loaded and working
    loaded = w.model_path
    corpus = _corpus(tmp_path, tiny_ternary)
    for name, word in corpus.items():
        path = str(tmp_path / name)
        _import_and_wait(qtbot, w, path)
        assert w.model_path == loaded and w.model_info.get("path") == loaded, f"{name} unloaded the model"
        assert w.send_button.isEnabled(), name
        text = w.banner.text()
        assert text.startswith(f"{name} was not imported:"), text
        assert word.lower() in text[len(name):].lower(), (name, text)
        assert "The model in use stays loaded." in text
        assert "Error" not in text and "Traceback" not in text
        assert str(Path(path).resolve()) not in w.settings.local_models
        assert all(Path(p).name != name for _label, p in w.available_models())

    # a named pipe would block a reader forever: refused by its kind, without opening it
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    _import_and_wait(qtbot, w, str(fifo))
    assert "named pipe" in w.banner.text() and w.model_info.get("path") == loaded

    # the model manager's "Import file…" takes the same path
    from PySide6.QtWidgets import QFileDialog

    from app.model_manager import ModelManagerDialog

    dlg = ModelManagerDialog(w, catalog=None)
    qtbot.addWidget(dlg)
    bad = str(tmp_path / "truncated.ternary")
    qtbot_patch = pytest.MonkeyPatch()
    qtbot_patch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (bad, "")))
    try:
        dlg.import_file_button.click()
    finally:
        qtbot_patch.undo()
    qtbot.waitUntil(lambda: not w.importing, timeout=60_000)
    assert "truncated.ternary was not imported" in w.banner.text() and w.model_info.get("path") == loaded
    dlg.refresh()
    names = [dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount())]
    assert not any(n in names for n in corpus), names

    # after a restart: the saved settings never held a refused file
    saved = AppSettings.load()
    assert not any(Path(p).name in corpus or p == str(fifo) for p in saved.local_models)
    from app.main_window import MainWindow

    again = MainWindow(settings=saved, autoload=False)
    qtbot.addWidget(again)
    assert not any(Path(p).name in corpus for _label, p in again.available_models())
    again.close()

    # a good file passes the same check, is listed and replaces the model
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.handle_dropped(str(tiny_ternary))
    assert w.model_path == str(tiny_ternary.resolve()) and str(tiny_ternary.resolve()) in w.settings.local_models
    assert str(tiny_ternary.resolve()) in AppSettings.load().local_models


def test_check_local_model_reports_every_corpus_file_and_passes_good_ones(tmp_path, tiny_model_path, tiny_ternary):
    from runtime.hub.verify import check_local_model

    corpus = _corpus(tmp_path, tiny_ternary)
    for name, word in corpus.items():
        problems = check_local_model(tmp_path / name)
        assert problems and word.lower() in " ".join(problems).replace(name, "").lower(), (name, problems)
        assert all(name in p for p in problems), problems
    assert check_local_model(tiny_ternary) == []
    assert check_local_model(tiny_model_path) == []  # a Hugging Face folder
    assert check_local_model(tmp_path / "gone.gguf") == ["gone.gguf: no such file or folder"]
    empty_folder = tmp_path / "folder"
    empty_folder.mkdir()
    assert "without config.json" in check_local_model(empty_folder)[0]
    os.mkfifo(tmp_path / "fifo.ternary")
    assert check_local_model(tmp_path / "fifo.ternary") == ["fifo.ternary: a named pipe (FIFO), not a model file"]
