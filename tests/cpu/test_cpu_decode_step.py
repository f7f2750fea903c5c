"""The fused C decode step (runtime/kernels/cpu/decode_step.py) equals model.forward on tiny models.

Both architectures (Qwen3 with q/k norm, Llama without), every cache dtype, exact and int8
activations, positions across the cache; the step writes the same K/V as forward, so a prefill
through forward followed by decode through the step (what the engine does) equals forward alone.
"""

from __future__ import annotations

import pytest
import torch

import runtime.model.llama  # noqa: F401  (registers the llama architecture)
from runtime.formats.model_data import ModelData
from runtime.kernels.cpu import ternary
from runtime.kernels.cpu.decode_step import cpu_decode_step
from runtime.model.config import ModelConfig
from runtime.model.qwen3 import Qwen3Model
from runtime.synthetic import synthetic_tensors, synthetic_tokenizer

P = 24


def _model(arch: str, kv: torch.dtype, activations: str, tied: bool = True) -> Qwen3Model:
    cfg = ModelConfig(arch=arch, vocab_size=320, hidden_size=256, intermediate_size=512, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=4096,
                      tie_word_embeddings=tied)
    data = ModelData(config=cfg, tensors=dict(synthetic_tensors(cfg, seed=3)), tokenizer=synthetic_tokenizer())
    ternary.set_default_activations(activations)
    try:
        cls = Qwen3Model if arch == "qwen3" else runtime.model.llama.LlamaModel
        model = cls(cfg, data, torch.device("cpu"), torch.float32, P, backend="cpu_ternary", kv_dtype=kv)
    finally:
        ternary.set_default_activations(None)
    return model


def _run_both(model: Qwen3Model, prefill: int, steps: int, int8: bool = False
              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Logits of tokens prefill..prefill+steps-1: forward alone, and forward prefill + C decode."""
    gen = torch.Generator().manual_seed(0)
    toks = torch.randint(0, model.vocab_size, (prefill + steps,), generator=gen)
    step = cpu_decode_step(model)
    assert step is not None
    out = []
    for use_step in (False, True):
        model.cache.k.zero_()
        model.cache.v.zero_()
        for sc in (model.cache.k_scale, model.cache.v_scale):
            if sc is not None:
                sc.zero_()
        model.forward(toks[:prefill], torch.arange(prefill), kv_len=prefill)
        logits = []
        for i in range(prefill, prefill + steps):
            t, p = toks[i:i + 1], torch.tensor([i])
            logits.append(step(t, p) if use_step else model.forward(t, p, kv_len=i + 1)[0])
        out.append(logits)
        if not use_step:
            ref_k, ref_v = model.cache.k.clone(), model.cache.v.clone()
            ref_s = [x.clone() for x in (model.cache.k_scale, model.cache.v_scale) if x is not None]
    # fp32 rounding apart, a value next to a rounding boundary of the cache dtype may land one step away
    # (int8 activations: a layer input requantised from fp32-rounded values may flip one q)
    tol = 1e-4 if model.cache.quantized else 2 * torch.finfo(model.cache.k.dtype).eps + 1e-5
    tol = 2e-2 if int8 else tol
    for ref, got in ((ref_k, model.cache.k), (ref_v, model.cache.v)):
        err = float((ref.float() - got.float()).abs().max())
        assert torch.allclose(ref.float(), got.float(), rtol=tol, atol=tol), err
    for ref, got in zip(ref_s, [x for x in (model.cache.k_scale, model.cache.v_scale) if x is not None],
                        strict=True):  # int8 cache: the per-row scales the step wrote
        assert bool((got[:, :, :prefill + steps] > 0).all())
        assert torch.allclose(ref, got, rtol=1e-4 if not int8 else 2e-2, atol=1e-6)
    return out[0], out[1]


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("kv", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activations", ["exact", "int8"])
def test_step_equals_forward(arch: str, kv: torch.dtype, activations: str) -> None:
    model = _model(arch, kv, activations, tied=arch == "qwen3")
    ref, got = _run_both(model, prefill=5, steps=P - 5, int8=activations == "int8")  # positions up to the end of the cache
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert a.shape == b.shape == (model.vocab_size,) and b.dtype == torch.float32
        # exact: fp32 rounding only; int8 activations: the requantised layer inputs may flip one q
        tol = 1e-4 if activations == "exact" else 2e-2
        assert torch.allclose(a, b, rtol=tol, atol=tol * float(a.abs().max())), (i, float((a - b).abs().max()))
        if activations == "exact":
            assert int(a.argmax()) == int(b.argmax())


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_step_with_int8_cache_equals_forward(arch: str) -> None:
    model = _model(arch, torch.int8, "exact")
    ref, got = _run_both(model, prefill=3, steps=12)
    for a, b in zip(ref, got, strict=True):
        # a K/V element one int8 step apart (rounding at a tie) moves logits by ~1e-3 at most here
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3 * float(a.abs().max()))


def test_step_rebinds_after_setup_cache_and_checks_input() -> None:
    model = _model("qwen3", torch.float16, "exact")
    step = cpu_decode_step(model)
    assert step is not None
    model.setup_cache(24)
    model.forward(torch.tensor([1, 2, 3]), torch.arange(3), kv_len=3)
    a = step(torch.tensor([4]), torch.tensor([3]))
    model.cache.k[:, :, 3:].zero_()
    model.cache.v[:, :, 3:].zero_()
    b = model.forward(torch.tensor([4]), torch.tensor([3]), kv_len=4)[0]
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))
    with pytest.raises(IndexError, match="outside the KV cache"):
        step(torch.tensor([4]), torch.tensor([24]))
    with pytest.raises(ValueError, match="one token"):
        step(torch.tensor([4, 5]), torch.tensor([3, 4]))


def test_step_declines_what_it_cannot_run() -> None:
    model = _model("qwen3", torch.float16, "exact")
    model.dtype = torch.bfloat16
    assert cpu_decode_step(model) is None
    model.dtype = torch.float32
    model.config.arch = "qwen35"
    assert cpu_decode_step(model) is None
    model.config.arch = "qwen3"
    model.layers[1].o_proj = torch.nn.Linear(256, 256)  # not the C kernel
    assert cpu_decode_step(model) is None
    assert cpu_decode_step(torch.nn.Linear(2, 2)) is None


def _clear_cache(model: Qwen3Model) -> None:
    for t in (model.cache.k, model.cache.v, model.cache.k_scale, model.cache.v_scale):
        if t is not None:
            t.zero_()


def _cache_state(model: Qwen3Model) -> list[torch.Tensor]:
    return [t.clone() for t in (model.cache.k, model.cache.v, model.cache.k_scale, model.cache.v_scale)
            if t is not None]


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("kv", [torch.float32, torch.float16, torch.int8])
@pytest.mark.parametrize("activations", ["exact", "int8"])
def test_prompt_chunks_equal_forward(arch: str, kv: torch.dtype, activations: str) -> None:
    """Two prompt chunks through the C step (the second attends over the first's cached K/V) give the
    last token's logits and the cache contents of model.forward, then decoding continues from them."""
    model = _model(arch, kv, activations, tied=arch == "qwen3")
    step = cpu_decode_step(model)
    assert step is not None
    toks = torch.randint(0, model.vocab_size, (P,), generator=torch.Generator().manual_seed(1))
    cut, end = 7, 19  # chunks [0, 7) and [7, 19)
    runs = []
    for use_step in (False, True):
        _clear_cache(model)
        last = []
        for a, b in ((0, cut), (cut, end)):
            if use_step:
                last.append(step.prompt(toks[a:b], torch.arange(a, b)))
            else:
                last.append(model.forward(toks[a:b], torch.arange(a, b), kv_len=b, last_only=True)[-1])
        nxt = step(toks[end:end + 1], torch.tensor([end]))  # decode after either prefill
        runs.append((last, _cache_state(model), nxt))
    (ref_last, ref_cache, ref_next), (got_last, got_cache, got_next) = runs
    exact = activations == "exact" and kv != torch.int8
    tol = 1e-4 if exact else 2e-2  # int8: a requantised activation or a cached value one step away
    for a, b in (*zip(ref_last, got_last, strict=True), (ref_next, got_next)):
        assert a.shape == b.shape == (model.vocab_size,) and b.dtype == torch.float32
        assert torch.allclose(a, b, rtol=tol, atol=tol * float(a.abs().max())), float((a - b).abs().max())
        if exact:
            assert int(a.argmax()) == int(b.argmax())
    # cached values: fp32 rounding apart, one next to a rounding boundary of the cache dtype may land one
    # step away (as in _run_both)
    ctol = 2e-2 if not exact else max(tol, 2 * torch.finfo(kv).eps + 1e-5)
    for a, b in zip(ref_cache, got_cache, strict=True):
        assert bool(b[..., :end, :].abs().sum() > 0) if b.dim() == 4 else bool((b[..., :end] > 0).all())
        if kv == torch.int8 and a.dim() == 4:  # int8 codes: compared as values below
            continue
        assert torch.allclose(a.float(), b.float(), rtol=ctol, atol=ctol), float((a.float() - b.float()).abs().max())
    if kv == torch.int8:
        # the int8 cache holds code * row scale: a row whose fp32 inputs differ slightly (int8 activations
        # rounded one step apart upstream, as the logits allow) gets codes a step or two apart, so compare the
        # values the attention reads, relative to their size
        ref_k, ref_v, ref_ks, ref_vs = ref_cache
        got_k, got_v, got_ks, got_vs = got_cache
        for codes_a, scale_a, codes_b, scale_b in ((ref_k, ref_ks, got_k, got_ks), (ref_v, ref_vs, got_v, got_vs)):
            va, vb = codes_a.float() * scale_a[..., None], codes_b.float() * scale_b[..., None]
            assert torch.allclose(va, vb, rtol=0, atol=ctol * float(va.abs().max())), float((va - vb).abs().max())


def test_prompt_checks_its_input() -> None:
    model = _model("qwen3", torch.float16, "exact")
    step = cpu_decode_step(model)
    assert step is not None
    with pytest.raises(IndexError, match="outside the KV cache"):
        step.prompt(torch.tensor([1, 2, 3]), torch.arange(P - 2, P + 1))
    with pytest.raises(ValueError, match="consecutive positions"):
        step.prompt(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="one position per token"):
        step.prompt(torch.tensor([1, 2, 3]), torch.arange(2))
