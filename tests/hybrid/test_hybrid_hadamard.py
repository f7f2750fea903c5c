"""Bonsai 2 rotation: the transform itself, a rotated tiny model against its un-rotated reference, refusals."""

from __future__ import annotations

import copy

import pytest
import torch
from hybrid_helpers import build_tiny

from runtime.errors import UnsupportedModelError
from runtime.formats.model_data import DenseTensor, TernaryTensor
from runtime.model.config import HadamardConfig
from runtime.model.qwen35.hadamard import HadamardRotation, fwht, hadamard_matrix, signs_from_config
from runtime.model.qwen35.model import Qwen35Model
from runtime.model.qwen35.names import hadamard_from_gguf, v_head_permutation

PROMPT = torch.randint(0, 96, (40,), generator=torch.Generator().manual_seed(5))


def test_hybrid_fwht_equals_dense_sylvester_matrix():
    x = torch.randn(3, 4 * 32, dtype=torch.float64)
    h = hadamard_matrix(32)
    assert torch.allclose(fwht(x, 32), (x.view(3, 4, 32) @ h.T).view(3, -1), atol=1e-12)
    assert torch.allclose(fwht(fwht(x, 32), 32), x, atol=1e-12)  # orthonormal and symmetric
    assert h[1, 1] < 0 and h[3, 1] < 0 and h[2, 1] > 0  # -1 iff popcount(r & c) odd


def _folded_names(data) -> list[str]:
    """The matrices PrismML folds: GDN qkv/z/out, attention q/k/v/o, MLP, LM head (not a/b)."""
    keep = ("in_proj_a.weight", "in_proj_b.weight", "embed_tokens.weight")
    return [n for n, t in data.tensors.items() if isinstance(t, TernaryTensor) and not n.endswith(keep)]


def rotated_pair(name: str, block: int, grouped: bool = True, seed: int = 7):
    """(HF reference with un-rotated weights, ModelData whose ternary weights are stored rotated).

    Like the real files, the *stored* weights are ternary; the reference is their exact
    un-rotation (``W = W_stored R``, embedding ``e = R^T e_stored``).
    """
    hf, data = build_tiny(name, seed=seed)
    cfg = data.config
    widths = sorted({data.tensors[n].shape[1] for n in _folded_names(data)} | {cfg.hidden_size})
    g = torch.Generator().manual_seed(seed)
    signs = {w: (torch.randint(0, 2, (w,), generator=g) * 2 - 1).tolist() for w in widths}
    hc = HadamardConfig(block_size=block, sign_widths=widths, weight_names=_folded_names(data),
                        inverse_weight_names=["model.embed_tokens.weight"], gdn_v_grouped=grouped, signs=signs)
    rot = HadamardRotation(block, signs_from_config(hc))
    params = dict(hf.named_parameters())
    nk, nv, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_value_head_dim
    with torch.no_grad():
        for n in hc.weight_names + hc.inverse_weight_names:
            stored = data.tensors[n].dequantize(torch.float64)
            ref = rot.inverse(stored)  # rows: w = R^T w_stored (same for the embedding table)
            if not grouped and n.endswith("linear_attn.out_proj.weight"):
                # stored folded over the tiled V-head order: reference columns back to grouped
                ref = ref[:, v_head_permutation(nk, nv, dv, to_grouped=True)]
            params[n].copy_(ref.to(torch.float32))
    data = copy.copy(data)
    data.config = copy.deepcopy(cfg)
    data.config.hadamard = hc
    return hf, data


@pytest.mark.parametrize("name,block,grouped", [("gqa_2x", 32, True), ("gqa_3x", 16, True), ("gqa_2x", 16, False)])
def test_hybrid_rotated_weights_equal_unrotated_reference(name, block, grouped):
    hf, data = rotated_pair(name, block, grouped)
    model = Qwen35Model.from_model_data(data, max_positions=64, backend="reference")
    with torch.no_grad():
        ref = hf(PROMPT[None]).logits[0].log_softmax(-1)
        ours = model(PROMPT, torch.arange(len(PROMPT))).log_softmax(-1)
    assert (ref - ours).abs().max().item() < 1e-3
    # and the same file run without its rotation is far off: the metadata is load-bearing
    plain = copy.copy(data)
    plain.config = copy.deepcopy(data.config)
    plain.config.hadamard = None
    with torch.no_grad():
        wrong = Qwen35Model.from_model_data(plain, max_positions=64, backend="reference")(
            PROMPT, torch.arange(len(PROMPT))).log_softmax(-1)
    assert (ref - wrong).abs().max().item() > 0.5


def test_hybrid_bonsai2_without_rotation_metadata_is_refused():
    _, data = build_tiny("equal_heads")
    data.name = "Ternary-Bonsai-2-27B-PQ2_0"
    with pytest.raises(UnsupportedModelError, match="prism.hadamard"):
        Qwen35Model.from_model_data(data, max_positions=32, backend="reference")


def test_hybrid_incomplete_rotation_metadata_is_refused():
    _, data = rotated_pair("equal_heads", 16)
    hc = data.config.hadamard
    broken = copy.deepcopy(data)
    del broken.config.hadamard.signs[data.config.intermediate_size]
    with pytest.raises(UnsupportedModelError, match="sign vector"):
        Qwen35Model.from_model_data(broken, max_positions=32, backend="reference")
    broken = copy.deepcopy(data)
    broken.config.hadamard.transform = "random-orthogonal"
    with pytest.raises(UnsupportedModelError, match="transform"):
        Qwen35Model.from_model_data(broken, max_positions=32, backend="reference")
    broken = copy.deepcopy(data)
    broken.config.hadamard.weight_names = hc.weight_names + ["model.layers.99.mlp.up_proj.weight"]
    with pytest.raises(UnsupportedModelError, match="does not have"):
        Qwen35Model.from_model_data(broken, max_positions=32, backend="reference")
    broken = copy.deepcopy(data)
    broken.config.hadamard.signs[data.config.hidden_size][0] = 0
    with pytest.raises(UnsupportedModelError, match=r"\+1/-1"):
        Qwen35Model.from_model_data(broken, max_positions=32, backend="reference")


def test_hybrid_gguf_rotation_keys_parse_and_refuse_partial():
    kv = {
        "prism.hadamard.version": 1, "prism.hadamard.block_size": 4,
        "prism.hadamard.transform": "normalized-sylvester-walsh-hadamard",
        "prism.hadamard.axis": "input-last-dimension", "prism.hadamard.sign_mode": "explicit",
        "prism.hadamard.sign_widths": [4, 8], "prism.hadamard.sign_values": [1, -1, 1, 1] + [-1] * 8,
        "prism.hadamard.weight_names": ["blk.0.attn_qkv.weight", "output.weight", "blk.2.nextn.eh_proj.weight"],
        "prism.hadamard.inverse_weight_names": ["token_embd.weight"], "prism.hadamard.gdn_v_grouped": True,
    }
    hc = hadamard_from_gguf(kv, num_layers=2)
    assert hc is not None
    assert hc.weight_names == ["model.layers.0.linear_attn.in_proj_qkv.weight", "lm_head.weight"]
    assert hc.inverse_weight_names == ["model.embed_tokens.weight"]
    assert hc.signs == {4: [1, -1, 1, 1], 8: [-1] * 8}
    mlx = dict(kv, **{"prism.hadamard.inverse_weight_names": ["language_model.model.embed_tokens.weight"]})
    assert hadamard_from_gguf(mlx, 2).inverse_weight_names == ["model.embed_tokens.weight"]
    assert hadamard_from_gguf({"general.architecture": "qwen35"}) is None
    for key in ("prism.hadamard.sign_values", "prism.hadamard.weight_names", "prism.hadamard.block_size"):
        partial = {k: v for k, v in kv.items() if k != key}
        with pytest.raises(UnsupportedModelError):
            hadamard_from_gguf(partial, 2)
    with pytest.raises(UnsupportedModelError, match="sign_values"):
        hadamard_from_gguf(dict(kv, **{"prism.hadamard.sign_values": [1] * 11}), 2)


def test_hybrid_rotation_shares_dense_keep_list_unrotated():
    """in_proj_a/b (BF16 keep-list, not folded) see the plain activation next to rotated qkv/z."""
    _, data = rotated_pair("gqa_2x", 32)
    assert all(isinstance(data.tensors[n], DenseTensor) for n in data.tensors if n.endswith("in_proj_a.weight"))
    assert not any(n.endswith(("in_proj_a.weight", "in_proj_b.weight")) for n in data.config.hadamard.weight_names)


def test_hybrid_matmul_rotation_equals_butterfly():
    """The CUDA-default GEMM form and the butterfly give the same R and R^T."""
    g = torch.Generator().manual_seed(2)
    signs = {64: (torch.randint(0, 2, (64,), generator=g) * 2 - 1).float(),
             96: (torch.randint(0, 2, (96,), generator=g) * 2 - 1).float()}
    fly = HadamardRotation(32, signs, method="butterfly")
    mm = HadamardRotation(32, signs, method="matmul")
    for w in (64, 96):
        x = torch.randn(5, w, generator=g)
        assert torch.allclose(fly(x), mm(x), atol=1e-5)
        assert torch.allclose(fly.inverse(x), mm.inverse(x), atol=1e-5)
        assert torch.allclose(fly.inverse(fly(x)), x, atol=1e-5)


def test_hybrid_bonsai2_name_rule():
    from runtime.model.qwen35.hadamard import refuse_if_rotated_without_metadata as refuse

    for ok in ("Ternary-Bonsai-27B-PQ2_0.gguf", "synthetic-bonsai-27b-ptq1", "Ternary-Bonsai-8B", ""):
        refuse(None, ok)
    for bad in ("Ternary-Bonsai-2-27B-PTQ1_0.gguf", "Ternary Bonsai 2 9B", "prism-ml/Ternary-Bonsai-2-4B-gguf"):
        with pytest.raises(UnsupportedModelError):
            refuse(None, bad)
    refuse(HadamardConfig(), "Ternary-Bonsai-2-27B-PTQ1_0.gguf")  # metadata present: fine
