"""Embeddings on CUDA (bf16 by default) equal the CPU's fp32 ones, which tests/engine checks
against transformers."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.embedding import EmbeddingModel
from tests import model_factory as mf

pytestmark = pytest.mark.gpu

TEXTS = ["The quick brown fox jumps over the lazy dog.", "你好，世界！今天天气很好。我们在测试中文分词。",
         "def main():\n    return [x * 2 for x in range(10)]", "Hello, world! " * 60, ""]


def _files(tmp_path):
    cfg = mf.tiny_qwen3_config(tie=True)
    tok = mf.embedding_tokenizer()
    dense = mf.write_embedding_hf_folder(mf.make_dense_hf_model(cfg, seed=3), tok, tmp_path / "dense")
    ternary = mf.write_gguf(mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=5), tok),
                            tmp_path / "ternary.gguf", "PQ2_0")
    return {"dense": dense, "ternary": ternary}


@pytest.mark.parametrize("kind", ["dense", "ternary"])
def test_cuda_vectors_equal_cpu_vectors(tmp_path, kind):
    path = _files(tmp_path)[kind]
    cpu = EmbeddingModel.load(path, "cpu", max_tokens=48).embed_documents(TEXTS)
    gpu_model = EmbeddingModel.load(path, "cuda", max_tokens=48)
    gpu = gpu_model.embed_documents(TEXTS)
    assert gpu_model.device.type == "cuda" and gpu.dtype == np.float32
    cos = (cpu * gpu).sum(-1)
    assert cos.min() >= 0.9999, cos
    q = gpu_model.embed_query("fox")
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
