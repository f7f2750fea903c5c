"""The embedding lookup (``runtime.kernels.ternary_embedding``) equals the dequantized table, and the GPU-side
gather used on pinned host tables equals the lookup."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.model_data import T2, T3
from runtime.kernels import reference_ops as ref
from runtime.kernels.ternary_embedding import DenseEmbedding, TernaryEmbedding
from runtime.kernels.triton.gather import gather_rows
from runtime.offload import MappedHostEmbedding
from runtime.synthetic import random_ternary


@pytest.mark.parametrize("encoding,group", [(T2, 64), (T3, 128), (T3, 64)])
def test_ternary_embedding_rows_are_rows_of_the_dequantized_table(encoding, group):
    t = random_ternary("emb", (23, 2 * group + 64 if encoding == T2 else 3 * group), seed=4, group_size=group,
                       encoding=encoding)
    ids = torch.tensor([22, 0, 7, 7])
    table = ref.ternary_weight(t.codes, t.scales, group, encoding)
    got = TernaryEmbedding(t, torch.device("cpu"))(ids, torch.float32)
    assert torch.equal(got, table[ids].float())


@pytest.mark.parametrize("encoding,group", [(T2, 64), (T2, 128), (T3, 128), (T3, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_rows_equal_the_ternary_embedding(encoding, group, dtype):
    t = random_ternary("emb", (37, 3 * 1024 + group), seed=3, group_size=group, encoding=encoding)
    ref = TernaryEmbedding(t, torch.device("cpu"))
    ids = torch.tensor([0, 36, 5, 5, 17])
    got = gather_rows(ids, dtype, codes=t.codes, scales=t.scales, group_size=group, encoding=encoding)
    assert got.dtype == dtype and got.shape == (5, t.shape[1])
    want = ref(ids, dtype)
    if dtype == torch.float32:
        assert torch.equal(got, want)
    else:  # the interpreter's float->bf16 conversion may round differently: one bf16 ulp
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=0)


def test_dense_rows_equal_the_dense_embedding():
    w = torch.randn(11, 300, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    ids = torch.tensor([10, 0, 3])
    assert torch.equal(gather_rows(ids, torch.float32, dense=w), DenseEmbedding(w)(ids, torch.float32))


def test_mapped_embedding_is_only_offered_for_cuda():
    t = random_ternary("emb", (8, 128), group_size=64)
    assert not MappedHostEmbedding.supports(TernaryEmbedding(t, torch.device("cpu")), "cpu")
