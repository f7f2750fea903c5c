"""Entry point of the desktop app (``ternary-chat`` / ``python -m app``).

Sets up, in this order: logging to the platform log folder (rotating; no chat text, tokens are
redacted by the hub's filter), high-DPI behaviour, the application icon, the translation for the
chosen language (English or 简体中文 via Qt ``.qm`` files) and the light/dark theme; then shows the
main window. ``--smoke-test`` opens the window and quits after the event loop has run, which is
how the installers' builds are checked on machines without a display.

The app always starts (:func:`start`): a damaged settings file, history database, log file or a
file where a folder belongs is moved aside or copied (never deleted), and the window tells the
user what happened and where the copy is. Only one instance runs per data folder: a second start
brings the first window to the front, hands it its file and says "already running".
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

from app.translation import install_translation

log = logging.getLogger("app")
_log_handler: logging.Handler | None = None  # the one handler setup_logging added (replaced on a re-setup)


def _open_log_handler() -> tuple[logging.Handler, str]:
    from app.core.paths import log_dir, moved_aside

    path = log_dir() / "ternary-chat.log"
    try:
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):  # a folder there: keep it, move it aside
            from app.core.history import move_aside

            moved_aside.append((path, move_aside(path)))
    except OSError:
        pass
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    return handler, str(path)


def setup_logging(verbose: bool = False) -> str:
    """Rotating log file in the platform log folder; returns its path (stderr when it cannot be written)."""
    global _log_handler
    try:
        handler, path = _open_log_handler()
    except OSError as exc:
        handler, path = logging.StreamHandler(), f"standard error (the log folder is not writable: {exc})"
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        from runtime.hub.tokens import RedactingFilter

        handler.addFilter(RedactingFilter())
    except ImportError:
        pass
    root = logging.getLogger()
    if _log_handler is not None:
        root.removeHandler(_log_handler)
        _log_handler.close()
    root.addHandler(handler)
    _log_handler = handler
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    return path


def app_icon() -> object:
    from PySide6.QtGui import QIcon

    from app.core.resources import resource_path

    icon = QIcon()
    svg = resource_path("icons/ternary-chat.svg")
    if svg is not None:
        icon.addFile(str(svg))
    for size in (32, 48, 64, 128, 256):
        png = resource_path(f"icons/ternary-chat-{size}.png")
        if png is not None:
            icon.addFile(str(png))
    return icon


def create_app(argv: list[str], language: str | None = None, theme: str | None = None) -> object:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from app.theme import apply_theme

    app = QApplication.instance()
    if app is None:  # the policy can only be set before the application object exists
        QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
        app = QApplication(argv)
    app.setApplicationName("Ternary Chat")
    app.setOrganizationName("ternary-chat")
    app.setDesktopFileName("ternary-chat")
    app.setWindowIcon(app_icon())
    if language is not None:
        install_translation(app, language)
    if theme is not None:
        apply_theme(theme, app)
    return app


def settings_notice(report: Any) -> str:
    """What went wrong with settings.json and what was kept, in the user's words ("" when all is well)."""
    from PySide6.QtCore import QCoreApplication

    from app.core.settings_file import INCOMPLETE

    if report.ok:
        return ""
    reasons = {
        "not_a_file": QCoreApplication.translate("Startup", "it was not a file"),
        "unreadable": QCoreApplication.translate("Startup", "it could not be read"),
        "too_large": QCoreApplication.translate("Startup", "it was far too large to be a settings file"),
        "encoding": QCoreApplication.translate("Startup", "it contained bytes that are not text (they now show as �)"),
        "not_json": QCoreApplication.translate("Startup", "it was cut short or damaged"),
        "too_deep": QCoreApplication.translate("Startup", "it was damaged (nested far too deep)"),
        "not_object": QCoreApplication.translate("Startup", "it did not contain settings"),
        "newer": QCoreApplication.translate("Startup", "it was written by a newer version of Ternary Chat"),
    }
    parts = []
    if report.problems:
        why = "; ".join(reasons.get(p, p) for p in report.problems)
        parts.append(QCoreApplication.translate("Startup", "Your settings file %1 had a problem: %2.").replace("%1", str(report.path)).replace("%2", why))
    else:
        parts.append(QCoreApplication.translate("Startup", "Your settings file %1 had values that are not valid.").replace("%1", str(report.path)))
    if report.reset_fields:
        parts.append(QCoreApplication.translate("Startup", "These went back to their defaults: %1.").replace("%1", ", ".join(report.reset_fields)))
    if report.restored_from is not None:
        parts.append(QCoreApplication.translate("Startup", "Settings the file no longer held were taken from the last good copy (%1).")
                     .replace("%1", str(report.restored_from)))
    elif any(p in INCOMPLETE for p in report.problems):
        parts.append(QCoreApplication.translate("Startup", "Settings the file no longer held are back to their defaults."))
    parts.append(QCoreApplication.translate("Startup", "Every other setting was kept."))
    if report.damaged_copy is not None:
        parts.append(QCoreApplication.translate("Startup", "The file as it was is kept at %1.").replace("%1", str(report.damaged_copy)))
    else:
        parts.append(QCoreApplication.translate("Startup", "No copy of it could be made, so it was left as it is and will not be overwritten."))
    return " ".join(parts)


def history_notice(problem: Any) -> str:
    """What was wrong with the history database and where the user's conversations are now."""
    from PySide6.QtCore import QCoreApplication

    if problem is None:
        return ""
    path, moved = str(problem.path), str(problem.moved_to or "")
    if problem.code == "damaged":
        text = QCoreApplication.translate("Startup", "Your chat history %1 is damaged and could not be read. It was moved to %2 and kept there; a new history was started.")
        text = text.replace("%1", path).replace("%2", moved)
        if problem.recovered:
            text += " " + QCoreApplication.translate("Startup", "Conversations that could still be read were copied into the new history: %1.").replace(
                "%1", str(problem.recovered))
        return text
    if problem.code == "not_a_file":
        return (QCoreApplication.translate("Startup", "Your chat history %1 was not a file. It was moved to %2 and kept there; a new history was started.")
                .replace("%1", path).replace("%2", moved))
    if problem.code == "newer":
        text = QCoreApplication.translate("Startup", "Your chat history %1 was saved by a newer version of Ternary Chat (format %2; this version reads format %3). It was left untouched, so that version will still show every conversation.")
        from app.core.history import SCHEMA_VERSION

        text = text.replace("%1", path).replace("%2", str(problem.version)).replace("%3", str(SCHEMA_VERSION))
        if problem.in_use is not None:
            return text + " " + QCoreApplication.translate("Startup", "Chats of this version are kept in %1 meanwhile.").replace("%1", str(problem.in_use))
        return text + " " + QCoreApplication.translate("Startup", "Chats of this session are not saved.")
    if problem.code == "locked":
        return QCoreApplication.translate("Startup", "Your chat history %1 is in use by another program, so chats of this session are not saved. Close that program and start Ternary Chat again.").replace("%1", path)
    if problem.code == "upgraded":
        return QCoreApplication.translate("Startup", "Your chat history was converted to this version's format; a copy of it as it was is kept at %1.").replace("%1", moved)
    return QCoreApplication.translate("Startup", "Your chat history %1 cannot be opened or written, so chats of this session are not saved.").replace("%1", path)


def moved_notice(moved: list[tuple[Any, Any]]) -> str:
    from PySide6.QtCore import QCoreApplication

    return " ".join(QCoreApplication.translate("Startup", "%1 was where Ternary Chat needs a folder; it was moved to %2 and kept there.")
                    .replace("%1", str(a)).replace("%2", str(b)) for a, b in moved)


def tell_already_running(reached: bool) -> None:
    """The second instance's message (modal); the first window is already in front when ``reached``."""
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Information, QCoreApplication.translate("Startup", "Ternary Chat"), QCoreApplication.translate("Startup", "Ternary Chat is already running."))
    box.setObjectName("alreadyRunning")
    box.setInformativeText(QCoreApplication.translate("Startup", "Its window has been brought to the front.") if reached else
                           QCoreApplication.translate("Startup", "Switch to its window, or close it before starting Ternary Chat again."))
    box.exec()


def _bring_to_front(window: Any, files: list[str]) -> None:
    from PySide6.QtCore import Qt

    window.setWindowState(window.windowState() & ~Qt.WindowState.WindowMinimized)
    window.show()
    window.raise_()
    window.activateWindow()
    for path in files[:1]:
        window.handle_dropped(path)


@dataclass
class Startup:
    """What :func:`start` made: the window (None when another instance runs) and what the user was told."""

    app: Any
    window: Any = None
    exit_code: int = 0
    guard: Any = None
    notices: list[str] = field(default_factory=list)
    log_path: str = ""
    files: list[str] = field(default_factory=list)
    smoke_test: bool = False

    def shutdown(self) -> None:
        """Close the window (stopping its worker thread) and release the single-instance lock."""
        if self.window is not None and self.window.isVisible():
            self.window.close()
        if self.guard is not None:
            self.guard.release()
            self.guard = None


def _make_window(settings: Any, store: Any, autoload: bool) -> Any:
    from app.main_window import MainWindow

    return MainWindow(settings=settings, store=store, autoload=autoload)


def start(argv: list[str], *, single_instance: bool = True, autoload: bool = True) -> Startup:
    """Everything :func:`main` does before the event loop: the window is shown, notices are on it.

    Never lets damaged state stop the start. Returns with ``window=None`` (after telling the user)
    when another instance already runs on the same data folder.
    """
    parser = argparse.ArgumentParser(prog="ternary-chat", description="Ternary Chat desktop app")
    parser.add_argument("--smoke-test", action="store_true",
                        help="open the main window, run the event loop briefly and exit 0 (installer checks); "
                             "with a model path also load it and generate a short reply")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    parser.add_argument("--language", choices=["en", "zh_CN"], help="override the interface language once")
    parser.add_argument("files", nargs="*", help="a document to summarize or a model (.gguf/.ternary/folder) to import")
    args, qt_args = parser.parse_known_args(argv[1:])

    from app.core import paths

    paths.moved_aside.clear()
    log_path = setup_logging(args.verbose)
    log.info("starting Ternary Chat (python %s, pid %d)", sys.version.split()[0], os.getpid())
    app = create_app([argv[0], *qt_args])
    files = [os.path.abspath(f) for f in args.files]

    from PySide6.QtCore import QCoreApplication

    from app.core.history import open_history
    from app.core.settings_model import AppSettings
    from app.theme import apply_theme

    guard = None
    if single_instance and not args.smoke_test:
        from app.single_instance import ACQUIRED, RUNNING, SingleInstance

        try:
            folder = paths.data_dir()
        except OSError as exc:
            folder = None
            log.warning("no data folder for the single-instance lock: %s", exc)
        guard = SingleInstance(folder) if folder is not None else None
        state = guard.acquire() if guard is not None else None
        if state == RUNNING:
            settings, _ = AppSettings.load_with_report(repair=False)  # read only: the first instance owns it
            install_translation(app, args.language or settings.interface.language)
            reached = guard.notify_running(files)
            log.info("another instance is running (reached: %s); exiting", reached)
            tell_already_running(reached)
            return Startup(app, None, 0, None, log_path=log_path)
        if state != ACQUIRED:
            guard = None

    settings, report = AppSettings.load_with_report()
    install_translation(app, args.language or settings.interface.language)
    apply_theme(settings.interface.theme, app)
    store, problem = open_history()
    if problem is not None:
        log.warning("history: %s (%s)", problem.code, problem.detail)
    notices = [t for t in (moved_notice(paths.moved_aside), settings_notice(report), history_notice(problem)) if t]
    autoload = autoload and not args.smoke_test
    try:
        window = _make_window(settings, store, autoload)
    except Exception:  # an unforeseen state in the history: start with one kept in memory instead
        log.exception("the main window could not be built with %s; retrying with a history in memory", store.path)
        from app.core.history import MEMORY, HistoryStore

        store.close()
        store = HistoryStore(MEMORY)
        notices.append(QCoreApplication.translate("Startup", "Your chat history could not be shown, so chats of this session are not saved. Details are in the log: %1.").replace("%1", log_path))
        window = _make_window(settings, store, autoload)
    window.show()
    if notices:
        window.show_notice("\n\n".join(notices), sticky=True)
    if guard is not None:
        guard.activated.connect(lambda fs: _bring_to_front(window, fs))
    if not args.smoke_test:
        for path in files[:1]:  # as if dropped on the window (file managers' "Open with")
            window.handle_dropped(path)
    return Startup(app, window, 0, guard, notices, log_path, files, args.smoke_test)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    started = start(argv)
    if started.window is None:
        return started.exit_code
    if started.smoke_test:
        return smoke_test(started.app, started.window, started.files[0] if started.files else None, started.log_path)
    try:
        return started.app.exec()
    finally:
        started.shutdown()


def smoke_test(app: object, window: object, model: str | None, log_path: str) -> int:
    """Installer check: the window opens; with ``model``, it loads and answers (8 tokens, CPU ok)."""
    from PySide6.QtCore import QTimer

    from app.core.settings_model import SamplingSettings, model_key

    outcome: dict[str, str] = {}

    def finish(result: str) -> None:
        outcome.setdefault("result", result)
        window.close()
        app.quit()

    if model is None:
        QTimer.singleShot(300, lambda: finish("window shown"))
    else:
        path = os.path.abspath(model)
        window.settings.set_sampling(model_key(path), SamplingSettings(max_new_tokens=8, seed=0))
        window.modelLoaded.connect(lambda info: window.send("Hello"))
        window.modelLoadFailed.connect(lambda msg: finish("load failed: " + msg))
        window.generationFinished.connect(
            lambda _rid: finish("error: " + window.last_error if window.last_error else "reply generated"))
        window.load_model(path)
        QTimer.singleShot(300_000, lambda: finish("timed out"))
    app.exec()
    result = outcome.get("result", "no result")
    ok = result in ("window shown", "reply generated")
    print(f"smoke test {'ok' if ok else 'FAILED'}: {result}; window '{window.windowTitle()}'; log at {log_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
