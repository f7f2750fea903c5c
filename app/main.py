"""Entry point of the desktop app (``ternary-chat`` / ``python -m app``).

Sets up, in this order: logging to the platform log folder (rotating; no chat text, tokens are
redacted by the hub's filter), high-DPI behaviour, the application icon, the translation for the
chosen language (English or 简体中文 via Qt ``.qm`` files) and the light/dark theme; then shows the
main window. ``--smoke-test`` opens the window and quits after the event loop has run, which is
how the installers' builds are checked on machines without a display.
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import sys

log = logging.getLogger("app")


def setup_logging(verbose: bool = False) -> str:
    """Rotating log file in the platform log folder; returns its path."""
    from app.paths import log_dir

    path = str(log_dir() / "ternary-chat.log")
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        from runtime.hub.tokens import RedactingFilter

        handler.addFilter(RedactingFilter())
    except ImportError:
        pass
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    return path


_installed_translators: list[object] = []  # what install_translation put on the app, removed on a switch


def install_translation(app: object, language: str) -> bool:
    """Use ``ternary_chat_<language>.qm`` and Qt's own strings for that language; English needs none.

    Callable again at run time (Settings → Interface): the previous translators are removed first.
    Installing or removing a translator makes Qt send ``QEvent.LanguageChange`` to every widget,
    whose ``changeEvent`` re-sets its texts (``retranslate()``), so no restart is needed.
    """
    from PySide6.QtCore import QLibraryInfo, QTranslator

    from app.resources import resource_path

    while _installed_translators:
        old = _installed_translators.pop()
        try:
            app.removeTranslator(old)
            old.deleteLater()
        except RuntimeError:  # already deleted by someone else (tests clean up translators themselves)
            pass
    if language == "en":
        return False
    ok = False
    qm = resource_path(f"translations/ternary_chat_{language}.qm")
    if qm is not None:
        tr = QTranslator(app)
        if tr.load(str(qm)):
            app.installTranslator(tr)
            _installed_translators.append(tr)
            ok = True
    qt_tr = QTranslator(app)
    if qt_tr.load(f"qtbase_{language}", QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath)):
        app.installTranslator(qt_tr)
        _installed_translators.append(qt_tr)
    if not ok:
        log.warning("no translation found for %s", language)
    return ok


def app_icon() -> object:
    from PySide6.QtGui import QIcon

    from app.resources import resource_path

    icon = QIcon()
    svg = resource_path("icons/ternary-chat.svg")
    if svg is not None:
        icon.addFile(str(svg))
    for size in (32, 48, 64, 128, 256):
        png = resource_path(f"icons/ternary-chat-{size}.png")
        if png is not None:
            icon.addFile(str(png))
    return icon


def create_app(argv: list[str], language: str, theme: str) -> object:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from app.theme import apply_theme

    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication.instance() or QApplication(argv)
    app.setApplicationName("Ternary Chat")
    app.setOrganizationName("ternary-chat")
    app.setDesktopFileName("ternary-chat")
    app.setWindowIcon(app_icon())
    install_translation(app, language)
    apply_theme(theme, app)
    return app


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ternary-chat", description="Ternary Chat desktop app")
    parser.add_argument("--smoke-test", action="store_true",
                        help="open the main window, run the event loop briefly and exit 0 (installer checks); "
                             "with a model path also load it and generate a short reply")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    parser.add_argument("--language", choices=["en", "zh_CN"], help="override the interface language once")
    parser.add_argument("files", nargs="*", help="a document to summarize or a model (.gguf/.ternary/folder) to import")
    args, qt_args = parser.parse_known_args(argv[1:])

    log_path = setup_logging(args.verbose)
    log.info("starting Ternary Chat (python %s, pid %d)", sys.version.split()[0], os.getpid())
    from app.settings_model import AppSettings

    settings = AppSettings.load()
    language = args.language or settings.interface.language
    app = create_app([argv[0], *qt_args], language, settings.interface.theme)

    from app.main_window import MainWindow

    window = MainWindow(settings=settings, autoload=not args.smoke_test)
    window.show()
    if args.smoke_test:
        return smoke_test(app, window, args.files[0] if args.files else None, log_path)
    for path in args.files[:1]:  # as if dropped on the window (file managers' "Open with")
        window.handle_dropped(os.path.abspath(path))
    return app.exec()


def smoke_test(app: object, window: object, model: str | None, log_path: str) -> int:
    """Installer check: the window opens; with ``model``, it loads and answers (8 tokens, CPU ok)."""
    from PySide6.QtCore import QTimer

    from app.main_window import model_key
    from app.settings_model import SamplingSettings

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
