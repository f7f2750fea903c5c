"""Programmatic dependent launch (runtime/kernels/triton/pdl.py): on a Hopper GPU it is on, and kernels that
start early (first weight tile loaded before the wait) give bit-identical results to serial
launches — eagerly and replayed from a CUDA graph, with split-K programs that have nothing to do,
and through the whole fused decode step."""

from __future__ import annotations

import contextlib

import pytest
import torch

from runtime.formats.codecs import pack_t2, pack_t3
from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder
from runtime.kernels.triton import matvec, pdl
from runtime.model.qwen3 import Qwen3Model
from tests import model_factory as mf

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
G = 128


@contextlib.contextmanager
def pdl_set(flag: bool):
    pdl.set_enabled(flag)
    try:
        yield
    finally:
        pdl.set_enabled(None)


def test_pdl_is_on_for_hopper_and_off_when_disabled():
    hopper = torch.cuda.get_device_capability(DEV)[0] >= 9
    assert pdl.enabled(DEV) == hopper
    assert ("launch_pdl" in pdl.launch_options(DEV)) == hopper
    with pdl_set(False):
        assert pdl.launch_options(DEV) == {"USE_GDC": False}
    assert pdl.launch_options(torch.device("cpu")) == {"USE_GDC": False}


def _weights(n: int, k: int, encoding: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=DEV).manual_seed(seed)
    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, device=DEV, generator=gen)
    scales = (torch.rand(n, k // G, device=DEV, generator=gen) * 0.02 + 0.005).half()
    return (pack_t3(codes, G) if encoding == "t3" else pack_t2(codes)), scales


def _chain(h: torch.Tensor, layers: list, encoding: str, up_cfg: tuple, down_cfg: tuple) -> torch.Tensor:
    """An MLP stack updating the residual stream ``h`` in place: every launch reads what the previous
    one wrote (norm + gate/up + SiLU, then down + residual into h)."""
    for nw, gate, up, down in layers:
        m = matvec.swiglu_matvec(h, gate[0], gate[1], G, encoding, up_codes=up[0], up_scales=up[1], norm_weight=nw,
                               config=up_cfg)
        matvec.ternary_matvec(m, down[0], down[1], G, encoding, residual=h, out=h, config=down_cfg)
    return h


@pytest.mark.parametrize("encoding,up_cfg,down_cfg", [
    ("t2", ("q8", 8, 1024, 1, 4), ("q8", 8, 1024, 4, 4)),  # split-K 4 over 4 word blocks of K = 4096
    ("t2", ("q8", 4, 4096, 1, 4), ("q8", 4, 1024, 3, 4)),  # 3 splits of K = 2048's 2 blocks: one is empty
    ("t3", ("q3", 4, 128, 1, 2), ("q3", 2, 128, 2, 2)),
    ("t3", ("q3", 8, 64, 1, 4), ("q3", 4, 64, 3, 2)),
    ("t2", ("q8p", 2, 0, 8, 1), ("q8", 4, 4096, 1, 2)),  # the 8B's shipped kinds: persistent one-warp, then q8
])
def test_dependent_matvec_chain_is_exact_under_pdl(encoding, up_cfg, down_cfg):
    hid, inter, n_layers = 2048, 4096, 6
    layers = []
    for i in range(n_layers):
        nw = (torch.rand(hid, device=DEV) + 0.5).to(torch.bfloat16)
        layers.append((nw, _weights(inter, hid, encoding, 10 * i), _weights(inter, hid, encoding, 10 * i + 1),
                       _weights(hid, inter, encoding, 10 * i + 2)))
    h0 = torch.randn(1, hid, device=DEV).to(torch.bfloat16)
    with pdl_set(False):
        want = _chain(h0.clone(), layers, encoding, up_cfg, down_cfg)
    with pdl_set(True):
        eager = _chain(h0.clone(), layers, encoding, up_cfg, down_cfg)
        h = h0.clone()
        _chain(h, layers, encoding, up_cfg, down_cfg)  # warm-up (compiles the PDL variants) before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            h.copy_(h0)
            _chain(h, layers, encoding, up_cfg, down_cfg)
        replays = []
        for _ in range(5):
            graph.replay()
            replays.append(h.clone())
    torch.cuda.synchronize()
    assert torch.isfinite(want).all() and want.abs().max() > 0
    assert torch.equal(eager, want)
    for r in replays:
        assert torch.equal(r, want)


def _fused_graph_tokens(md, flag: bool, prompt: list[int], n: int) -> list[int]:
    with pdl_set(flag):
        model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128)
        step = model.decode_step()
        assert step is not None
        dec = GraphDecoder(step, model.vocab_size, DEV)
        ids = torch.tensor(prompt, device=DEV)
        with torch.inference_mode():
            dec.configure(GenerationSettings(temperature=0.0), prompt)
            logits = model.forward(ids, torch.arange(len(prompt), device=DEV), last_only=True)[-1]
            first = dec.sample_first(logits)
            out = [first] + list(dec.tokens(first, len(prompt), n - 1))
        assert dec.use_graph and dec.graph_replays == n - 1, dec.fallback_reason
        return out


def test_fused_decode_step_same_tokens_with_and_without_pdl():
    cfg = mf.tiny_qwen3_config(num_hidden_layers=4)
    md = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=5), mf.tiny_tokenizer())
    prompt = [5, 17, 250, 3, 99, 42, 7, 120]
    off = _fused_graph_tokens(md, False, prompt, 32)
    on = _fused_graph_tokens(md, True, prompt, 32)
    assert on == off
