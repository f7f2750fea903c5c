"""Damaged history databases and settings files (issue 26, items 18-19), over the corpus in damaged_state.py.

History: opening never fails; the damaged file is kept byte for byte (moved aside, or untouched
when a newer version wrote it); the store that comes back reads and writes. Settings: loading
never fails; every value is either the one the file held or its default (never a third value);
one invalid value resets only itself; a damaged file is kept as a copy before anything is written;
the last good copy fills in what a damaged file lost; the user is told (the report is not ok).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from app.core.history import SCHEMA_VERSION, HistoryStore, open_history
from app.core.settings_file import backup_path
from app.core.settings_model import AppSettings
from tests.app.damaged_state import (
    MODEL_KEY,
    default_leaves,
    good_settings,
    good_text,
    history_cases,
    leaf_fields,
    real_history,
    settings_cases,
    write_backup,
)

HISTORY = history_cases()
SETTINGS = settings_cases()


def _snapshot(path: Path) -> str:
    """What is at ``path``: a hash of a file's bytes, or its kind."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return "dir" if stat.S_ISDIR(st.st_mode) else "fifo" if stat.S_ISFIFO(st.st_mode) else "other"


# -- history ------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", HISTORY, ids=[c.name for c in HISTORY])
def test_history_opens_whatever_the_file_and_keeps_it(case, tmp_path):
    path = tmp_path / "history.sqlite3"
    undo = case.make(path)
    before = _snapshot(path)
    t0 = time.monotonic()
    try:
        store, problem = open_history(path)
    finally:
        if undo:
            undo()
    assert time.monotonic() - t0 < 10
    assert (problem.code if problem else "ok") in case.expect
    if problem is not None and problem.code in ("damaged", "not_a_file"):
        assert problem.moved_to is not None and problem.moved_to.parent == tmp_path
        assert _snapshot(problem.moved_to) == before  # kept exactly as found
    elif problem is not None and problem.code == "upgraded":
        assert _snapshot(problem.moved_to) == before  # the copy made before the upgrade
    elif problem is not None and problem.code in ("newer", "locked"):
        assert _snapshot(path) == before  # never written to
    # the history that came back works
    c = store.create_conversation("after")
    store.add_message(c.id, "user", "still saved")
    assert [m.content for m in store.messages(c.id)] == ["still saved"]
    assert any(x.title == "after" for x in store.conversations())
    store.close()
    if problem is not None and problem.code in ("newer", "locked"):
        assert _snapshot(path) == before


def test_corrupt_page_keeps_the_readable_conversations(tmp_path):
    case = next(c for c in HISTORY if c.name == "corrupt-page-20-random")
    path = tmp_path / "history.sqlite3"
    case.make(path)
    store, problem = open_history(path)
    assert problem.code == "damaged" and problem.recovered >= 20  # of 30: only one page is lost
    titles = {c.title for c in store.conversations()}
    assert "chat 0" in titles and "chat 29" in titles  # both sides of the damaged page
    assert store.search("message 29.7")  # recovered messages are searchable
    store.close()


def test_newer_history_is_never_restamped_and_this_version_uses_a_separate_file(tmp_path):
    path = tmp_path / "history.sqlite3"
    real_history(path, conversations=3)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=5")
    db.close()
    before = path.read_bytes()
    with pytest.raises(Exception) as err:
        HistoryStore(path)
    assert getattr(err.value, "code", "") == "newer"
    store, problem = open_history(path)
    assert problem.code == "newer" and problem.version == 5
    assert problem.in_use == tmp_path / f"history-v{SCHEMA_VERSION}.sqlite3"
    store.create_conversation("chat in the older version")
    store.close()
    assert path.read_bytes() == before
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    db.close()
    again, problem = open_history(path)  # the next start finds the same separate file
    assert [c.title for c in again.conversations()] == ["chat in the older version"]
    again.close()


def test_older_layout_is_upgraded_and_its_messages_are_searchable(tmp_path):
    case = next(c for c in HISTORY if c.name == "older-missing-columns")
    path = tmp_path / "history.sqlite3"
    case.make(path)
    store, problem = open_history(path)
    assert problem.code == "upgraded"
    [conv] = store.conversations()
    assert conv.title == "kept chat" and [m.content for m in store.messages(conv.id)] == ["kept message"]
    assert [c.id for c in store.search("kept message")] == [conv.id]
    store.close()


# -- settings -----------------------------------------------------------------------------------
def _under(key: str, field: str) -> bool:
    return bool(field) and (key == field or key.startswith(field + ".") or key.startswith(field + "["))


@pytest.mark.parametrize("case", SETTINGS, ids=[c.name for c in SETTINGS])
def test_settings_load_keeps_every_valid_value_and_the_damaged_file(case, tmp_path):
    path = tmp_path / "settings.json"
    if case.with_backup:
        write_backup(path)
    case.make(path)
    before = _snapshot(path)
    t0 = time.monotonic()
    settings, report = AppSettings.load_with_report(path)
    assert time.monotonic() - t0 < 10
    good = leaf_fields(good_settings())
    loaded = default_leaves() | leaf_fields(settings)
    defaults = default_leaves()
    if "ok" in case.expect:
        assert report.ok, (report.problems, report.reset_fields)
        assert loaded == good
        return
    assert not report.ok  # the user is told
    assert report.damaged_copy is not None and _snapshot(report.damaged_copy) == before
    for key, value in loaded.items():  # never a third value (a number cut short, a wrong type kept)
        repaired_text = case.klass == "bad_utf8" and isinstance(value, str) and "\ufffd" in value
        assert value in (good[key], defaults[key]) or repaired_text, key
    if case.broken_field:
        assert any(_under(f, case.broken_field) or _under(case.broken_field, f) for f in report.reset_fields) \
            or case.broken_field in report.reset_fields
        for key in good:
            if _under(key, case.broken_field):
                assert loaded[key] == defaults[key], key
            else:
                assert loaded[key] == good[key], key  # one invalid value resets only itself
    if case.with_backup and case.klass != "bad_utf8":
        assert loaded == good  # what the damaged file lost came from the last good save
    # the repaired settings were saved; the next save keeps the copy and refreshes the backup
    settings.interface.theme = "light"
    settings.save(path)
    assert _snapshot(report.damaged_copy) == before
    assert json.loads(backup_path(path).read_text(encoding="utf-8"))["interface"]["theme"] == "light"
    again, report2 = AppSettings.load_with_report(path)
    assert report2.ok and again == settings


def test_truncated_file_keeps_the_values_before_the_cut(tmp_path):
    path = tmp_path / "settings.json"
    text = good_text()
    cut = text.index('"sampling"') + 40  # inside the sampling section: hardware..interface are complete
    path.write_text(text[:cut], encoding="utf-8")
    settings, report = AppSettings.load_with_report(path)
    assert report.problems == ["not_json"] and report.restored_from is None
    good = good_settings()
    assert (settings.hardware, settings.downloads, settings.interface) == (good.hardware, good.downloads,
                                                                           good.interface)
    assert report.damaged_copy.read_text(encoding="utf-8") == text[:cut]


def test_bad_byte_in_the_system_prompt_keeps_everything_else(tmp_path):
    path = tmp_path / "settings.json"
    raw = good_text().encode("utf-8")
    at = raw.index("请".encode())
    path.write_bytes(raw[:at] + b"\xff" + raw[at + 1:])
    settings, report = AppSettings.load_with_report(path)
    assert report.problems == ["encoding"]
    assert settings.sampling_for(MODEL_KEY).system_prompt.startswith("Answer briefly. \ufffd")
    assert settings.hardware == good_settings().hardware and settings.interface == good_settings().interface


def test_save_never_overwrites_a_damaged_file_without_a_copy(tmp_path):
    path = tmp_path / "settings.json"
    AppSettings().save(path)
    path.write_text('{"interface": {"theme": "dark"}, "hardware": {"device": "tp', encoding="utf-8")  # hand edit
    damaged = path.read_bytes()
    good_settings().save(path)  # a window still holding older settings saves
    copies = list(tmp_path.glob("settings.json.damaged-*"))
    assert [c.read_bytes() for c in copies] == [damaged]
    assert backup_path(path).read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


def test_loading_twice_does_not_pile_up_copies(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"interface": {"theme": "dark"', encoding="utf-8")
    AppSettings.load_with_report(path, repair=False)
    assert list(tmp_path.iterdir()) == [path]  # a second instance writes nothing
    _, first = AppSettings.load_with_report(path)
    _, second = AppSettings.load_with_report(path)
    assert not first.ok and second.ok  # repaired and saved: the next start is clean
    assert len(list(tmp_path.glob("settings.json.damaged-*"))) == 1
