"""Dense layers run: a matrix whose stored floats are not ternary loads as a dense matrix with a
notice (which tensors, memory and speed cost) from a GGUF or a ``.ternary`` file, for the Qwen3.5
hybrid as for the dense models, and the model's output equals a reference holding it dense."""

from __future__ import annotations

import torch

from runtime.formats.gguf_writer import write_gguf
from runtime.formats.loader import load_model
from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor
from runtime.formats.ternary_file import write_model
from runtime.model.qwen35.model import Qwen35Model
from runtime.model.qwen35.synthetic import qwen35_synthetic_model
from tests.model_factory import tiny_hybrid_synthetic_config

NAME = "model.layers.1.mlp.down_proj.weight"


def _hybrid_with_one_dense_matrix() -> ModelData:
    """A tiny synthetic hybrid whose NAME holds fp16 floats that are not ternary (a 10% wobble)."""
    data = qwen35_synthetic_model("bonsai-27b", seed=4, group_size=64,
                                  config=tiny_hybrid_synthetic_config(linear_heads=(2, 2)))
    t = data.tensors[NAME]
    assert isinstance(t, TernaryTensor)
    w = t.dequantize(torch.float32)
    wobble = 1 + 0.1 * torch.rand(w.shape, generator=torch.Generator().manual_seed(1))
    data.tensors[NAME] = DenseTensor((w * wobble).to(torch.float16))
    return data


def _logits(data: ModelData) -> torch.Tensor:
    model = Qwen35Model.from_model_data(data, max_positions=32, backend="reference")
    with torch.no_grad():
        return model(torch.arange(16), torch.arange(16))


def _check(loaded: ModelData, reference: ModelData) -> None:
    t = loaded.tensors[NAME]
    assert isinstance(t, DenseTensor) and torch.equal(t.data, reference.tensors[NAME].data)
    dense = [n for n, x in loaded.tensors.items() if isinstance(x, DenseTensor) and x.data.ndim == 2
             and not n.endswith(("in_proj_a.weight", "in_proj_b.weight"))]
    assert dense == [NAME]  # every other matrix is still ternary
    assert len(loaded.notices) == 1
    notice = loaded.notices[0]
    assert NAME in notice and "dense float16" in notice and "MB instead of" in notice and "slower" in notice
    assert torch.allclose(_logits(loaded), _logits(reference), atol=1e-4, rtol=1e-4)


def test_f16_gguf_of_the_hybrid_runs_its_non_ternary_matrix_dense(tmp_path):
    """Once refused with "is not ternary ... use --quantize"; now loaded dense, said, and run."""
    data = _hybrid_with_one_dense_matrix()
    path = write_gguf(data, tmp_path / "hybrid-f16.gguf", "F16")
    loaded = load_model(path, group_size=64)
    _check(loaded, data)
    # a reference without the wobble really differs (the comparison is not vacuous)
    plain = qwen35_synthetic_model("bonsai-27b", seed=4, group_size=64,
                                   config=tiny_hybrid_synthetic_config(linear_heads=(2, 2)))
    assert not torch.allclose(_logits(loaded), _logits(plain), atol=1e-3)


def test_ternary_file_keeps_a_dense_matrix_dense(tmp_path):
    data = _hybrid_with_one_dense_matrix()
    path = write_model(data, tmp_path / "hybrid.ternary")
    _check(load_model(path, group_size=64), data)
