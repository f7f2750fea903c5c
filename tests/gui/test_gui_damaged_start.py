"""The app starts on any damaged state and says so in its window (issue 26, items 18-19).

Each test runs the real start-up of ``app.main`` (``start()``: logging, settings, history, single
instance guard, the real MainWindow) in an isolated TERNARY_CHAT_HOME holding one damaged file from
the corpus in tests/app/damaged_state.py; the subprocess tests run ``python -m app --smoke-test``
itself, where a QThread destroyed while running would abort the process.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QTimer
from PySide6.QtWidgets import QApplication

from app.main import start
from tests.app.damaged_state import (
    MODEL_KEY,
    good_settings,
    history_cases,
    real_history,
    settings_cases,
    write_backup,
)

ROOT = Path(__file__).resolve().parents[2]
HISTORY = history_cases()
SETTINGS = settings_cases()


@pytest.fixture
def started(qtbot):
    """``started(argv...)`` -> the Startup of the real start-up; shut down and deleted after the test."""
    runs = []

    def run(*args: str):
        # the notices are checked in English; the corpus's good settings choose 简体中文
        lang = [] if "--language" in args else ["--language", "en"]
        st = start(["ternary-chat", *lang, *args], autoload=False)
        runs.append(st)
        return st

    yield run
    from app.translation import install_translation

    install_translation(QApplication.instance(), "en")  # while the windows can still take the change
    QApplication.processEvents()
    for st in runs:
        st.shutdown()
        if st.window is not None:
            st.window.deleteLater()  # a closed window must not get later tests' language changes
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _home_paths(home: Path) -> tuple[Path, Path]:
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "config").mkdir(parents=True, exist_ok=True)
    return home / "data" / "history.sqlite3", home / "config" / "settings.json"


@pytest.mark.parametrize("case", HISTORY, ids=[c.name for c in HISTORY])
def test_app_starts_on_a_damaged_history_and_says_where_the_copy_is(case, started, isolated_home):
    history, _ = _home_paths(isolated_home)
    undo = case.make(history)
    try:
        st = started()
    finally:
        if undo:
            undo()
    w = st.window
    assert w is not None and w.isVisible()
    text = w.banner.text()
    if "ok" in case.expect and not st.notices:
        assert not w.banner.isVisible()
    else:
        assert w.banner.isVisible() and str(history) in text
    moved = sorted(history.parent.glob("history.sqlite3.damaged-*")) + sorted(
        history.parent.glob("history.sqlite3.pre-upgrade-*"))
    if "damaged" in case.expect or "not_a_file" in case.expect or "upgraded" in case.expect:
        if "ok" not in case.expect or moved:
            assert moved and str(moved[0]) in text  # the window names the kept copy
    if case.klass == "newer_schema":
        assert "newer version" in text and "history-v1.sqlite3" in text
    if case.klass == "locked":
        assert "in use by another program" in text
    if case.klass in ("bad_rows", "older_schema") and "damaged" not in case.expect:
        assert w.conversation_list.count() >= 1  # the user's conversations are shown
    w.new_conversation()  # the history the window got works
    assert w.conversation_id is not None


def test_corrupt_page_start_shows_the_recovered_chats(started, isolated_home):
    history, _ = _home_paths(isolated_home)
    next(c for c in HISTORY if c.name == "corrupt-page-20-random").make(history)
    w = started().window
    assert "Conversations that could still be read were copied into the new history" in w.banner.text()
    assert w.conversation_list.count() >= 20


_SETTINGS_SAMPLE = [c for c in SETTINGS if c.name in (
    "truncated-0.5", "truncated-0.5-bak", "bad-utf8-at-device", "bad-utf8-at-请", "wrong-hardware.context_length-string",
    "wrong-hardware.context_length-null", "section-hardware-list", "section-sampling-list", "deep-top-100000",
    "deep-in-field-100000", "not-object-list", "not-object-null", "directory", "fifo", "garbage-bak",
    "newer-version", "too-large", "wrong-interface.theme-number")]


@pytest.mark.parametrize("case", _SETTINGS_SAMPLE, ids=[c.name for c in _SETTINGS_SAMPLE])
def test_app_starts_on_damaged_settings_keeps_valid_values_and_tells(case, started, isolated_home):
    _, settings = _home_paths(isolated_home)
    if case.with_backup:
        write_backup(settings)
    case.make(settings)
    st = started()
    w = st.window
    assert w is not None and w.isVisible() and w.banner.isVisible()
    text = w.banner.text()
    copies = sorted(settings.parent.glob("settings.json.damaged-*")) + sorted(settings.parent.glob("settings.json.v*-*"))
    assert copies and str(copies[0]) in text  # where the file as it was is kept
    good = good_settings()
    if case.broken_field:
        assert case.broken_field in text  # which setting went back to its default
    if case.broken_field.startswith("hardware."):
        assert w.settings.interface == good.interface and w.settings.sampling == good.sampling
    if case.with_backup and case.klass != "bad_utf8":
        assert "last good copy" in text and w.settings == good
    if case.name == "bad-utf8-at-请":
        assert w.settings.sampling_for(MODEL_KEY).system_prompt.startswith("Answer briefly.")
        assert w.settings.hardware == good.hardware
    w.save_settings()  # the user's next change: the copy stays
    assert copies[0].exists() or copies[0].is_symlink()


def test_truncated_settings_keep_system_prompt_theme_device_and_context(started, isolated_home):
    """The issue's example: a truncated settings.json lost all four; now the last good copy restores them."""
    _, settings = _home_paths(isolated_home)
    good_settings().save(settings)  # a good save leaves settings.json.bak
    text = settings.read_text(encoding="utf-8")
    settings.write_text(text[: len(text) // 3], encoding="utf-8")
    w = started().window
    s = w.settings
    assert (s.hardware.device, s.hardware.context_length, s.interface.theme) == ("cpu", 8192, "dark")
    assert s.sampling_for(MODEL_KEY).system_prompt == "Answer briefly. 请简短回答。"
    assert "cut short or damaged" in w.banner.text() and "settings.json.bak" in w.banner.text()


def test_second_instance_is_told_and_hands_its_file_to_the_first(started, isolated_home, tmp_path, qtbot):
    first = started()
    assert first.guard is not None
    seen = []

    def answer_box():
        box = QApplication.activeModalWidget()
        if box is None or box.objectName() != "alreadyRunning":
            QTimer.singleShot(50, answer_box)
            return
        seen.append(box.text() + " " + box.informativeText())
        box.accept()

    stray = tmp_path / "notes.xyz"
    stray.write_text("not a document")
    QTimer.singleShot(50, answer_box)
    second = start(["ternary-chat", str(stray)], autoload=False)
    assert second.window is None and second.exit_code == 0
    assert seen and "Ternary Chat is already running." in seen[0] and "brought to the front" in seen[0]
    # the first window receives the file, as if it had been dropped on it
    qtbot.waitUntil(lambda: "notes.xyz" in first.window.banner.text(), timeout=5000)
    assert first.window.isVisible()


def test_stale_or_damaged_lock_does_not_block_the_start(started, isolated_home):
    data, _ = _home_paths(isolated_home)
    lock = data.parent / "ternary-chat.lock"
    lock.write_text("garbage, no process id\n")
    st = started()
    assert st.window is not None and st.guard is not None
    assert list(data.parent.glob("ternary-chat.lock.damaged-*"))  # kept, not deleted


def test_file_where_a_folder_belongs_is_moved_aside(started, isolated_home):
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "config").write_text("a file where the config folder belongs")
    w = started().window
    kept = list(isolated_home.glob("config.damaged-*"))
    assert kept and kept[0].read_text() == "a file where the config folder belongs"
    assert str(kept[0]) in w.banner.text()


def _smoke(home: Path, *extra: str, code: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, TERNARY_CHAT_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    cmd = [sys.executable, "-c", code + "\nfrom app.main import main; raise SystemExit(main(['ternary-chat', "
           "'--smoke-test']))"] if code else [sys.executable, "-m", "app", "--smoke-test", *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["corrupt-page-3-random", "older-missing-columns", "foreign-layout",
                                  "truncated-12288", "directory-empty", "newer-v2"])
def test_real_entry_point_starts_on_damaged_history(name, tmp_path):
    home = tmp_path / "home"
    history, _ = _home_paths(home)
    next(c for c in HISTORY if c.name == name).make(history)
    done = _smoke(home)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "smoke test ok" in done.stdout and "QThread: Destroyed" not in done.stderr


def test_real_entry_point_starts_while_another_program_locks_the_history(tmp_path):
    home = tmp_path / "home"
    history, _ = _home_paths(home)
    real_history(history, conversations=2)
    holder = sqlite3.connect(history, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE conversations SET title=title")
    try:
        done = _smoke(home)
    finally:
        holder.close()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "smoke test ok" in done.stdout and "QThread: Destroyed" not in done.stderr


def test_window_that_fails_to_build_stops_its_worker_thread_and_the_app_still_starts(tmp_path):
    """Anything unforeseen while building the window: no 'QThread: Destroyed while running' abort."""
    home = tmp_path / "home"
    _home_paths(home)
    code = ("import app.core.history as h\n"
            "real = h.HistoryStore.conversations\n"
            "calls = []\n"
            "def once(self):\n"
            "    calls.append(1)\n"
            "    if len(calls) == 1:\n"
            "        raise RuntimeError('unforeseen')\n"
            "    return real(self)\n"
            "h.HistoryStore.conversations = once\n")
    done = _smoke(home, code=code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "smoke test ok" in done.stdout and "QThread: Destroyed" not in done.stderr
    with contextlib.suppress(FileNotFoundError):
        log = (home / "logs" / "ternary-chat.log").read_text(encoding="utf-8")
        assert "retrying with a history in memory" in log


def test_start_notice_survives_the_last_model_loading(qtbot, isolated_home, tiny_model_path):
    """The notice about a damaged file must not vanish when the last model finishes loading a moment later
    (a real start autoloads it); only the user's ✕ closes it."""
    from app.core.settings_model import AppSettings

    _, settings_path = _home_paths(isolated_home)
    s = AppSettings()
    s.hardware.device = "cpu"
    s.last_model = tiny_model_path
    s.save()
    text = settings_path.read_text(encoding="utf-8")
    settings_path.write_text(text[: len(text) // 2], encoding="utf-8")  # cut short
    st = start(["ternary-chat"], autoload=True)
    try:
        w = st.window
        assert w.loading
        with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
            pass
        copies = sorted(settings_path.parent.glob("settings.json.damaged-*"))
        assert copies and w.banner.isVisible() and str(copies[0]) in w.banner.text()
        w.show_error("a later error")
        assert "a later error" in w.banner.text() and str(copies[0]) in w.banner.text()
        w.clear_banner()
        assert w.banner.isVisible() and str(copies[0]) in w.banner.text()
        w.banner_close.click()
        assert not w.banner.isVisible()
    finally:
        st.shutdown()
        if st.window is not None:
            st.window.deleteLater()
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
