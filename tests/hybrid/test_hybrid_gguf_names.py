"""qwen35 GGUF conventions: names, +1 norms, ssm_a, conv shape, V-head reorder, through a real GGUF file.

The file is written and read with the ``gguf`` package (llama.cpp's own Python library), with F32
tensors, so this checks our naming / value conventions independently of our GGUF codecs.
"""

from __future__ import annotations

import copy

import gguf
import numpy as np
import pytest
import torch
from hybrid_helpers import build_tiny

from runtime.formats.codecs import quantize_ternary
from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor
from runtime.model.qwen35.model import Qwen35Model
from runtime.model.qwen35.names import (
    canonical_name_to_gguf,
    config_from_gguf,
    gguf_metadata,
    gguf_name_to_canonical,
    tensor_from_gguf,
    tensor_to_gguf,
    v_head_permutation,
)

PROMPT = torch.randint(0, 96, (30,), generator=torch.Generator().manual_seed(9))


def llamacpp_reorder_v_heads(t: torch.Tensor, dim: int, nk: int, r: int, hd: int) -> torch.Tensor:
    """llama.cpp ``_LinearAttentionVReorderBase._reorder_v_heads`` (grouped -> tiled), restated."""
    shape = list(t.shape)
    t = t.reshape(*shape[:dim], nk, r, hd, *shape[dim + 1:])
    perm = list(range(t.dim()))
    perm[dim], perm[dim + 1] = perm[dim + 1], perm[dim]
    return t.permute(*perm).contiguous().reshape(shape)


def test_hybrid_v_head_permutation_matches_llamacpp():
    nk, nv, hd = 2, 6, 3
    x = torch.randn(5, nv * hd)
    tiled = llamacpp_reorder_v_heads(x, 1, nk, nv // nk, hd)
    assert torch.equal(x[:, v_head_permutation(nk, nv, hd, to_grouped=False)], tiled)
    assert torch.equal(tiled[:, v_head_permutation(nk, nv, hd, to_grouped=True)], x)


def test_hybrid_gguf_names_are_llamacpp_names():
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN35, 4)
    for hf_name in ["model.layers.0.linear_attn.in_proj_qkv.weight", "model.layers.0.linear_attn.in_proj_z.weight",
                    "model.layers.0.linear_attn.in_proj_a.weight", "model.layers.0.linear_attn.in_proj_b.weight",
                    "model.layers.0.linear_attn.conv1d.weight", "model.layers.0.linear_attn.norm.weight",
                    "model.layers.0.linear_attn.out_proj.weight", "model.layers.3.self_attn.q_proj.weight",
                    "model.layers.3.self_attn.o_proj.weight", "model.layers.3.self_attn.k_norm.weight",
                    "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                    "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight", "model.norm.weight",
                    "lm_head.weight"]:
        expect = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert canonical_name_to_gguf(hf_name) == expect
        assert gguf_name_to_canonical(expect, 4) == hf_name
    assert tmap.get_name("model.layers.2.linear_attn.A_log") == "blk.2.ssm_a"
    assert canonical_name_to_gguf("model.layers.2.linear_attn.A_log") == "blk.2.ssm_a"
    assert gguf_name_to_canonical("blk.2.ssm_dt.bias", 4) == "model.layers.2.linear_attn.dt_bias"
    assert gguf_name_to_canonical("blk.4.nextn.eh_proj.weight", 4) is None  # MTP head: not loaded


def _write_gguf(path, data: ModelData) -> None:
    cfg = data.config
    w = gguf.GGUFWriter(str(path), "qwen35")
    for key, value in gguf_metadata(cfg).items():
        if key == "general.architecture":
            continue
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for name, t in data.tensors.items():
        gname, gt = tensor_to_gguf(name, t, cfg)
        arr = gt.dequantize(torch.float32) if isinstance(gt, TernaryTensor) else gt.data.to(torch.float32)
        w.add_tensor(gname, arr.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _read_gguf(path, ternary_names: set[str], group: int) -> ModelData:
    r = gguf.GGUFReader(str(path))
    kv = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}
    arrays = {t.name: np.array(t.data) for t in r.tensors}
    cfg = config_from_gguf(kv, {n: tuple(a.shape) for n, a in arrays.items()})
    tensors = {}
    for gname, arr in arrays.items():
        name = gguf_name_to_canonical(gname, cfg.num_layers)
        assert name is not None
        dense = DenseTensor(torch.from_numpy(arr.copy()))
        t = quantize_ternary(dense.data, group)[0] if name in ternary_names else dense
        tensors[name] = tensor_from_gguf(name, t, cfg)
    return ModelData(config=cfg, tensors=tensors, name="tiny-from-gguf")


@pytest.mark.parametrize("name", ["gqa_2x", "gqa_3x"])
def test_hybrid_gguf_round_trip_runs_identically(tmp_path, name):
    _, data = build_tiny(name, seed=11)
    ternary = {n for n, t in data.tensors.items() if isinstance(t, TernaryTensor)}
    path = tmp_path / "tiny.gguf"
    _write_gguf(path, data)
    back = _read_gguf(path, ternary, 16)
    cfg = back.config
    assert cfg.norm_weight_offset == 0.0 and data.config.norm_weight_offset == 1.0
    assert cfg.layer_types == data.config.layer_types
    # GGUF norms carry the folded +1 (mean ~1), HF's are zero-centred (mean ~0); the gated norm is plain in both
    n0 = "model.layers.0.input_layernorm.weight"
    assert back.tensors[n0].data.mean() > 0.5 > abs(float(data.tensors[n0].data.mean()))
    gated = next(n for n in data.tensors if n.endswith("linear_attn.norm.weight"))
    assert torch.equal(back.tensors[gated].data, data.tensors[gated].data)
    a_name = next(n for n in back.tensors if n.endswith("linear_attn.A"))
    assert bool((back.tensors[a_name].data < 0).all())
    for n, t in back.tensors.items():  # ternary weights come back bit-identical, after the un-reorder
        if isinstance(t, TernaryTensor):
            assert torch.equal(t.codes, data.tensors[n].codes) and torch.equal(t.scales, data.tensors[n].scales), n
    a = Qwen35Model.from_model_data(data, max_positions=64, backend="reference")
    b = Qwen35Model.from_model_data(back, max_positions=64, backend="reference")
    with torch.no_grad():
        la, lb = a(PROMPT, torch.arange(30)), b(PROMPT, torch.arange(30))
    assert (la - lb).abs().max().item() < 1e-4


def test_hybrid_gguf_norm_convention_matters():
    """Reading GGUF norms with the HF +1 convention must change the output (guards the offset)."""
    _, data = build_tiny("equal_heads", seed=12)
    wrong = copy.copy(data)
    wrong.config = copy.deepcopy(data.config)
    wrong.config.norm_weight_offset = 0.0
    with torch.no_grad():
        la = Qwen35Model.from_model_data(data, max_positions=32, backend="reference")(PROMPT, torch.arange(30))
        lb = Qwen35Model.from_model_data(wrong, max_positions=32, backend="reference")(PROMPT, torch.arange(30))
    assert (la - lb).abs().max().item() > 0.1


def test_hybrid_qwen35_pretokenizer_keeps_combining_marks():
    """GGUF ``tokenizer.ggml.pre = "qwen35"``: like qwen2, but letters keep their combining marks."""
    import json

    from tokenizers import Regex, pre_tokenizers

    import runtime.model.qwen35.spec  # noqa: F401  (registers the "qwen35" pre-tokenizer)
    from runtime.formats.gguf_tokenizer import PRE_TOKENIZERS

    def split(pre: str, text: str) -> list[str]:
        regex = PRE_TOKENIZERS[pre][1]["pretokenizers"][0]["pattern"]["Regex"]
        return [p for p, _ in pre_tokenizers.Split(Regex(regex), "isolated").pre_tokenize_str(text)]

    text = "q\u0301x don't 123"
    assert split("qwen35", text)[0] == "q\u0301x"
    assert split("qwen2", text)[0] == "q"
    assert json.dumps(PRE_TOKENIZERS["qwen35"][0]) == '{"type": "NFC"}'
