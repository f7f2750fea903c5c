"""Hugging Face folders (PrismML -unpacked style): exact ternary recovery from fp32/fp16/bf16
safetensors, sharded checkpoints, tokenizer/template/generation defaults, non-ternary weights
(kept dense with a notice; refused by a strict source, naming tensor, row and group) and refusal
of corrupt safetensors."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch

from runtime.errors import ModelFormatError, TernaryError, UnsupportedModelError
from runtime.formats.hf import HFSource, read_hf_folder
from runtime.formats.model_data import TernaryTensor
from tests.model_factory import (
    GENERATION_DEFAULTS,
    QWEN3_CHAT_TEMPLATE,
    TOKEN_IDS,
    make_ternary_hf_model,
    tiny_qwen3_config,
    write_hf_folder,
)


def assert_same(a, b):
    assert a.config == b.config
    assert list(a.tensors) == list(b.tensors) or set(a.tensors) == set(b.tensors)
    for n, t in b.tensors.items():
        x = a.tensors[n]
        if isinstance(t, TernaryTensor):
            assert isinstance(x, TernaryTensor), n
            assert torch.equal(x.codes, t.codes), n
            assert torch.equal(x.scales.view(torch.int16), t.scales.view(torch.int16)), n
        else:
            assert torch.equal(x.data, t.data), n


def test_folder_matches_in_memory_model(hf_folder, model_data, hf_model):
    md = read_hf_folder(hf_folder)
    assert_same(md, model_data)
    assert md.config.vocab_size == 300 and md.config.rope_scaling.type == "yarn"
    assert md.config.rope_scaling.factor == 4.0 and md.config.rope_scaling.original_max_position_embeddings == 128
    # reconstructed weights equal the transformers weights exactly
    sd = hf_model.state_dict()
    for n, t in md.tensors.items():
        w = t.dequantize() if isinstance(t, TernaryTensor) else t.data
        assert torch.equal(w, sd[n].float()), n
    tok = md.tokenizer
    assert tok.chat_template == QWEN3_CHAT_TEMPLATE
    assert tok.eos_token_ids[:2] == [TOKEN_IDS["<|im_end|>"], TOKEN_IDS["<|endoftext|>"]]
    assert tok.pad_token_id == TOKEN_IDS["<|endoftext|>"] and tok.bos_token_id is None and not tok.add_bos_token
    for k, v in GENERATION_DEFAULTS.items():
        assert md.generation_defaults[k] == v


def test_sharded_folder_is_identical(hf_folder_sharded, model_data):
    shards = list(hf_folder_sharded.glob("*.safetensors"))
    assert len(shards) > 2 and (hf_folder_sharded / "model.safetensors.index.json").exists()
    assert_same(read_hf_folder(hf_folder_sharded), model_data)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_checkpoints_recover_identical_codes(tmp_path, tokenizer, model_data, hf_model, dtype):
    import copy

    folder = write_hf_folder(copy.deepcopy(hf_model).to(dtype), tokenizer, tmp_path / "half")
    md = read_hf_folder(folder)
    for n, t in model_data.tensors.items():
        if isinstance(t, TernaryTensor):
            assert torch.equal(md.tensors[n].codes, t.codes) and torch.equal(md.tensors[n].scales, t.scales), n
        else:
            assert md.tensors[n].data.dtype == dtype


def test_group_64_and_t3_recovery(hf_folder, model_data):
    md = read_hf_folder(hf_folder, group_size=64, ternary_encoding="t3")
    for n, t in model_data.tensors.items():
        if isinstance(t, TernaryTensor):
            assert md.tensors[n].group_size == 64 and md.tensors[n].encoding == "t3"
            assert torch.equal(md.tensors[n].dequantize(), t.dequantize()), n


def test_tied_checkpoint(tmp_path, tokenizer):
    model = make_ternary_hf_model(tiny_qwen3_config(tie=True), seed=4)
    md = read_hf_folder(write_hf_folder(model, tokenizer, tmp_path / "tied"))
    assert md.config.tie_word_embeddings and "lm_head.weight" not in md.tensors


@pytest.fixture()
def non_ternary_folder(tmp_path, hf_folder):
    from safetensors.torch import load_file, save_file

    dst = tmp_path / "bad"
    shutil.copytree(hf_folder, dst)
    sd = load_file(dst / "model.safetensors")
    w = sd["model.layers.1.mlp.gate_proj.weight"].clone()
    w[37, 130] = w[37, 128:256].abs().max() * 0.5  # row 37, group 1 now holds s/2
    sd["model.layers.1.mlp.gate_proj.weight"] = w
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_non_ternary_weight_loads_dense_with_a_notice(non_ternary_folder, hf_folder):
    """A matrix that is not ternary is kept as the dense matrix stored (never refused), the others
    stay ternary, the notice names it and its cost, and the model runs it: its logits equal a
    reference that holds that matrix dense from the start."""
    from safetensors.torch import load_file

    from runtime.formats.loader import load_model
    from runtime.formats.model_data import DenseTensor
    from runtime.model.qwen3 import Qwen3Model

    name = "model.layers.1.mlp.gate_proj.weight"
    data = load_model(non_ternary_folder)
    stored = load_file(non_ternary_folder / "model.safetensors")[name]
    assert isinstance(data.tensors[name], DenseTensor) and torch.equal(data.tensors[name].data, stored)
    assert sum(isinstance(t, DenseTensor) and t.data.ndim == 2 for t in data.tensors.values()) == 1
    assert len(data.notices) == 1 and name in data.notices[0]
    assert "1 weight matrices are not ternary" in data.notices[0] and "MB instead of" in data.notices[0]
    assert read_hf_folder(non_ternary_folder).notices == data.notices
    ref = read_hf_folder(hf_folder)  # the same model, all ternary, then the one matrix swapped in dense
    assert ref.notices == []
    ref.tensors[name] = DenseTensor(stored.clone())
    ids = torch.arange(40) % data.config.vocab_size
    with torch.no_grad():
        got = Qwen3Model.from_model_data(data, max_positions=64, backend="reference")(ids, torch.arange(40))
        want = Qwen3Model.from_model_data(ref, max_positions=64, backend="reference")(ids, torch.arange(40))
        before = Qwen3Model.from_model_data(read_hf_folder(hf_folder), max_positions=64,
                                            backend="reference")(ids, torch.arange(40))
    assert torch.equal(got, want) and not torch.equal(got, before)


def test_strict_source_refuses_naming_tensor_row_and_group(non_ternary_folder):
    """``strict`` (what ``convert`` opens sources with) refuses instead of keeping the matrix dense."""
    with pytest.raises(ModelFormatError, match=r"model\.layers\.1\.mlp\.gate_proj\.weight is not ternary: "
                                               r"row 37, group 1 .*--quantize"):
        read_hf_folder(non_ternary_folder, strict=True)


def test_quantize_option_reports_the_error(non_ternary_folder):
    src = HFSource(non_ternary_folder, quantize=True)
    try:
        t = src.load("model.layers.1.mlp.gate_proj.weight")
        assert isinstance(t, TernaryTensor)
        assert src.max_quant_error == pytest.approx(0.5, abs=1e-3)
    finally:
        src.close()


def test_row_numbers_are_global_when_chunked(tmp_path, hf_folder, monkeypatch):
    """Recovery works in row chunks; the reported row is still the tensor's row."""
    from safetensors.torch import load_file, save_file

    from runtime.formats import hf as hfmod

    monkeypatch.setattr(hfmod, "CHUNK_WEIGHTS", 256 * 8)  # 8 rows per chunk
    dst = tmp_path / "chunk"
    shutil.copytree(hf_folder, dst)
    sd = load_file(dst / "model.safetensors")
    sd["model.layers.0.mlp.up_proj.weight"][301, 5] = 1e-3 + sd["model.layers.0.mlp.up_proj.weight"][301, 5]
    save_file(sd, dst / "model.safetensors")
    with pytest.raises(ModelFormatError, match="row 301, group 0"):
        read_hf_folder(dst, strict=True)


def _corrupt_copy(tmp_path, hf_folder, mutate):
    dst = tmp_path / "corrupt"
    shutil.copytree(hf_folder, dst)
    p = dst / "model.safetensors"
    raw = bytearray(p.read_bytes())
    p.write_bytes(mutate(raw))
    return dst


def _header_edit(edit):
    def mutate(raw: bytearray) -> bytes:
        (n,) = struct.unpack("<Q", raw[:8])
        h = json.loads(raw[8:8 + n])
        edit(h)
        new = json.dumps(h).encode()
        return struct.pack("<Q", len(new)) + new + bytes(raw[8 + n:])
    return mutate


@pytest.mark.parametrize("mutate,msg", [
    (lambda raw: struct.pack("<Q", 1 << 60) + bytes(raw[8:]), "header length"),
    (lambda raw: bytes(raw[:4]), "truncated safetensors"),
    (lambda raw: bytes(raw[:len(raw) // 2]), "does not match"),
    (_header_edit(lambda h: h["model.norm.weight"].update(dtype="I32")), "dtype I32"),
    (_header_edit(lambda h: h["model.norm.weight"].update(shape=[1 << 40])), "does not match"),
    (_header_edit(lambda h: h["model.norm.weight"].update(data_offsets=[0, 1024])), "does not match|overlap"),
    (_header_edit(lambda h: h.pop("model.layers.0.mlp.up_proj.weight")), "missing tensors"),
    (_header_edit(lambda h: h.update({"extra.weight": h["model.norm.weight"]})), "does not know|overlap"),
    (lambda raw: struct.pack("<Q", 5) + b"{oops" + bytes(raw[13:]), "corrupt safetensors header"),
])
def test_corrupt_safetensors_are_refused(tmp_path, hf_folder, mutate, msg):
    with pytest.raises(TernaryError, match=msg):
        read_hf_folder(_corrupt_copy(tmp_path, hf_folder, mutate))


def test_bad_index_and_config(tmp_path, hf_folder_sharded):
    dst = tmp_path / "idx"
    shutil.copytree(hf_folder_sharded, dst)
    idx = json.loads((dst / "model.safetensors.index.json").read_text())
    first = next(iter(idx["weight_map"]))
    idx["weight_map"][first] = "../../etc/passwd.safetensors"
    (dst / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ModelFormatError, match="bad shard file name"):
        read_hf_folder(dst)
    (dst / "model.safetensors.index.json").unlink()
    next(dst.glob("*.safetensors")).unlink()
    with pytest.raises(ModelFormatError, match="missing tensors"):
        read_hf_folder(dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"] = "gpt_neox"
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="gpt_neox"):
        read_hf_folder(dst)
    (dst / "config.json").unlink()
    with pytest.raises(ModelFormatError, match="no config.json"):
        read_hf_folder(dst)
