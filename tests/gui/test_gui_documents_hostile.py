"""Hostile documents dropped on the real window: a clear banner, never a hang (issue 26, items 14, 17)."""

from __future__ import annotations

import os

import pytest

from tests.app.test_app_documents_hostile import docx_bomb
from tests.gui.test_gui_documents import _drop


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_gui_fifo_and_bomb_documents_get_clear_messages(qtbot, make_window, tmp_path):
    w = make_window()
    os.mkfifo(tmp_path / "pipe.txt")
    docx_bomb(tmp_path / "bomb.docx", unpacked_mb=300)
    cases = {"pipe.txt": "not a regular file", "bomb.docx": "too large when unpacked"}
    for name, words in cases.items():
        w.clear_banner()
        _drop(w, tmp_path / name)
        qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=30_000)
        assert words in w.banner.text() and name in w.banner.text()
        assert w._summary_cancel is None and w.send_button.isEnabled()
