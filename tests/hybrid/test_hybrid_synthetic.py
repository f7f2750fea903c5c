"""Synthetic hybrids: exact 27B tensor census (without generating 7 GB) and tiny t2/t3 models that run."""

from __future__ import annotations

import pytest
import torch

from runtime import synthetic
from runtime.formats import codecs
from runtime.formats.arch import get_arch
from runtime.formats.model_data import T2, T3, DenseTensor, TernaryTensor, t3_bytes_per_group
from runtime.model.config import ModelConfig
from runtime.model.qwen35.model import Qwen35Model
from runtime.model.qwen35.synthetic import qwen35_synthetic_model, qwen35_synthetic_tensors
from runtime.synthetic import random_ternary_t2, random_ternary_t3, synthetic_config
from tests import model_factory as mf


def test_hybrid_27b_census_matches_released_file():
    """402 ternary / 96 BF16 / 353 F32 tensors and 26,869,760,000 ternary weights (Bonsai-2-27B PQ2_0)."""
    specs = get_arch("qwen35").tensor_list(synthetic_config("bonsai-27b-ptq1"))
    ternary = [s for s in specs if s.kind == "ternary"]
    assert len(ternary) == 402
    assert sum(s.shape[0] * s.shape[1] for s in ternary) == 26_869_760_000
    assert len([s for s in specs if s.kind == "proj_bf16"]) == 96
    assert len([s for s in specs if s.kind not in ("ternary", "proj_bf16")]) == 353
    shapes = {s.name: s.shape for s in specs}
    assert shapes["model.layers.0.linear_attn.in_proj_qkv.weight"] == (10240, 5120)
    assert shapes["model.layers.0.linear_attn.out_proj.weight"] == (5120, 6144)
    assert shapes["model.layers.3.self_attn.q_proj.weight"] == (24 * 256 * 2, 5120)
    # ~1.75 bpw packing: 28 bytes per 128 weights -> the ternary part of the 5.95 GB file
    t3_bytes = sum(s.shape[0] * (s.shape[1] // 128) * (t3_bytes_per_group(128) + 2) for s in ternary)
    assert t3_bytes == 26_869_760_000 // 128 * 28
    assert t3_bytes < 5.9e9


def tiny_hybrid_config() -> ModelConfig:
    return mf.tiny_hybrid_synthetic_config()


def test_hybrid_t3_generator_is_valid_base3():
    t = random_ternary_t3("x", (8, 256), seed=1, group_size=128)
    codes = codecs.codes_of(t)
    assert int(codes.max()) <= 2
    assert 0.3 < float((codes == 1).float().mean()) < 0.37  # ~1/3 zeros
    assert torch.equal(codecs.pack_t3(codes, 128), t.codes)  # canonical packing, padding trits zero


def test_hybrid_t2_device_generator_is_valid_t2():
    """The on-device t2 draw (run here with device="cpu"): canonical t2 layout, codes only 0..2,
    fan-in-scaled fp16 scales, deterministic per (seed, name), different per name."""
    t = random_ternary_t2("x", (40, 512), seed=1, group_size=128, device="cpu")
    assert t.encoding == T2 and t.shape == (40, 512) and t.group_size == 128
    assert t.codes.dtype == torch.uint8 and tuple(t.codes.shape) == (40, 512 // 4)
    assert t.scales.dtype == torch.float16 and tuple(t.scales.shape) == (40, 512 // 128)
    codes = codecs.codes_of(t)
    assert tuple(codes.shape) == (40, 512)
    assert int(codes.max()) <= 2
    for c in range(3):
        assert 0.3 < float((codes == c).float().mean()) < 0.37  # uniform trits
    assert torch.equal(codecs.pack_t2(codes), t.codes)
    base = (1.5 / 512) ** 0.5
    assert float(t.scales.min()) >= 0.49 * base and float(t.scales.max()) <= 1.51 * base
    again = random_ternary_t2("x", (40, 512), seed=1, group_size=128, device="cpu")
    assert torch.equal(again.codes, t.codes) and torch.equal(again.scales, t.scales)
    assert not torch.equal(random_ternary_t2("y", (40, 512), seed=1, group_size=128).codes, t.codes)
    with pytest.raises(ValueError):
        random_ternary_t2("x", (4, 130), group_size=130)


def test_hybrid_t2_on_device_path_builds_a_runnable_model(monkeypatch):
    """qwen35_synthetic_tensors(encoding="t2") off the CPU draws with random_ternary_t2 and yields
    valid t2 tensors of the spec shapes that a model runs on. The device is "meta" here (dense
    tensors move there; the ternary draw is redirected to the CPU, standing in for CUDA)."""
    cfg = tiny_hybrid_config()
    calls = []

    def t2_on_cpu(name, shape, seed, group_size, device):
        calls.append(torch.device(device).type)
        return random_ternary_t2(name, shape, seed, group_size, "cpu")

    with monkeypatch.context() as mp:
        mp.setattr(synthetic, "random_ternary_t2", t2_on_cpu)
        mp.setattr(synthetic, "random_ternary", None)  # the CPU draw must not be used
        tensors = dict(qwen35_synthetic_tensors(cfg, seed=3, encoding=T2, group_size=64, device="meta"))
    specs = {s.name: s for s in get_arch("qwen35").tensor_list(cfg)}
    assert set(tensors) == set(specs)
    ternary = [n for n, s in specs.items() if s.kind == "ternary"]
    assert len(calls) == len(ternary) and set(calls) == {"meta"}
    for n in ternary:
        t = tensors[n]
        assert isinstance(t, TernaryTensor) and t.encoding == T2 and t.shape == specs[n].shape
        assert int(codecs.codes_of(t).max()) <= 2
    data = qwen35_synthetic_model("bonsai-27b", seed=3, encoding=T2, group_size=64, config=cfg)
    data.tensors.update({n: tensors[n] for n in ternary})
    model = Qwen35Model.from_model_data(data, max_positions=64)
    with torch.no_grad():
        logits = model(torch.arange(12), torch.arange(12))
    assert torch.isfinite(logits).all() and logits.std() > 0.1


def test_hybrid_tiny_synthetic_models_run_in_both_packings():
    cfg = tiny_hybrid_config()
    for enc in (T2, T3):
        data = qwen35_synthetic_model("bonsai-27b", seed=3, encoding=enc, group_size=64, config=cfg)
        assert all(t.encoding == enc for t in data.tensors.values() if isinstance(t, TernaryTensor))
        a_proj = data.tensors["model.layers.0.linear_attn.in_proj_a.weight"]
        assert isinstance(a_proj, DenseTensor) and a_proj.data.dtype == torch.bfloat16
        model = Qwen35Model.from_model_data(data, max_positions=64)
        with torch.no_grad():
            logits = model(torch.arange(20), torch.arange(20))
            step = model(torch.tensor([5]), torch.tensor([20]), kv_len=21)
        assert torch.isfinite(logits).all() and torch.isfinite(step).all()
        assert logits.std() > 0.1


def test_hybrid_27b_specs_agree_with_format_registry():
    """The synthetic generator yields exactly the ArchSpec's tensors, and the spec's ternary role
    agrees with the storage rule the GGUF writer and readers use (``is_ternary``)."""
    cfg = tiny_hybrid_config()
    spec = get_arch("qwen35")
    expected = spec.expected_shapes(cfg)
    generated = dict(qwen35_synthetic_tensors(cfg, seed=1, group_size=64))
    assert {n: tuple(t.shape) for n, t in generated.items()} == expected
    assert {n for n, t in generated.items() if isinstance(t, TernaryTensor)} == \
        {n for n, shape in expected.items() if spec.is_ternary(n, shape)}
