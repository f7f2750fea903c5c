"""Ternary Chat desktop app (PySide6).

The Qt-free core (:mod:`app.core`: settings, history, documents, summaries, model fit, paths) and
the knowledge bases (:mod:`app.knowledge`) can be used and tested without a window; the Qt views
live in the other modules. See docs/app.md, "Code layout".
"""
