"""The native .ternary file: exact round trip, zero-copy mmap views, 4096 alignment, and refusal of
everything broken (wrong magic of each kind, version, truncation, absurd header length, bad
offsets/shapes, checksum flips, unknown encodings, missing tensors), fuzzed with hypothesis."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.errors import ModelFormatError, TernaryError
from runtime.formats import codecs
from runtime.formats.model_data import T3, ModelData, TernaryTensor
from runtime.formats.ternary_file import ALIGNMENT, PREAMBLE, TernaryFile, read_ternary, write_model


@pytest.fixture(scope="module")
def tfile(tmp_path_factory, model_data):
    return write_model(model_data, tmp_path_factory.mktemp("t") / "tiny.ternary")


def test_round_trip_is_exact(tfile, model_data):
    back = read_ternary(tfile, verify=True)
    assert back.config == model_data.config
    assert back.tokenizer == model_data.tokenizer
    assert back.generation_defaults == model_data.generation_defaults
    assert back.provenance.converter_version.startswith("ternary-chat")
    assert list(back.tensors) == list(model_data.tensors)
    for n, t in model_data.tensors.items():
        b = back.tensors[n]
        if isinstance(t, TernaryTensor):
            assert (b.encoding, b.group_size, b.shape) == (t.encoding, t.group_size, t.shape)
            assert torch.equal(b.codes, t.codes) and torch.equal(b.scales.view(torch.int16), t.scales.view(torch.int16))
        else:
            assert b.data.dtype == t.data.dtype and torch.equal(b.data, t.data)


def test_tensors_are_aligned_zero_copy_views(tfile):
    f = TernaryFile(tfile)
    raw = tfile.read_bytes()
    for name, e in f.entries.items():
        assert e["offset"] % ALIGNMENT == 0
        t = f.tensor(name)
        if isinstance(t, TernaryTensor):
            assert t.codes.numpy().tobytes() == raw[e["offset"]:e["offset"] + t.codes.numel()]
            assert (e["offset"] + e["scales_offset"]) % 64 == 0
    # the view shares memory with the mapping: two views of one tensor have the same address
    a = f.tensor("model.embed_tokens.weight").codes
    b = f.tensor("model.embed_tokens.weight").codes
    assert a.data_ptr() == b.data_ptr()
    # copy-on-write: writing to a view never touches the file
    a[0, 0] ^= 0xFF
    assert tfile.read_bytes() == raw


def test_views_outlive_the_file_object(tfile, model_data):
    import gc

    t = TernaryFile(tfile).tensor("model.layers.1.mlp.down_proj.weight")
    gc.collect()
    assert torch.equal(t.codes, model_data.tensors["model.layers.1.mlp.down_proj.weight"].codes)


def test_t3_tensors_round_trip(tmp_path, model_data):
    tensors = {}
    for n, t in model_data.tensors.items():
        if isinstance(t, TernaryTensor):
            tensors[n] = TernaryTensor(t.shape, t.group_size, codecs.pack_t3(codecs.codes_of(t), t.group_size),
                                       t.scales, T3)
        else:
            tensors[n] = t
    md = ModelData(model_data.config, tensors, model_data.tokenizer)
    back = read_ternary(write_model(md, tmp_path / "t3.ternary"), verify=True)
    for n, t in tensors.items():
        if isinstance(t, TernaryTensor):
            assert back.tensors[n].encoding == T3 and torch.equal(back.tensors[n].codes, t.codes)
            assert torch.equal(back.tensors[n].dequantize(), model_data.tensors[n].dequantize())


# ------------------------------------------------------------------------------------------------
# refusals

def _write(tmp_path, data: bytes, name="bad.ternary"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("content,what", [
    (b"", "empty file"),
    (b"GGUF\x03\x00\x00\x00" + b"\0" * 40, "GGUF model file"),
    (struct.pack("<Q", 20) + b'{"__metadata__":{}} ' + b"\0" * 8, "safetensors file"),
    (b"\n<!DOCTYPE html><html><body>404 Not Found</body></html>", "HTML page"),
    (b"PK\x03\x04" + b"\0" * 40, "zip archive"),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "Git LFS pointer"),
    (b"just some notes about the model\nline two\n", "text file"),
    (b'{"model_type": "qwen3"}', "JSON document"),
    (b"\x00\x01\x02\x03\xff\xfe\xfd\xfc" * 8, "unknown binary file"),
])
def test_wrong_magic_says_what_the_file_is(tmp_path, content, what):
    with pytest.raises(ModelFormatError, match=f"not a .ternary file: this is .*{what}"):
        TernaryFile(_write(tmp_path, content))


def _with_header(raw: bytes, mutate) -> bytes:
    """Rewrite the JSON header (keeping the data where it is: the header fits the padding)."""
    _m, version, hlen = PREAMBLE.unpack(raw[:PREAMBLE.size])
    header = json.loads(raw[PREAMBLE.size:PREAMBLE.size + hlen])
    first = min(e["offset"] for e in header["tensors"])  # data start, before the mutation
    mutate(header)
    new = json.dumps(header).encode()
    assert PREAMBLE.size + len(new) <= first
    return PREAMBLE.pack(b"BONSAI2\0", version, len(new)) + new + b"\0" * (first - PREAMBLE.size - len(new)) + raw[first:]


def test_version_mismatch(tmp_path, tfile):
    raw = bytearray(tfile.read_bytes())
    raw[8:12] = struct.pack("<I", 3)
    with pytest.raises(ModelFormatError, match="version mismatch: expected 2, got 3"):
        TernaryFile(_write(tmp_path, bytes(raw)))


def test_absurd_header_length(tmp_path, tfile):
    raw = bytearray(tfile.read_bytes())
    raw[12:20] = struct.pack("<Q", 1 << 60)
    with pytest.raises(ModelFormatError, match="header length .* is absurd"):
        TernaryFile(_write(tmp_path, bytes(raw)))
    raw[12:20] = struct.pack("<Q", len(raw))
    with pytest.raises(ModelFormatError, match="truncated file: the header needs"):
        TernaryFile(_write(tmp_path, bytes(raw)))


def test_truncated_at_many_offsets(tmp_path, tfile):
    raw = tfile.read_bytes()
    cuts = sorted({0, 1, 7, 8, 11, 12, 19, 20, 21, 100, 4095, 4096, 4097, len(raw) // 2, len(raw) - 1}
                  | set(range(0, len(raw), max(1, len(raw) // 40))))
    for cut in cuts:
        with pytest.raises(ModelFormatError, match="truncated|not a .ternary file|empty") as ei:
            TernaryFile(_write(tmp_path, raw[:cut], f"cut{cut}.ternary"))
        if cut >= PREAMBLE.size:
            assert "truncated" in str(ei.value), (cut, str(ei.value))


def test_trailing_garbage_is_refused(tmp_path, tfile):
    with pytest.raises(ModelFormatError, match="trailing data"):
        TernaryFile(_write(tmp_path, tfile.read_bytes() + b"junk"))


@pytest.mark.parametrize("mutate,msg", [
    (lambda h: h["tensors"][0].update(encoding="q9"), "unknown tensor encoding 'q9'"),
    (lambda h: h["tensors"][0].update(offset=h["tensors"][0]["offset"] + 1), "not 4096-aligned"),
    (lambda h: h["tensors"][0].update(offset=1 << 70), "out of range|past the end"),
    (lambda h: h["tensors"][0].update(offset=0), "out of range"),
    (lambda h: h["tensors"][0].update(shape=[1 << 45, 1 << 45]), "bad shape|overflows"),
    (lambda h: h["tensors"][0].update(shape=[-1, 256]), "bad shape"),
    (lambda h: h["tensors"][0].update(shape=[300.5, 256]), "bad shape"),
    (lambda h: h["tensors"][0].update(nbytes=12), "does not match"),
    (lambda h: h["tensors"][0].update(group_size=7), "group size"),
    (lambda h: h["tensors"][0].update(checksum="md5:abc"), "malformed checksum"),
    (lambda h: h["tensors"][1].update(offset=h["tensors"][0]["offset"]), "overlap"),
    (lambda h: h["tensors"].pop(3), "missing tensors: model.layers.0"),
    (lambda h: h["tensors"].append(dict(h["tensors"][0])), "listed twice"),
    (lambda h: h["config"].update(hidden_size=512), "shape"),
    (lambda h: h["config"].update(arch="rwkv"), "unsupported architecture"),
    (lambda h: h.pop("config"), "config missing"),
    (lambda h: h.update(file_size=h["file_size"] + 4096), "truncated file: expected"),
])
def test_corrupt_headers_are_refused(tmp_path, tfile, mutate, msg):
    with pytest.raises(TernaryError, match=msg):
        TernaryFile(_write(tmp_path, _with_header(tfile.read_bytes(), mutate)))


def test_flipped_data_byte_fails_checksum_naming_the_tensor(tmp_path, tfile):
    f = TernaryFile(tfile)
    e = f.entries["model.layers.1.self_attn.v_proj.weight"]
    raw = bytearray(tfile.read_bytes())
    raw[e["offset"] + e["scales_offset"] + 3] ^= 0x10
    p = _write(tmp_path, bytes(raw))
    TernaryFile(p)  # header is fine: opens without verify
    with pytest.raises(ModelFormatError, match="checksum mismatch in tensor model.layers.1.self_attn.v_proj.weight"):
        TernaryFile(p, verify=True)


def test_invalid_json_header(tmp_path, tfile):
    raw = bytearray(tfile.read_bytes())
    raw[PREAMBLE.size] = ord("[") ^ 0x7F
    with pytest.raises(ModelFormatError, match="corrupt header"):
        TernaryFile(_write(tmp_path, bytes(raw)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_files_are_refused_cleanly(tmp_path, tfile, data):
    """Random byte edits in the preamble/header, and random header values, never crash or hang."""
    raw = bytearray(tfile.read_bytes())
    if data.draw(st.booleans()):
        hlen = PREAMBLE.unpack(raw[:PREAMBLE.size])[2]
        for _ in range(data.draw(st.integers(1, 6))):
            pos = data.draw(st.integers(0, PREAMBLE.size + hlen - 1))
            raw[pos] = data.draw(st.integers(0, 255))
    else:
        key = data.draw(st.sampled_from(["offset", "nbytes", "shape", "group_size", "scales_offset", "encoding"]))
        val = data.draw(st.one_of(st.integers(-(1 << 70), 1 << 70), st.text(max_size=5), st.none(),
                                  st.lists(st.integers(-(1 << 40), 1 << 40), max_size=5)))
        idx = data.draw(st.integers(0, 24))

        def mutate(h):
            h["tensors"][idx][key] = val

        raw = bytearray(_with_header(bytes(raw), mutate))
    p = tmp_path / "fuzz.ternary"
    p.write_bytes(bytes(raw))
    try:
        TernaryFile(p, verify=True).to_model_data()
    except TernaryError:
        pass
