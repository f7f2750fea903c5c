"""Ternary Chat runtime: model files, the torch/Triton engine, planner and hub client.

Importable and usable without Qt. The GUI in ``app/`` is a thin layer over :mod:`runtime.engine`.
"""

__version__ = "0.1.0"
