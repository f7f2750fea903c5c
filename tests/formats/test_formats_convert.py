"""``ternary convert`` / ``ternary inspect`` and the conversion API: lossless from every source,
provenance hash, progress and cancellation, no output after an interrupted conversion (even a
SIGKILL), and peak memory near one tensor (measured in a subprocess)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from runtime.cli import main
from runtime.errors import CancelledError, ModelFormatError
from runtime.formats.convert import convert
from runtime.formats.loader import detect_format, load_model
from runtime.formats.model_data import ModelData, TernaryTensor
from runtime.formats.ternary_file import TernaryFile, read_ternary
from runtime.model.config import ModelConfig
from tests.model_factory import write_gguf

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ptq_gguf(tmp_path_factory, model_data):
    return write_gguf(model_data, tmp_path_factory.mktemp("c") / "tiny-PTQ1_0.gguf", "PTQ1_0")


def test_cli_convert_gguf_is_lossless_with_progress_and_provenance(tmp_path, ptq_gguf, capsys):
    out = tmp_path / "m.ternary"
    assert main(["convert", str(ptq_gguf), "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert "converting [" in cap.err and "100.0%" in cap.err and "wrote" in cap.out
    src, dst = load_model(ptq_gguf), read_ternary(out, verify=True)
    for n, t in src.tensors.items():
        d = dst.tensors[n]
        if isinstance(t, TernaryTensor):
            assert d.encoding == "t3" and torch.equal(d.codes, t.codes) and torch.equal(d.scales, t.scales)
        else:
            assert torch.equal(d.data, t.data)
    assert dst.provenance.source_sha256 == hashlib.sha256(ptq_gguf.read_bytes()).hexdigest()
    assert dst.provenance.source_format == "gguf:PTQ1_0" and dst.provenance.source_name == ptq_gguf.name
    assert detect_format(out) == "ternary"


def test_cli_convert_hf_folder_and_reconvert(tmp_path, hf_folder, model_data, capsys):
    out = tmp_path / "hf.ternary"
    assert main(["convert", str(hf_folder), "-o", str(out), "--quiet"]) == 0
    md = read_ternary(out, verify=True)
    for n, t in model_data.tensors.items():
        if isinstance(t, TernaryTensor):
            assert torch.equal(md.tensors[n].codes, t.codes) and torch.equal(md.tensors[n].scales, t.scales)
    assert md.provenance.source_format == "hf-safetensors" and len(md.provenance.source_sha256) == 64
    # .ternary -> .ternary keeps the original provenance
    out2 = tmp_path / "again.ternary"
    assert main(["convert", str(out), "-o", str(out2), "--quiet"]) == 0
    assert read_ternary(out2).provenance.source_sha256 == md.provenance.source_sha256
    assert TernaryFile(out2).header["tensors"] == TernaryFile(out).header["tensors"]


def test_cli_inspect_json_and_stats(tmp_path, ptq_gguf, capsys):
    assert main(["inspect", str(ptq_gguf), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "gguf" and info["version"] == 3 and info["gguf_types"] == "PTQ1_0"
    assert info["config"]["hidden_size"] == 256 and len(info["tensors"]) == 25
    row = next(r for r in info["tensors"] if r["name"] == "model.layers.0.mlp.up_proj.weight")
    assert row["gguf_type"] == "PTQ1_0" and row["encoding"] == "t3" and row["group_size"] == 128
    assert main(["inspect", str(ptq_gguf), "--stats"]) == 0
    text = capsys.readouterr().out
    assert "-- layer 1" in text and " -1 0.3" in text and " +1 0.3" in text and "scale " in text


def test_cli_errors_are_one_line(tmp_path, capsys):
    page = tmp_path / "model.gguf"
    page.write_text("<!DOCTYPE html><html><body>Rate limited</body></html>")
    assert main(["inspect", str(page)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTML page" in err
    assert main(["convert", str(page), "-o", str(tmp_path / "x.ternary")]) == 1
    assert not (tmp_path / "x.ternary").exists()


def test_non_ternary_source_needs_quantize(tmp_path, model_data, capsys):
    q4 = write_gguf(model_data, tmp_path / "q4.gguf", "Q4_0")
    out = tmp_path / "q4.ternary"
    assert main(["convert", str(q4), "-o", str(out)]) == 1
    assert "not ternary" in capsys.readouterr().err and not out.exists()
    assert main(["convert", str(q4), "-o", str(out), "--quantize", "--quiet"]) == 0
    assert "max relative quantization error" in capsys.readouterr().out
    assert out.exists()


def test_cancel_leaves_no_file(tmp_path, ptq_gguf):
    out = tmp_path / "cancelled.ternary"
    calls = []

    def progress(stage, done, total, name):
        calls.append((stage, done, total))

    with pytest.raises(CancelledError):
        convert(ptq_gguf, out, progress=progress, cancel=lambda: sum(1 for c in calls if c[0] == "convert") >= 3)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    done = [c[1] for c in calls if c[0] == "convert"]
    assert done == sorted(done) and len(done) == 3


def test_error_mid_conversion_leaves_no_file(tmp_path, ptq_gguf):
    out = tmp_path / "failed.ternary"

    def progress(stage, done, total, name):
        if stage == "convert" and "layers.1" in name:
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="disk full"):
        convert(ptq_gguf, out, progress=progress)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_killed_conversion_leaves_nothing_that_looks_valid(tmp_path, ptq_gguf):
    """SIGKILL half-way: no OUT file; the leftover temporary has no header (written last)."""
    out = tmp_path / "killed.ternary"
    script = textwrap.dedent(f"""
        import os, signal
        from runtime.formats.convert import convert
        def progress(stage, done, total, name):
            if stage == "convert" and done > total // 2:
                os.kill(os.getpid(), signal.SIGKILL)
        convert({str(ptq_gguf)!r}, {str(out)!r}, progress=progress)
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr.decode()
    assert not out.exists()
    leftovers = list(tmp_path.iterdir())
    assert leftovers and all(p.name.endswith(".tmp") for p in leftovers)
    for p in leftovers:
        with pytest.raises(ModelFormatError, match="not a .ternary file"):
            TernaryFile(p)


def synthetic_model(vocab: int, hidden: int, ffn: int, layers: int, seed: int = 0) -> ModelData:
    """Random ternary t2 codes + fp16 scales with the given Qwen3 shapes (no transformers needed)."""
    from runtime.formats import codecs
    from runtime.formats.arch import get_arch

    cfg = ModelConfig(arch="qwen3", vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_layers=layers,
                      num_heads=hidden // 128, num_kv_heads=max(1, hidden // 256), head_dim=128)
    g = torch.Generator().manual_seed(seed)
    # the 81 t2 bytes whose four codes are all in 0..2 (fast random ternary without unpacking)
    lut = codecs.pack_t2(torch.cartesian_prod(*[torch.arange(3, dtype=torch.uint8)] * 4)).reshape(81)
    tensors = {}
    for name, shape in get_arch("qwen3").expected_shapes(cfg).items():
        if len(shape) == 2:
            rows, cols = shape
            codes = lut[torch.randint(0, 81, (rows, cols // 4), generator=g)]
            scales = (torch.rand(rows, cols // 128, generator=g) + 0.5).to(torch.float16)
            tensors[name] = TernaryTensor((rows, cols), 128, codes, scales)
        else:
            from runtime.formats.model_data import DenseTensor
            tensors[name] = DenseTensor(torch.ones(shape))
    return ModelData(cfg, tensors, name="synthetic")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="measures RssAnon from /proc (Linux)")
def test_conversion_peak_memory_is_about_one_tensor(tmp_path):
    """A 209M-weight (56 MB PQ2_0) model converts with anonymous memory growing by about its
    largest tensor (17.8 MB), not by the model size: sampled from /proc every 2 ms."""
    md = synthetic_model(vocab=32768, hidden=2048, ffn=4096, layers=2)
    src = write_gguf(md, tmp_path / "big.gguf", "PQ2_0")
    tiny = write_gguf(synthetic_model(512, 256, 512, 1), tmp_path / "tiny.gguf", "PQ2_0")
    largest = max(t.nbytes for t in md.tensors.values())
    del md
    script = textwrap.dedent(f"""
        import json, threading, time
        from runtime.formats.convert import convert
        def anon():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1]) * 1024
        convert({str(tiny)!r}, {str(tmp_path / "tiny.ternary")!r})  # warm up imports and tables
        base, peak, stop = anon(), [0], [False]
        def poll():
            while not stop[0]:
                peak[0] = max(peak[0], anon())
                time.sleep(0.002)
        th = threading.Thread(target=poll, daemon=True)
        th.start()
        t0 = time.perf_counter()
        convert({str(src)!r}, {str(tmp_path / "big.ternary")!r})
        dt = time.perf_counter() - t0
        stop[0] = True
        th.join()
        print(json.dumps({{"base": base, "peak": peak[0], "seconds": dt}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=300, text=True)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    growth = m["peak"] - m["base"]
    size = os.path.getsize(src)
    print(f"source {size / 2**20:.1f} MiB, largest tensor {largest / 2**20:.1f} MiB, "
          f"peak anonymous growth {growth / 2**20:.1f} MiB, {m['seconds']:.2f} s")
    assert growth < 0.6 * size, f"peak grew by {growth / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB model"
    assert growth < largest + 16 * 2**20


def test_regroup_makes_g64_and_g128_sources_identical(tmp_path, capsys):
    """Q2_0 g64 of a g128 model, re-grouped to 128, is byte-identical to the PQ2_0 conversion."""
    md = synthetic_model(vocab=300, hidden=256, ffn=512, layers=1)  # independent scale per 128-group
    g64 = write_gguf(md, tmp_path / "g64.gguf", "Q2_0")
    pq = write_gguf(md, tmp_path / "pq.gguf", "PQ2_0")
    a, b = tmp_path / "a.ternary", tmp_path / "b.ternary"
    assert main(["convert", str(g64), "-o", str(a), "--regroup", "128", "--quiet"]) == 0
    convert(pq, b)
    ea, eb = TernaryFile(a).entries, TernaryFile(b).entries
    assert {n: e["checksum"] for n, e in ea.items()} == {n: e["checksum"] for n, e in eb.items()}
    # merging groups whose scales differ is refused, naming the tensor, and leaves no file
    c = tmp_path / "c.ternary"
    assert main(["convert", str(pq), "-o", str(c), "--regroup", "256", "--quiet"]) == 1
    assert "cannot store group-128 scales in blocks of 256" in capsys.readouterr().err and not c.exists()
