"""qwen35 through the project's own format code: HF state dict -> GGUF (PQ2_0 / PTQ1_0) -> ModelData.

The engine on the GGUF must equal the engine on the HF weights (and transformers): this covers the
+1 norm folding, ssm_a, the conv layout, the V-head reorder of packed ternary tensors and the
``prism.hadamard.*`` metadata through our GGUF writer and reader.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hybrid_helpers import build_tiny
from test_hybrid_hadamard import rotated_pair

import runtime.model.qwen35.spec  # noqa: F401  (registers qwen35 for HF model_type lookups)
from runtime.formats.gguf import read_gguf
from runtime.formats.gguf_writer import write_gguf
from runtime.formats.hf import model_data_from_state_dict
from runtime.formats.model_data import TernaryTensor
from runtime.model.qwen35.model import Qwen35Model

PROMPT = torch.randint(0, 96, (24,), generator=torch.Generator().manual_seed(4))
# widths that fit 128-weight GGUF blocks; value head dim = group so ssm_out columns can be reordered
SHAPES = dict(hidden_size=128, intermediate_size=256, linear_key_head_dim=32, linear_value_head_dim=128)


def logits(data) -> torch.Tensor:
    with torch.no_grad():
        return Qwen35Model.from_model_data(data, max_positions=32, backend="reference")(PROMPT, torch.arange(24))


@pytest.mark.parametrize("ttype", ["PQ2_0", "PTQ1_0"])
def test_hybrid_hf_to_gguf_to_engine(tmp_path, ttype):
    hf, _ = build_tiny("gqa_2x", seed=21, group=128, **SHAPES)
    state = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    data = model_data_from_state_dict(hf.config.to_dict(), state, group_size=128, name="tiny-hf")
    assert data.config.norm_weight_offset == 1.0
    path = write_gguf(data, tmp_path / "tiny.gguf", ttype)
    back = read_gguf(path)
    assert back.config.arch == "qwen35" and back.config.norm_weight_offset == 0.0
    assert back.config.layer_types == data.config.layer_types
    assert "model.layers.0.linear_attn.A" in back.tensors and "model.layers.0.linear_attn.A_log" in data.tensors
    assert back.tensors["model.layers.0.linear_attn.conv1d.weight"].shape == \
        data.tensors["model.layers.0.linear_attn.conv1d.weight"].shape
    for n, t in data.tensors.items():  # ternary weights survive bit-exactly (after the V-head un-reorder)
        if isinstance(t, TernaryTensor):
            assert torch.equal(back.tensors[n].dequantize(), t.dequantize()), n
    with torch.no_grad():
        ref = hf(PROMPT[None]).logits[0]
    la, lb = logits(data), logits(back)
    assert (la - ref).abs().max().item() < 1e-3
    assert (la - lb).abs().max().item() < 1e-4


def test_hybrid_rotated_gguf_keeps_rotation(tmp_path):
    hf, data = rotated_pair("gqa_2x", 32)
    # the rotated tiny model has 16-wide groups: PQ2_0 needs 128, so write F32 (ternarized on read)
    path = write_gguf(data, tmp_path / "rot.gguf", "F32")
    back = read_gguf(path, group_size=16)
    hc, hc2 = data.config.hadamard, back.config.hadamard
    assert hc2 is not None and hc2.block_size == hc.block_size and hc2.gdn_v_grouped == hc.gdn_v_grouped
    assert sorted(hc2.weight_names) == sorted(hc.weight_names)
    assert hc2.inverse_weight_names == ["model.embed_tokens.weight"]
    assert {int(k): list(v) for k, v in hc2.signs.items()} == {int(k): list(v) for k, v in hc.signs.items()}
    with torch.no_grad():
        ref = hf(PROMPT[None]).logits[0].log_softmax(-1)
    assert (logits(back).log_softmax(-1) - ref).abs().max().item() < 1e-3
    stripped = copy.deepcopy(back)
    stripped.config.hadamard = None
    stripped.name = "Ternary-Bonsai-2-tiny"
    with pytest.raises(Exception, match="prism.hadamard"):
        logits(stripped)


def test_hybrid_rotated_model_survives_ternary_file(tmp_path):
    """.ternary keeps the hybrid's layout and the rotation (signs come back from the JSON header)."""
    from runtime.formats.ternary_file import read_ternary, write_model

    hf, data = rotated_pair("gqa_3x", 16, grouped=False)
    path = write_model(data, tmp_path / "rot.ternary")
    back = read_ternary(path)
    assert back.config.hadamard is not None and not back.config.hadamard.gdn_v_grouped
    assert (logits(back) - logits(data)).abs().max().item() < 1e-5
