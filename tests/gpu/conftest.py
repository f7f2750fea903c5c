"""GPU tests: collected only where CUDA is available (CI is CPU-only and runs ``-m "not gpu"``).

Every test module here marks itself ``pytestmark = pytest.mark.gpu``; on a machine without a GPU
the modules are not even imported, so nothing is skipped and nothing pretends to pass.
"""

from __future__ import annotations

import torch

collect_ignore_glob = [] if torch.cuda.is_available() else ["test_*.py"]
