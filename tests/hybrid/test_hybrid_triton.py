"""The Triton DeltaNet glue kernels and the fused CUDA layer path equal the torch reference.

Runs under TRITON_INTERPRET=1 on the CPU (as CI does) and natively on a GPU.
"""

from __future__ import annotations

import torch
from hybrid_helpers import build_tiny

from runtime.model import deltanet
from runtime.model import deltanet_triton as dtk
from runtime.model.qwen35 import Qwen35Model

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


def test_hybrid_fused_layer_path_matches_reference():
    """Triton RMSNorm, residual-fused matmuls, SwiGLU mat-vec and the DeltaNet glue kernels."""
    _, data = build_tiny("gqa_2x", group=32)
    ref = Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=32, backend="reference",
                                      fused_kernels=False)
    fused = Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=32, backend="triton",
                                        fused_kernels=True)
    assert fused.fused_kernels and fused.layers[0].swiglu is not None
    ids = torch.randint(0, 96, (6,), generator=torch.Generator().manual_seed(1)).to(DEV)
    pos = torch.arange(6, device=DEV)
    with torch.no_grad():
        assert (ref(ids, pos) - fused(ids, pos)).abs().max().item() < 1e-3
        for i in range(2):  # decode steps: conv_step + gates + gated norm kernels
            t, p = ids[i:i + 1], torch.tensor([6 + i], device=DEV)
            assert (ref(t, p, kv_len=7 + i) - fused(t, p, kv_len=7 + i)).abs().max().item() < 1e-3
