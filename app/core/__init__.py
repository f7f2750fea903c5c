"""The app's Qt-free core: settings, history, documents, summaries, model fit and paths.

Nothing here imports Qt (``tests/app/test_app_core_boundary.py`` checks it), so the CLI, the knowledge
bases and tests use it without a display; the Qt views in :mod:`app` are thin layers over it.
"""
