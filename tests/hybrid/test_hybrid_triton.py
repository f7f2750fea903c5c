"""The Triton DeltaNet glue kernels equal the torch reference.

Runs under TRITON_INTERPRET=1 on the CPU (as CI does) and natively on a GPU; the whole fused layer
path (too slow for the interpreter) is checked in test_hybrid_gpu.py.
"""

from __future__ import annotations

import torch

from runtime.kernels.triton import deltanet as dtk
from runtime.model.qwen35 import deltanet

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_hybrid_triton_conv_gates_norm_match_torch():
    g = torch.Generator().manual_seed(0)
    c, k = 300, 4
    x, st, w = torch.randn(1, c, generator=g), torch.randn(c, k - 1, generator=g), torch.randn(c, k, generator=g)
    s1, s2 = st.clone().to(DEV), st.clone().to(DEV)
    y1 = deltanet.causal_conv1d(x.to(DEV), s1, w.to(DEV))
    y2 = dtk.conv_step(x.to(DEV), s2, w.to(DEV))
    assert torch.allclose(y1, y2, atol=1e-5) and torch.equal(s1, s2)
    a, b = torch.randn(3, 6, generator=g) * 10, torch.randn(3, 6, generator=g)
    A, dt = -torch.rand(6, generator=g) * 5, torch.randn(6, generator=g)
    g2, b2 = dtk.gates(a.to(DEV), b.to(DEV), A.to(DEV), dt.to(DEV))
    assert torch.allclose(g2.cpu(), A * torch.nn.functional.softplus(a + dt), rtol=1e-5, atol=1e-6)
    assert torch.allclose(b2.cpu(), torch.sigmoid(b), atol=1e-6)
    o, z = torch.randn(3, 6, 16, generator=g), torch.randn(3, 6, 16, generator=g)
    nw = 1 + 0.1 * torch.randn(16, generator=g)
    ref = deltanet.gated_rms_norm(o, z, nw, 1e-6)
    assert torch.allclose(dtk.gated_rms_norm(o.to(DEV), z.to(DEV), nw.to(DEV), 1e-6).cpu(), ref, atol=1e-5)
