"""Hostile run over damaged app state: every case of tests/app/damaged_state.py through the real start-up.

For each damaged history database and settings file the app is started with ``app.main.start``
(real settings loading, history opening, single-instance guard and MainWindow, offscreen) in a
fresh TERNARY_CHAT_HOME, and the outcome is counted per class:

* start failure: an exception, no window, or longer than 40 s;
* silent loss: the file as it was is not kept byte for byte (in place, moved aside or copied), a
  problem was found but the window shows no notice naming the kept copy, or a settings value came
  back as neither the file's value nor its default (or not the file's value although a last good
  copy existed).

Usage: ``QT_QPA_PLATFORM=offscreen python scripts/hostile_app_state.py [--markdown]``.
"""

from __future__ import annotations

import collections
import hashlib
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _snap(path: Path) -> str:
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return "dir" if stat.S_ISDIR(st.st_mode) else "fifo" if stat.S_ISFIFO(st.st_mode) else "other"


def _kept(before: str, folder: Path, name: str) -> list[Path]:
    """Files beside (or at) ``name`` in ``folder`` whose content is exactly ``before``."""
    out = []
    for p in folder.iterdir():
        if p.name == name or p.name.startswith(name + "."):
            try:
                if _snap(p) == before:
                    out.append(p)
            except OSError:
                pass
    return out


def run() -> dict[str, dict[str, collections.Counter]]:
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    from app.main import install_translation, start
    from tests.app.damaged_state import (
        default_leaves,
        good_settings,
        history_cases,
        leaf_fields,
        settings_cases,
        write_backup,
    )

    QApplication.instance() or QApplication(["hostile"])
    results: dict[str, dict[str, collections.Counter]] = {"history": collections.defaultdict(collections.Counter),
                                                           "settings": collections.defaultdict(collections.Counter)}
    good, defaults = leaf_fields(good_settings()), default_leaves()
    for kind, cases in (("history", history_cases()), ("settings", settings_cases())):
        for case in cases:
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp) / "home"
                (home / "data").mkdir(parents=True)
                (home / "config").mkdir(parents=True)
                os.environ["TERNARY_CHAT_HOME"] = str(home)
                target = home / ("data/history.sqlite3" if kind == "history" else "config/settings.json")
                if case.with_backup:
                    write_backup(target)
                undo = case.make(target)
                before = _snap(target)
                counter = results[kind][case.klass]
                counter["cases"] += 1
                t0 = time.monotonic()
                try:
                    st = start(["ternary-chat"], autoload=False)
                except Exception as exc:  # counted, then the run goes on
                    counter["start failure"] += 1
                    print(f"{kind}/{case.name}: start failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                finally:
                    if undo:
                        undo()
                w = st.window
                if w is None or not w.isVisible() or time.monotonic() - t0 > 40:
                    counter["start failure"] += 1
                    st.shutdown()
                    continue
                text = w.banner.text() if w.banner.isVisible() else ""
                kept = _kept(before, target.parent, target.name)
                loss = not kept
                if kind == "settings":
                    loaded = defaults | leaf_fields(w.settings)
                    for key, value in loaded.items():
                        ok_value = value in (good[key], defaults[key]) or (
                            case.klass == "bad_utf8" and isinstance(value, str) and "\ufffd" in value)
                        if case.with_backup and case.klass != "bad_utf8" and key != case.broken_field:
                            ok_value = value == good[key]
                        loss |= not ok_value
                    changed = loaded != good
                    told = bool(text) and any(str(p) in text for p in kept if p != target)
                    loss |= changed and not told
                    counter["told" if text else "no notice (file was fine)"] += 1
                else:
                    problem = bool(text)
                    moved = [p for p in kept if p != target]
                    if problem and moved:
                        loss |= not any(str(p) in text for p in moved)
                    counter["told" if problem else "opened as is"] += 1
                counter["silent loss" if loss else "kept"] += 1
                install_translation(QApplication.instance(), "en")
                QApplication.processEvents()
                st.shutdown()
                w.deleteLater()
                QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return results


def main() -> int:
    results = run()
    lines = ["| state | class | cases | start failures | silent losses | user told | opened as is / fine |",
             "|---|---|---|---|---|---|---|"]
    totals = collections.Counter()
    for kind, classes in results.items():
        for klass, c in sorted(classes.items()):
            lines.append(f"| {kind} | {klass} | {c['cases']} | {c['start failure']} | {c['silent loss']} | "
                         f"{c['told']} | {c['opened as is'] + c['no notice (file was fine)']} |")
            totals.update(c)
    lines.append(f"| **all** | | **{totals['cases']}** | **{totals['start failure']}** | **{totals['silent loss']}** | "
                 f"{totals['told']} | {totals['opened as is'] + totals['no notice (file was fine)']} |")
    print("\n".join(lines))
    return 1 if totals["start failure"] or totals["silent loss"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
