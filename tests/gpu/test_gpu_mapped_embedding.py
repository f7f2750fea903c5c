"""The offloaded embedding table in pinned host memory, gathered by the GPU inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.model_data import T2, T3
from runtime.kernels.ternary_embedding import TernaryEmbedding
from runtime.offload import MappedHostEmbedding
from runtime.synthetic import random_ternary

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("encoding", [T2, T3])
def test_mapped_host_embedding_in_a_cuda_graph(encoding):
    t = random_ternary("emb", (1000, 5120), seed=2, group_size=128, encoding=encoding)
    on_gpu = TernaryEmbedding(t, torch.device("cuda"))
    mapped = MappedHostEmbedding(TernaryEmbedding(t, torch.device("cpu")), "cuda")
    assert mapped.inner.codes.is_pinned() and mapped.inner.codes.device.type == "cpu"
    assert MappedHostEmbedding.supports(on_gpu, "cuda")
    before = torch.cuda.memory_allocated()
    ids = torch.tensor([7], device="cuda")
    for _ in range(2):
        mapped(ids, torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = mapped(ids, torch.bfloat16)
    for tok in (0, 999, 123):
        ids.fill_(tok)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, on_gpu(ids, torch.bfloat16))
    assert torch.cuda.memory_allocated() - before < 1 << 20  # the table itself never came over
