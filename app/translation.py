"""Switches the app's language at run time: our own ``.qm`` plus Qt's strings for that language.

Why a module of its own: both the start-up (:mod:`app.main`) and the settings (:mod:`app.main_window`)
switch it, and neither may import the other.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_installed_translators: list[object] = []  # what install_translation put on the app, removed on a switch


def install_translation(app: object, language: str) -> bool:
    """Use ``ternary_chat_<language>.qm`` and Qt's own strings for that language; English needs none.

    Callable again at run time (Settings → Interface): the previous translators are removed first.
    Installing or removing a translator makes Qt send ``QEvent.LanguageChange`` to every widget,
    whose ``changeEvent`` re-sets its texts (``retranslate()``), so no restart is needed.
    """
    from PySide6.QtCore import QLibraryInfo, QTranslator

    from app.core.resources import resource_path

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
