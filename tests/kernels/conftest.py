"""Kernel tests run the Triton kernels on CPU tensors through the Triton interpreter.

``TRITON_INTERPRET`` is read when a kernel module is imported, so it is set here before any of
them is; if another test package imported them earlier without it, they are reloaded.
"""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

# dependency order: each module is reloaded after the ones it imports from
_MODULES = ["runtime.kernels.triton." + m for m in ("pdl", "launch", "tuning", "packing", "matvec", "gemm", "backend",
                                                     "norm", "rope", "attention", "sampling", "gather", "deltanet")]

_launch = sys.modules.get("runtime.kernels.triton.launch")
if os.environ["TRITON_INTERPRET"] == "1" and _launch is not None and not _launch.INTERPRET:
    for _name in _MODULES:
        if _name in sys.modules:
            importlib.reload(sys.modules[_name])
