"""Suite-wide defaults.

The CPU ternary kernels default to int8 activations where that is faster (the app's and the CLI's
"Fast" decode precision). Tests that compare our engine with references nobody here wrote
(``transformers``, llama.cpp, dense fp32 math) check the exact math, so the suite runs the exact
path unless a test asks otherwise: the int8 path has its own tests against its own exact formula
and its measured cost against the exact path (tests/cpu/test_cpu_isa.py,
tests/engine/test_engine_cpu_activations.py), which set or clear ``TERNARY_CPU_ACTIVATIONS``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _exact_cpu_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "exact")
