"""Ternary Chat desktop app (PySide6).

Plain-Python models (``history``, ``settings_model``, ``documents``, ``summarize``, ``paths``) have no
Qt import so they can be tested without a window; the Qt views live in the other modules.
"""
