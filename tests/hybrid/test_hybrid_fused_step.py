"""The fused one-token decode step (``Qwen35Model.decode_step``, runtime.model.qwen35.step) equals the forward.

Runs the Triton kernels under TRITON_INTERPRET=1 on the CPU (as CI does) and natively on a GPU.
The reference is a second model built from the same ModelData with the plain-torch "reference"
linear backend and the unfused torch glue, so the comparison shares no kernel with the step.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_helpers import build_tiny
from test_hybrid_hadamard import rotated_pair

import runtime.kernels.triton.backend  # noqa: F401  (registers the "triton" linear backend)
from runtime.formats.codecs import codes_of, pack_t3, quantize_ternary
from runtime.formats.model_data import T3, DenseTensor, ModelData, TernaryTensor
from runtime.kernels.triton.deltanet import gdn_decode
from runtime.model.qwen35 import deltanet
from runtime.model.qwen35 import model as qwen35
from runtime.model.qwen35.model import Qwen35Model
from tests import model_factory as mf

DEV = "cuda" if torch.cuda.is_available() else "cpu"
STEPS = 8


def _to_t3(data: ModelData) -> ModelData:
    """The same weights in the base-3 (PTQ1_0-class) packing."""
    tensors = {}
    for n, t in data.tensors.items():
        if isinstance(t, TernaryTensor):
            t = TernaryTensor(t.shape, t.group_size, pack_t3(codes_of(t), t.group_size), t.scales, T3)
        tensors[n] = t
    return ModelData(config=data.config, tensors=tensors, provenance=data.provenance, name=data.name)


def _ternary_ab(data: ModelData) -> ModelData:
    """DeltaNet a/b projections stored ternary too (then they fuse with qkv/z into one matrix)."""
    tensors = dict(data.tensors)
    for n, t in data.tensors.items():
        if n.endswith(("in_proj_a.weight", "in_proj_b.weight")) and isinstance(t, DenseTensor):
            tensors[n], _ = quantize_ternary(t.data.to(torch.float32), 16, strict=False)
    return ModelData(config=data.config, tensors=tensors, provenance=data.provenance, name=data.name)


def _model(data: ModelData, monkeypatch, fuse_rows: bool, backend: str) -> Qwen35Model:
    """On the CPU the model keeps q/k/v and gate/up as separate matrices; ``fuse_rows`` forces the
    row-fused layout the CUDA build uses, so both shapes of the step are exercised."""
    with mf.row_layout(monkeypatch, qwen35, fuse_rows):
        return Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=32, backend=backend,
                                           fused_kernels=False)


CASES = {
    # name: (tiny config, rotation (block, grouped) or None, t3?, fuse_rows, ternary a/b)
    "gqa2x-t2-split": ("gqa_2x", None, False, False, False),
    "gqa3x-t3-fused": ("gqa_3x", None, True, True, False),
    "equal-t2-fused-ternary-ab": ("equal_heads", None, False, True, True),
    "rotated-tiled-t3-fused": ("gqa_2x", (16, False), True, True, False),
    "rotated-grouped-t2-split": ("gqa_3x", (16, True), False, False, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hybrid_fused_step_equals_forward(case, monkeypatch):
    name, rot, t3, fuse_rows, ternary_ab = CASES[case]
    data = rotated_pair(name, *rot)[1] if rot else build_tiny(name)[1]
    if ternary_ab:
        data = _ternary_ab(data)
    if t3:
        data = _to_t3(data)
    ref = _model(data, monkeypatch, fuse_rows, "reference")
    fused_model = _model(data, monkeypatch, fuse_rows, "triton")
    assert (fused_model.rotation is not None) == (rot is not None)
    assert ref.decode_step() is None  # the reference backend is not graph-safe: no fused step
    step = _assert_step_equals_forward(ref, fused_model)
    # unrotated, row-fused ternary q|k|v|z beside dense a/b: the input norm runs inside the mat-vec's
    # quantisation and the gates kernel (no norm launch); every other layout keeps the separate norm
    norm_fused = fuse_rows and not rot and not ternary_ab
    assert (step.norm_fused_deltanet_layers > 0) == norm_fused


def test_hybrid_fused_step_with_streamed_layers(monkeypatch):
    """Offloaded (streamed) layers: the step reads each layer's weights from the staging slot it
    shares with other layers, so it may hold only views of them (checked: equal to forward)."""
    from runtime.offload import LayerStreamer

    _, data = build_tiny("gqa_2x")
    ref = _model(data, monkeypatch, True, "reference")
    model = Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=32, backend="triton",
                                        fused_kernels=True)  # keeps the (w - 1) norm buffers the step views
    streamer = LayerStreamer(DEV)
    for i in range(len(model.layers)):  # 4 streamed layers: two staging slots, reused alternately
        model.layers[i] = streamer.adopt(model.layers[i])
    streamer.finish()
    assert not streamer.resident
    _assert_step_equals_forward(ref, model)
    plain = Qwen35Model.from_model_data(data, DEV, dtype=torch.float32, max_positions=32, backend="triton",
                                        fused_kernels=False)  # no (w - 1) buffers: a copy would be needed
    streamer = LayerStreamer(DEV)
    plain.layers[0] = streamer.adopt(plain.layers[0])
    streamer.finish()
    assert plain.decode_step() is None


def _assert_step_equals_forward(ref: Qwen35Model, fused_model: Qwen35Model):
    """Prefill both by forward, then STEPS greedy tokens: ref by forward, the other by the step."""
    step = fused_model.decode_step()
    assert step is not None
    prompt = torch.randint(0, 96, (9,), generator=torch.Generator().manual_seed(4)).to(DEV)
    n = len(prompt)
    with torch.no_grad():
        want = ref(prompt, torch.arange(n, device=DEV), kv_len=n, last_only=True)[-1]
        got = fused_model(prompt, torch.arange(n, device=DEV), kv_len=n, last_only=True)[-1]
        assert (want - got).abs().max().item() < 1e-4
        toks_ref, toks_fused = [], []
        tok_r = tok_f = int(want.argmax())
        for i in range(STEPS):
            pos = torch.tensor([n + i], device=DEV)
            want = ref(torch.tensor([tok_r], device=DEV), pos, kv_len=n + i + 1)[-1]
            got = step(torch.tensor([tok_f], device=DEV), pos)
            assert got.dtype == torch.float32 and got.shape == want.shape
            scale = want.abs().max().item()
            # fp32 on both sides; only the summation order differs (tiled mat-vecs, split-KV attention)
            assert (want - got).abs().max().item() < 1e-4 * max(scale, 1.0), f"step {i}"
            tok_r, tok_f = int(want.argmax()), int(got.argmax())
            toks_ref.append(tok_r)
            toks_fused.append(tok_f)
    assert toks_ref == toks_fused
    # the step advanced the same state in place: DeltaNet conv windows, recurrent state, KV cache
    live = n + STEPS
    for a, b in ((ref.state.conv, fused_model.state.conv), (ref.state.recurrent, fused_model.state.recurrent),
                 (ref.cache.k[:, :, :live], fused_model.cache.k[:, :, :live]),
                 (ref.cache.v[:, :, :live], fused_model.cache.v[:, :, :live])):
        assert (a - b).abs().max().item() < 1e-4 * max(a.abs().max().item(), 1.0)
    assert float(fused_model.state.recurrent.abs().max()) > 0  # (the state really is in use)
    return step


@pytest.mark.parametrize("block_dv", [None, 8, 4])
@pytest.mark.parametrize("dense_ab", [True, False, "normed"])
def test_hybrid_gdn_decode_kernel_matches_torch(dense_ab, block_dv):
    """Odd sizes (padding lanes), 3 value heads per key head, both ways of getting the gates (dense rows:
    on the normalised x, or on the raw x with the layer's RMSNorm applied in the kernel); one
    program per head (DV=20 < the default column block) and split over value columns (block 8:
    3 programs per head, the last one half padding; block 4: 5 per head), run twice so the
    split's arrival counters must have been reset."""
    g = torch.Generator().manual_seed(0)
    h, hv, dk, dv, hid = 2, 6, 24, 20, 40
    mixed = torch.randn(1, 2 * h * dk + hv * dv, generator=g)
    z = torch.randn(1, hv * dv, generator=g)
    state = 0.3 * torch.randn(hv, dk, dv, generator=g)
    A = -torch.rand(hv, generator=g) * 4
    dt_bias = torch.randn(hv, generator=g)
    nw = 1 + 0.1 * torch.randn(dv, generator=g)
    x = torch.randn(1, hid, generator=g)
    x_raw, xw_m1 = 3 * torch.randn(1, hid, generator=g), 0.2 * torch.randn(hid, generator=g)
    if dense_ab == "normed":  # Qwen3.5's input norm, offset form (1 + w)
        x = qwen35.rms_norm(x_raw, 1 + xw_m1, 1e-6)
    wa, wb = torch.randn(hv, hid, generator=g) / 6, torch.randn(hv, hid, generator=g) / 6
    a, b = x @ wa.t(), x @ wb.t()
    # torch reference (the model's unfused path)
    q, k, v = mixed.split([h * dk, h * dk, hv * dv], dim=-1)
    gate = A * torch.nn.functional.softplus(a + dt_bias)
    s_ref = state.clone()
    o = deltanet.gated_delta_rule_recurrent(q.view(1, h, dk), k.view(1, h, dk), v.view(1, hv, dv), gate,
                                            torch.sigmoid(b), s_ref)
    want = deltanet.gated_rms_norm(o, z.view(1, hv, dv), nw, 1e-6).reshape(1, hv * dv)
    o2 = deltanet.gated_delta_rule_recurrent(q.view(1, h, dk), k.view(1, h, dk), v.view(1, hv, dv), gate,
                                             torch.sigmoid(b), s_ref)
    want2 = deltanet.gated_rms_norm(o2, z.view(1, hv, dv), nw, 1e-6).reshape(1, hv * dv)
    s_dev = state.clone().to(DEV)
    args = (mixed.to(DEV), z.to(DEV), s_dev, A.to(DEV), dt_bias.to(DEV), nw.to(DEV), 1e-6, h)
    kw = dict(x=x.to(DEV), wa=wa.to(DEV), wb=wb.to(DEV)) if dense_ab else dict(a=a.to(DEV), b=b.to(DEV))
    if dense_ab == "normed":
        kw.update(x=x_raw.to(DEV), x_norm_weight=xw_m1.to(DEV), x_norm_eps=1e-6)
    got = gdn_decode(*args, **kw, block_dv=block_dv)
    got2 = gdn_decode(*args, **kw, block_dv=block_dv)
    assert torch.allclose(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert torch.allclose(got2.cpu(), want2, atol=1e-5, rtol=1e-5)
    assert torch.allclose(s_dev.cpu(), s_ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        gdn_decode(*args)  # neither a/b nor x/wa/wb


def test_hybrid_stateful_decoder_keeps_state_through_capture(monkeypatch):
    """GraphDecoder's capture runs the step for warm-up; the hybrid's state must come out unchanged.

    (The real capture needs CUDA - test_hybrid_gpu.py - so the parent's capture is replaced by one
    that runs the step twice, as its warm-up does, and then fails like a non-capturable step.)
    """
    from runtime.gpu_decode import GraphDecoder, StatefulGraphDecoder, graph_decoder_for
    from runtime.model.base import PreparedModel

    state = torch.zeros(3)

    def step(tok, pos):
        state.add_(1.0)
        return torch.zeros(5)

    def warmup_then_fail(self):
        self.step(self.tok, self.pos)
        self.step(self.tok, self.pos)
        raise RuntimeError("capture failed")

    monkeypatch.setattr(GraphDecoder, "_capture", warmup_then_fail)
    dec = StatefulGraphDecoder(step, 5, "cpu", (state,), use_graph=False)
    with pytest.raises(RuntimeError):
        dec._capture()
    assert torch.equal(state, torch.zeros(3))
    _, data = build_tiny("equal_heads")
    model = Qwen35Model.from_model_data(data, "cpu", max_positions=8, backend="reference")
    assert isinstance(graph_decoder_for(model, step, "cpu"), StatefulGraphDecoder)
    assert model.sequence_state() == (model.state.conv, model.state.recurrent)
    dense_like = PreparedModel()
    dense_like.vocab_size = 5  # no recurrent state (the base class's empty sequence_state): the plain decoder
    assert type(graph_decoder_for(dense_like, step, "cpu")) is GraphDecoder
