"""Light, dark and "system" themes: a QPalette for the Fusion style plus a small stylesheet.

Why Fusion + palette: it looks the same on every OS and follows the palette completely, so a
theme switch applies live to every open widget; the stylesheets (``resources/styles/*.qss``) only
add spacing, message bubbles and the error banner colours. "system" picks light or dark from the
desktop's colour scheme (``QStyleHints.colorScheme``) and switches again when the desktop does
(``colorSchemeChanged``); a desktop that reports no scheme gets light.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.core.resources import resource_path

log = logging.getLogger(__name__)

_COLORS = {
    "light": {"window": "#f6f7f9", "base": "#ffffff", "alt": "#eef0f3", "text": "#1d2330", "button": "#e9ecf1",
              "highlight": "#2f6fde", "htext": "#ffffff", "mid": "#c5cad3", "disabled": "#8a93a3",
              "link": "#1f5fc9", "tooltip": "#ffffdc"},
    "dark": {"window": "#1e2127", "base": "#272b33", "alt": "#2f343d", "text": "#e3e6eb", "button": "#333943",
             "highlight": "#4c8dff", "htext": "#ffffff", "mid": "#4a515e", "disabled": "#7c8594",
             "link": "#7fb0ff", "tooltip": "#333943"},
}


def palette(theme: str) -> QPalette:
    c = {k: QColor(v) for k, v in _COLORS.get(theme, _COLORS["light"]).items()}
    p = QPalette()
    R = QPalette.ColorRole
    p.setColor(R.Window, c["window"])
    p.setColor(R.WindowText, c["text"])
    p.setColor(R.Base, c["base"])
    p.setColor(R.AlternateBase, c["alt"])
    p.setColor(R.Text, c["text"])
    p.setColor(R.Button, c["button"])
    p.setColor(R.ButtonText, c["text"])
    p.setColor(R.Highlight, c["highlight"])
    p.setColor(R.HighlightedText, c["htext"])
    p.setColor(R.Mid, c["mid"])
    p.setColor(R.Link, c["link"])
    p.setColor(R.ToolTipBase, c["tooltip"])
    p.setColor(R.ToolTipText, c["text"])
    p.setColor(R.PlaceholderText, c["disabled"])
    for role in (R.WindowText, R.Text, R.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, c["disabled"])
    return p


def resolve_theme(theme: str, scheme: Qt.ColorScheme | None = None) -> str:
    """"light" or "dark" for a theme setting; "system" asks the desktop (or uses ``scheme``)."""
    if theme != "system":
        return theme if theme in _COLORS else "light"
    if scheme is None:
        scheme = QGuiApplication.styleHints().colorScheme()
    return "dark" if scheme == Qt.ColorScheme.Dark else "light"


_following: list[bool] = []  # whether colorSchemeChanged is connected (once per process)


def _desktop_scheme_changed(scheme: Qt.ColorScheme) -> None:
    """The desktop switched light/dark: follow it if the user chose "system"."""
    app = QApplication.instance()
    if app is not None and app.property("ternaryThemeSetting") == "system":
        _apply(app, resolve_theme("system", scheme))


def apply_theme(theme: str, app: QApplication | None = None) -> None:
    """Switch the whole application to ``theme`` ("light", "dark" or "system"), live."""
    app = app or QApplication.instance()
    if app is None:
        return
    app.setProperty("ternaryThemeSetting", theme)
    if not _following:
        QGuiApplication.styleHints().colorSchemeChanged.connect(_desktop_scheme_changed)
        _following.append(True)
    _apply(app, resolve_theme(theme))


def _apply(app: QApplication, theme: str) -> None:
    app.setStyle("Fusion")
    app.setPalette(palette(theme))
    app.setProperty("ternaryTheme", theme)
    qss = resource_path(f"styles/{theme}.qss")
    if qss is None:
        log.warning("stylesheet for theme %s not found", theme)
        app.setStyleSheet("")
        return
    app.setStyleSheet(qss.read_text(encoding="utf-8"))
