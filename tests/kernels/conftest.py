"""Kernel tests run the Triton kernels on CPU tensors through the Triton interpreter.

``TRITON_INTERPRET`` is read when a kernel module is imported, so it is set here before any of
them is; if another test package imported them earlier without it, they are reloaded.
"""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

_MODULES = ["runtime.kernels.triton_linear", "runtime.kernels.triton_norm", "runtime.kernels.triton_rope",
            "runtime.kernels.triton_attention", "runtime.kernels.triton_sampling",
            "runtime.kernels.triton_gather"]

_linear = sys.modules.get("runtime.kernels.triton_linear")
if os.environ["TRITON_INTERPRET"] == "1" and _linear is not None and not _linear.INTERPRET:
    for _name in _MODULES:  # triton_linear first: the others import from it
        if _name in sys.modules:
            importlib.reload(sys.modules[_name])
