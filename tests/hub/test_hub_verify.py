"""Magic-byte / structure checks and the expected-vs-got report."""

from __future__ import annotations

import hashlib
import json
import struct

from hub_fake_server import tiny_gguf

from runtime.hub.verify import check_structure, verify_file


def write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def safetensors_bytes(n_floats: int = 6, extra: int = 0, offsets_end: int | None = None) -> bytes:
    buf = struct.pack(f"<{n_floats}f", *range(n_floats))
    end = offsets_end if offsets_end is not None else len(buf)
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, end]},
                         "__metadata__": {"format": "pt"}}).encode()
    return struct.pack("<Q", len(header)) + header + buf + b"\0" * extra


def test_gguf_checks(tmp_path):
    assert check_structure(write(tmp_path, "a.gguf", tiny_gguf(100))) == []
    bad_version = bytearray(tiny_gguf(100))
    bad_version[4:8] = struct.pack("<I", 7)
    assert check_structure(write(tmp_path, "b.gguf", bytes(bad_version)))[0].startswith("version: expected GGUF version 2 or 3, got 7")
    html = write(tmp_path, "c.gguf", b"<html><head><title>502 Bad Gateway</title></head></html>")
    problems = check_structure(html)
    assert problems[0].startswith("magic: expected GGUF header") and "HTML" in problems[0]
    assert "only" not in check_structure(write(tmp_path, "d.gguf", b"GGUF\x03\x00"))[0]
    lfs = write(tmp_path, "e.gguf", b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\n")
    assert "Git LFS pointer" in check_structure(lfs)[0]
    big_endian = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    assert check_structure(write(tmp_path, "f.gguf", big_endian)) == []


def test_ternary_checks(tmp_path):
    assert check_structure(write(tmp_path, "m.ternary", b"BONSAI2\0" + struct.pack("<I", 1) + b"x" * 10)) == []
    assert "magic" in check_structure(write(tmp_path, "n.ternary", b"GGUF" + b"\0" * 20))[0]
    assert "version" in check_structure(write(tmp_path, "o.ternary", b"BONSAI2\0" + struct.pack("<I", 0)))[0]


def test_safetensors_checks(tmp_path):
    assert check_structure(write(tmp_path, "ok.safetensors", safetensors_bytes())) == []
    assert "size:" in check_structure(write(tmp_path, "extra.safetensors", safetensors_bytes(extra=4)))[0]
    assert "outside" in check_structure(write(tmp_path, "off.safetensors", safetensors_bytes(offsets_end=999)))[0]
    truncated = safetensors_bytes()[:-8]
    assert check_structure(write(tmp_path, "trunc.safetensors", truncated))
    assert "magic" in check_structure(write(tmp_path, "html.safetensors", b"<!doctype html><p>nope</p>" * 3))[0]
    notjson = struct.pack("<Q", 4) + b"abcd"
    assert "not JSON" in check_structure(write(tmp_path, "nj.safetensors", notjson))[0]


def test_verify_file_reports_every_difference(tmp_path):
    data = tiny_gguf(1000)
    p = write(tmp_path, "m.gguf", data)
    good = verify_file(p, expected_size=len(data), expected_sha256=hashlib.sha256(data).hexdigest())
    assert good.ok and good.sha256 == hashlib.sha256(data).hexdigest()
    bad = verify_file(p, expected_size=len(data) + 1, expected_sha256="0" * 64)
    assert not bad.ok
    assert f"size: expected {len(data) + 1} bytes, got {len(data)}" in bad.problems
    assert f"sha256: expected {'0' * 64}, got {good.sha256}" in bad.problems
    # unknown extension: hash only, no structure check
    assert verify_file(write(tmp_path, "notes.txt", b"hello")).ok
