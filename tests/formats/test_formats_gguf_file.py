"""GGUF container: write -> read -> .ternary -> read keeps every code and scale; metadata and
names map correctly; gguf-py (llama.cpp's reader) agrees on mainline files; hostile files are
refused with a clear message (including a hypothesis fuzz of the header parser)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.errors import ModelFormatError, TernaryError, UnsupportedModelError
from runtime.formats import gguf_codecs as gc
from runtime.formats.gguf import GGUFFile, GGUFSource, read_gguf
from runtime.formats.model_data import T2, T3, DenseTensor, TernaryTensor
from runtime.formats.ternary_file import read_ternary, write_model
from tests.model_factory import LOSSLESS_GGUF_TTYPES, write_gguf


def same_weights(a, b) -> bool:
    da = a.dequantize() if isinstance(a, TernaryTensor) else a.data.float()
    db = b.dequantize() if isinstance(b, TernaryTensor) else b.data.float()
    return torch.equal(da, db)


def regrouped(t: TernaryTensor, g: int) -> TernaryTensor:
    """The same tensor at group size g (for comparing codes/scales bit for bit)."""
    return gc.regroup(t, g)


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory, model_data):
    d = tmp_path_factory.mktemp("gguf")
    return {tt: write_gguf(model_data, d / f"tiny-{tt}.gguf", tt) for tt in LOSSLESS_GGUF_TTYPES + ["Q8_0", "Q4_0"]}


@pytest.mark.parametrize("ttype", LOSSLESS_GGUF_TTYPES)
def test_gguf_round_trip_is_bit_exact_and_survives_ternary(ttype, gguf_files, model_data, tmp_path):
    back = read_gguf(gguf_files[ttype])
    assert back.config == model_data.config
    assert back.tokenizer.tokenizer_json and back.tokenizer.chat_template == model_data.tokenizer.chat_template
    assert back.generation_defaults == {k: v for k, v in model_data.generation_defaults.items()
                                        if k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")}
    assert set(back.tensors) == set(model_data.tensors)
    expect_g = {"Q2_0": 64, "Q2_0_LEGACY": 128, "PQ2_0": 128, "PTQ1_0": 128, "TQ1_0": 256, "TQ2_0": 256}.get(ttype, 128)
    for name, t in model_data.tensors.items():
        b = back.tensors[name]
        assert type(b) is type(t), name
        if isinstance(t, TernaryTensor):
            assert b.group_size == expect_g and b.encoding == (T3 if ttype == "PTQ1_0" else T2)
            ref = regrouped(t, expect_g)
            from runtime.formats.codecs import codes_of
            assert torch.equal(codes_of(b), codes_of(ref)), name
            assert torch.equal(b.scales.view(torch.int16), ref.scales.view(torch.int16)), name
        else:
            assert b.data.dtype == torch.float32 and torch.equal(b.data, t.data.float()), name
        assert same_weights(t, b), name
    # -> .ternary -> read: identical codes and scales to the GGUF decode
    out = write_model(back, tmp_path / "m.ternary")
    again = read_ternary(out, verify=True)
    for name, b in back.tensors.items():
        a = again.tensors[name]
        if isinstance(b, TernaryTensor):
            assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales) and a.encoding == b.encoding
        else:
            assert torch.equal(a.data, b.data)


def test_lossy_dense_quant_types_are_read(gguf_files, model_data):
    """Q8_0 is close enough to recover ternary codes; Q4_0's -7/8 step is not ternary: such matrices
    load dense as decoded, with a notice (refused only by a strict "error" source)."""
    q8 = read_gguf(gguf_files["Q8_0"])
    from runtime.formats.codecs import codes_of
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(codes_of(q8.tensors[name]), codes_of(model_data.tensors[name]))
    assert q8.notices == []
    with pytest.raises(ModelFormatError, match="not ternary"):
        read_gguf(gguf_files["Q4_0"], non_ternary="error")
    q4 = read_gguf(gguf_files["Q4_0"], non_ternary="dense")
    assert isinstance(q4.tensors[name], DenseTensor)
    auto = read_gguf(gguf_files["Q4_0"])
    dense = [n for n, t in auto.tensors.items() if isinstance(t, DenseTensor) and t.data.ndim == 2]
    assert name in dense and all(torch.equal(auto.tensors[n].data, q4.tensors[n].data) for n in dense)
    assert len(auto.notices) == 1 and f"{len(dense)} weight matrices are not ternary" in auto.notices[0]
    q4q = read_gguf(gguf_files["Q4_0"], non_ternary="quantize")
    assert isinstance(q4q.tensors[name], TernaryTensor)


def test_legacy_q2_0_is_detected_by_byte_span(gguf_files):
    legacy, g64 = GGUFFile(gguf_files["Q2_0_LEGACY"]), GGUFFile(gguf_files["Q2_0"])
    try:
        t_legacy = legacy.tensors["blk.0.ffn_up.weight"]
        t_g64 = g64.tensors["blk.0.ffn_up.weight"]
        assert t_legacy.gtype is gc.Q2_0_LEGACY and t_g64.gtype is gc.Q2_0
        assert t_legacy.gtype.type_id == t_g64.gtype.type_id == 42  # same id on disk
        assert t_legacy.nbytes == 512 * 256 // 128 * 34 and t_g64.nbytes == 512 * 256 // 64 * 18
    finally:
        legacy.close()
        g64.close()


def test_names_dims_and_types_agree_with_gguf_package(gguf_files):
    """llama.cpp's own Python reader sees the same tensors (mainline types) and metadata."""
    from gguf import GGUFReader

    for ttype in ("TQ1_0", "TQ2_0", "F16", "F32", "BF16"):
        ref = GGUFReader(gguf_files[ttype])
        ours = GGUFFile(gguf_files[ttype])
        try:
            assert {t.name for t in ref.tensors} == set(ours.tensors)
            for t in ref.tensors:
                o = ours.tensors[t.name]
                assert tuple(int(x) for x in reversed(t.shape.tolist())) == o.shape
                assert int(t.tensor_type) == o.gtype.type_id
                assert int(t.data_offset) == o.offset and int(t.n_bytes) == o.nbytes
            assert ref.fields["general.architecture"].contents() == "qwen3"
            assert ref.fields["qwen3.block_count"].contents() == ours.metadata["qwen3.block_count"] == 2
            assert ref.fields["tokenizer.ggml.tokens"].contents() == ours.metadata["tokenizer.ggml.tokens"]
            assert ref.fields["tokenizer.ggml.merges"].contents() == ours.metadata["tokenizer.ggml.merges"]
            assert ref.fields["qwen3.rope.scaling.type"].contents() == "yarn"
        finally:
            ours.close()


def test_gguf_package_dequantizes_our_mainline_files_identically(gguf_files, model_data):
    from gguf import GGUFReader, quants

    ref = GGUFReader(gguf_files["TQ2_0"])
    ours = read_gguf(gguf_files["TQ2_0"])
    t = next(t for t in ref.tensors if t.name == "blk.1.ffn_down.weight")
    w = quants.dequantize(t.data, t.tensor_type)
    assert np.array_equal(w, ours.tensors["model.layers.1.mlp.down_proj.weight"].dequantize().numpy())


def test_tied_model_has_no_output_tensor(tmp_path, tokenizer):
    from tests.model_factory import hf_model_to_model_data, make_ternary_hf_model, tiny_qwen3_config

    md = hf_model_to_model_data(make_ternary_hf_model(tiny_qwen3_config(tie=True), seed=2), tokenizer)
    p = write_gguf(md, tmp_path / "tied.gguf", "PQ2_0")
    f = GGUFFile(p)
    assert "output.weight" not in f.tensors
    f.close()
    back = read_gguf(p)
    assert back.config.tie_word_embeddings and "lm_head.weight" not in back.tensors


# ------------------------------------------------------------------------------------------------
# hostile files

def _gguf_bytes(*, version=3, n_tensors=0, kvs=b"", n_kv=0, infos=b"", data=b"") -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs + infos
    head += b"\0" * (-len(head) % 32)
    return head + data


def _kv_str(key: str, val: str) -> bytes:
    k, v = key.encode(), val.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v


def _info(name: str, ne: list[int], type_id: int, offset: int) -> bytes:
    n = name.encode()
    return struct.pack("<Q", len(n)) + n + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + \
        struct.pack("<IQ", type_id, offset)


def _open(tmp_path, data: bytes, name="x.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return GGUFSource(p)


@pytest.mark.parametrize("data,msg", [
    (b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, "version 1"),
    (b"GGUF" + struct.pack("<I", 4) + b"\0" * 16, "expected 2 or 3, got 4"),
    (b"GGUF" + struct.pack(">I", 3) + b"\0" * 16, "big-endian"),
    (b"GGUF\x03\0\0\0", "truncated"),
    (_gguf_bytes(n_kv=1 << 60), "metadata count"),
    (_gguf_bytes(n_tensors=1 << 60), "tensor count"),
    (_gguf_bytes(n_kv=1, kvs=struct.pack("<Q", 1 << 62) + b"abc"), "truncated or corrupt"),
    (_gguf_bytes(n_kv=1, kvs=struct.pack("<Q", 3) + b"key" + struct.pack("<IIQ", 9, 4, 1 << 61)), "elements"),
    (_gguf_bytes(n_kv=1, kvs=struct.pack("<Q", 3) + b"key" + struct.pack("<I", 99) + b"\0" * 8), "unknown metadata value type"),
    (_gguf_bytes(n_kv=2, kvs=_kv_str("a", "x") + _kv_str("a", "y")), "duplicate metadata key"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [1 << 40, 1 << 40], 0, 0)), "overflow"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [0], 0, 0)), "dims"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [4] * 5, 0, 0)), "5 dims"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [64], 0, 0), data=b"\0" * 100), "truncated or corrupt"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [8], 0, 8), data=b"\0" * 100), "not 32-aligned"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [8], 0, (1 << 64) - 32), data=b"\0" * 64), "truncated or corrupt"),
    (_gguf_bytes(n_tensors=2, infos=_info("t", [8], 0, 0) + _info("t", [8], 0, 32), data=b"\0" * 64), "duplicate tensor"),
    (_gguf_bytes(n_tensors=2, infos=_info("a", [16], 0, 0) + _info("b", [8], 0, 32), data=b"\0" * 128), "overlaps"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [30], 42, 0), data=b"\0" * 64), "not a multiple"),
    (_gguf_bytes(n_tensors=1, infos=_info("t", [256], 12, 0), data=b"\0" * 256), "Q4_K"),
    (_gguf_bytes(n_kv=1, kvs=_kv_str("general.architecture", "mamba")), "unsupported GGUF architecture"),
    (_gguf_bytes(n_kv=0), "general.architecture"),
])
def test_hostile_gguf_is_refused_with_message(tmp_path, data, msg):
    with pytest.raises(TernaryError, match=msg):
        _open(tmp_path, data)


def test_missing_tensor_and_bad_shape_are_refused(tmp_path, model_data):
    from runtime.formats.model_data import ModelData

    md = ModelData(model_data.config, {k: v for k, v in model_data.tensors.items()
                                       if k != "model.layers.1.mlp.up_proj.weight"}, model_data.tokenizer)
    p = write_gguf(md, tmp_path / "missing.gguf", "PQ2_0")
    with pytest.raises(ModelFormatError, match="missing tensors: model.layers.1.mlp.up_proj.weight"):
        GGUFSource(p)


def test_unknown_tensor_name_is_refused(tmp_path, gguf_files):
    data = bytearray(gguf_files["PQ2_0"].read_bytes())
    i = data.index(b"blk.0.ffn_up.weight")
    data[i:i + 19] = b"blk.0.ffn_zz.weight"
    with pytest.raises(UnsupportedModelError, match="blk.0.ffn_zz.weight"):
        _open(tmp_path, bytes(data))


def test_truncated_at_many_offsets_is_refused(tmp_path, gguf_files):
    data = gguf_files["PTQ1_0"].read_bytes()
    cuts = sorted(set(np.linspace(0, len(data) - 1, 60).astype(int).tolist()) | {0, 3, 4, 8, 23, 24, 25})
    for cut in cuts:
        with pytest.raises(TernaryError):
            _open(tmp_path, data[:cut], f"cut{cut}.gguf")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_gguf_headers_never_crash(tmp_path, gguf_files, data):
    """Random byte edits inside the header region give a clean result or a TernaryError, never a
    crash, a MemoryError or a hang."""
    raw = bytearray(gguf_files["TQ2_0"].read_bytes()[:6000])
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, 5999))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    p = tmp_path / "fuzz.gguf"
    p.write_bytes(bytes(raw[:cut]))
    try:
        GGUFSource(p).close()
    except TernaryError:
        pass


@pytest.mark.parametrize("ttype", LOSSLESS_GGUF_TTYPES)
def test_gguf_read_then_rewrite_is_byte_identical(ttype, gguf_files, tmp_path):
    """Reading a GGUF and writing it again in the same type reproduces the file byte for byte
    (codes, scales, metadata and tokenizer all survive exactly)."""
    src = gguf_files[ttype]
    again = write_gguf(read_gguf(src), tmp_path / "again.gguf", ttype)
    assert again.read_bytes() == src.read_bytes()
