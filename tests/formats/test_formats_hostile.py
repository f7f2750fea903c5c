"""Hostile model inputs (issue 26, items 13, 14, 15, 21): the corpus run and focused checks.

The corpus (:mod:`tests.formats.hostile_corpus`, several hundred broken ``.ternary``, GGUF and
Hugging Face inputs built from the tiny models) goes through ``ternary inspect``, ``verify``,
``convert`` and ``generate`` in a subprocess whose address space is capped at +1 GiB and whose
operations are cut after 30 s (:mod:`tests.formats.hostile_runner`). Every operation must work
or refuse with the runtime's own error; the cases that must be refused must say which field.
The focused tests below each pin one defect of the issue with the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.errors import ModelFormatError, TernaryError
from tests.formats.hostile_corpus import (
    build_corpus,
    copy_folder,
    edit_json_file,
    f16_relabelled_bf16,
    flip_tensor_byte,
    rewrite_ternary,
)

REPO = Path(__file__).resolve().parents[2]
CLEAN = {"ok", "refused"}


@pytest.fixture(scope="module")
def hybrid_data():
    from runtime.model.qwen35.synthetic import qwen35_synthetic_model
    from tests.model_factory import tiny_hybrid_synthetic_config

    return qwen35_synthetic_model("bonsai-27b", config=tiny_hybrid_synthetic_config(linear_heads=(2, 2)), group_size=64)


@pytest.fixture(scope="module")
def base_ternary(tmp_path_factory, model_data):
    from runtime.formats.ternary_file import write_model

    return write_model(model_data, tmp_path_factory.mktemp("hostile-base") / "tiny.ternary")


@pytest.fixture(scope="module")
def corpus_results(tmp_path_factory, model_data, hf_folder, hybrid_data):
    root = tmp_path_factory.mktemp("hostile")
    cases = build_corpus(root / "corpus", model_data, hf_folder, hybrid_data)
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps([c.to_dict() for c in cases]))
    results = root / "results.json"
    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "tests.formats.hostile_runner", str(manifest), str(results)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(results.read_text())
    _report(doc)
    return doc


def _report(doc: dict) -> None:
    """Counts per class and outcome (printed; also written where HOSTILE_REPORT points)."""
    per_class: dict[str, Counter] = {}
    cases_per_class: Counter = Counter()
    for c in doc["cases"]:
        cases_per_class[c["cls"]] += 1
        for op, r in c["ops"].items():
            per_class.setdefault(c["cls"], Counter())[f"{op}:{r['outcome']}"] += 1
    lines = [f"{cls}: {cases_per_class[cls]} cases; " + ", ".join(f"{k}={v}" for k, v in sorted(cnt.items()))
             for cls, cnt in per_class.items()]
    text = "\n".join(lines) + f"\ncap probe: {doc['cap_probe']}\n"
    print(text)
    if os.environ.get("HOSTILE_REPORT"):
        Path(os.environ["HOSTILE_REPORT"]).write_text(json.dumps(
            {"cases_per_class": cases_per_class, "outcomes": {k: dict(v) for k, v in per_class.items()},
             "cap_probe": doc["cap_probe"]}, indent=1))


# ------------------------------------------------------------------------------------------------
# the corpus run

@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_corpus_has_no_traceback_hang_or_giant_allocation(corpus_results):
    assert corpus_results["cap_probe"]["two_gib"] == "refused"  # the memory cap really bites
    assert len(corpus_results["cases"]) >= 300
    bad = [(c["cls"], c["name"], op, r["outcome"], r.get("message", "")[:200])
           for c in corpus_results["cases"] for op, r in c["ops"].items() if r["outcome"] not in CLEAN]
    assert not bad, "\n".join(map(str, bad[:40]))


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_corpus_refusals_name_the_problem(corpus_results):
    wrong = []
    for c in corpus_results["cases"]:
        for op in c["refuse"]:
            r = c["ops"][op]
            text = r.get("message", "") + "\n" + r.get("output", "")
            if r["outcome"] != "refused" or (c["msg"] and not re.search(c["msg"], text, re.IGNORECASE)):
                wrong.append((c["name"], op, r["outcome"], text.strip()[-300:]))
        for op in c["mention"]:
            r = c["ops"][op]
            if not re.search(c["msg"], r.get("message", "") + "\n" + r.get("output", ""), re.IGNORECASE):
                wrong.append((c["name"], op, "does not say it", r.get("output", "").strip()[-300:]))
    assert not wrong, "\n".join(map(str, wrong[:40]))


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_corpus_controls_work_everywhere(corpus_results):
    controls = [c for c in corpus_results["cases"] if c["cls"] == "control"]
    assert len(controls) == 5
    for c in controls:
        for op, r in c["ops"].items():
            assert r["outcome"] == "ok", (c["name"], op, r)


# ------------------------------------------------------------------------------------------------
# item 13: sizes from headers are bounded and checked against the tensor table first

@pytest.mark.timeout(180)
@pytest.mark.parametrize("layers", [10**7, 0, 3])
def test_ternary_layer_count_is_checked_before_anything_is_built(tmp_path, base_ternary, capsys, layers):
    bad = rewrite_ternary(base_ternary, tmp_path / "m.ternary", lambda h: h["config"].__setitem__("num_layers", layers))
    tracemalloc.start()
    try:
        assert main(["inspect", str(bad)]) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    assert "config.num_layers" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_gguf_block_count_2_to_32_is_refused(tmp_path, model_data, capsys):
    from runtime.formats.gguf_writer import write_gguf

    p = write_gguf(model_data, tmp_path / "m.gguf", "Q2_0_LEGACY", extra_metadata={"qwen3.block_count": ("u32", 2**32 - 1)})
    assert main(["inspect", str(p)]) == 1
    assert "qwen3.block_count" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_hf_layer_count_must_match_the_tensors(tmp_path, hf_folder, capsys):
    for n, expect in ((10**7, "num_hidden_layers must be a whole number from 1 to 1024"),
                      (3, "num_hidden_layers says 3 layers but the tensor table has layers 0..1")):
        dst = copy_folder(hf_folder, tmp_path / f"hf{n}")
        edit_json_file(dst / "config.json", lambda d, n=n: d.__setitem__("num_hidden_layers", n))
        assert main(["inspect", str(dst)]) == 1
        assert expect in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# item 14: FIFOs, devices, link loops

@pytest.mark.timeout(120)
@pytest.mark.parametrize("cmd", ["inspect", "verify", "convert"])
def test_fifo_model_is_refused_without_hanging(tmp_path, capsys, cmd):
    fifo = tmp_path / "model.ternary"
    os.mkfifo(fifo)
    argv = [cmd, str(fifo)] + (["-o", str(tmp_path / "o.ternary")] if cmd == "convert" else [])
    assert main(argv) == 1
    assert "named pipe (FIFO)" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_fifo_shard_in_a_folder_is_refused(tmp_path, hf_folder, capsys):
    dst = copy_folder(hf_folder, tmp_path / "hf")
    (dst / "model.safetensors").unlink()
    os.mkfifo(dst / "model.safetensors")
    assert main(["inspect", str(dst)]) == 1
    assert "model.safetensors: the safetensors file is a named pipe" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_verify_names_folders_fifos_and_link_loops(tmp_path, hf_folder, capsys):
    loop_a, loop_b = tmp_path / "a.ternary", tmp_path / "b.ternary"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    assert main(["verify", str(loop_a)]) == 1
    assert "loop of symbolic links" in capsys.readouterr().err
    empty = tmp_path / "folder"
    empty.mkdir()
    assert main(["verify", str(empty)]) == 1
    assert "a folder without config.json" in capsys.readouterr().err
    assert main(["verify", str(hf_folder)]) == 0  # a Hugging Face folder is verified file by file
    assert "result:  OK" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# item 15: types and values, one schema check naming file and field

@pytest.mark.timeout(180)
@pytest.mark.parametrize("key,value,expect", [
    ("temperature", float("nan"), "generation_config.json: temperature must be a finite number"),
    ("eos_token_id", 10**6, "generation_config.json: eos_token_id = 1000000 is outside the vocabulary"),
])
def test_generation_config_values_are_checked(tmp_path, hf_folder, capsys, key, value, expect):
    dst = copy_folder(hf_folder, tmp_path / "hf")
    edit_json_file(dst / "generation_config.json", lambda d: d.__setitem__(key, value))
    assert main(["convert", str(dst), "-o", str(tmp_path / "o.ternary"), "--quiet"]) == 1
    assert expect in capsys.readouterr().err
    assert not (tmp_path / "o.ternary").exists()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("field,value,expect", [
    ("rope_theta", -1.0, "config.rope_theta must be above 1"),
    ("rms_norm_eps", 0.0, "config.rms_norm_eps must be above 0"),
    ("num_heads", "4", "config.num_heads must be a whole number, got text"),
    ("max_position_embeddings", 0, "config.max_position_embeddings must be a whole number from 1"),
])
def test_ternary_header_values_that_used_to_crash_generate(tmp_path, base_ternary, capsys, field, value, expect):
    bad = rewrite_ternary(base_ternary, tmp_path / "m.ternary", lambda h: h["config"].__setitem__(field, value))
    assert main(["generate", str(bad), "--device", "cpu", "--ctx", "64", "--max-new-tokens", "1",
                 "--prompt", "hi"]) == 1
    assert expect in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_deep_json_and_overflowing_numbers_are_clean_errors(tmp_path, hf_folder):
    from runtime.formats.hf import HFSource

    dst = copy_folder(hf_folder, tmp_path / "deep")
    (dst / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFormatError, match="config.json: JSON nested too deeply"):
        HFSource(dst)
    dst = copy_folder(hf_folder, tmp_path / "big")
    edit_json_file(dst / "config.json", lambda d: json.dumps(d).replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e400'))
    with pytest.raises(ModelFormatError, match="rms_norm_eps must be a finite number"):
        HFSource(dst)


# ------------------------------------------------------------------------------------------------
# item 21: integrity

@pytest.mark.timeout(180)
def test_convert_refuses_a_corrupt_ternary_and_verify_reports_it(tmp_path, base_ternary, capsys):
    bad = flip_tensor_byte(base_ternary, tmp_path / "bad.ternary", "model.layers.1.mlp.up_proj.weight")
    out = tmp_path / "laundered.ternary"
    assert main(["convert", str(bad), "-o", str(out), "--quiet"]) == 1
    assert "checksum mismatch in tensor model.layers.1.mlp.up_proj.weight" in capsys.readouterr().err
    assert not out.exists()
    assert main(["verify", str(bad)]) == 1
    assert "PROBLEM: checksum: 1 of" in capsys.readouterr().out
    assert main(["verify", str(base_ternary)]) == 0


@pytest.mark.timeout(180)
def test_f16_data_labelled_bf16_is_refused(tmp_path, hf_folder):
    from runtime.formats.loader import load_model

    dst = copy_folder(hf_folder, tmp_path / "hf")
    f16_relabelled_bf16(hf_folder / "model.safetensors", dst / "model.safetensors")
    with pytest.raises(ModelFormatError, match="labelled BF16 .* read as F16 they are ordinary weights"):
        load_model(dst)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("text", ['{"model": {"type": "Nope"}}', "{oops"])
def test_convert_refuses_an_invalid_tokenizer(tmp_path, hf_folder, capsys, text):
    dst = copy_folder(hf_folder, tmp_path / "hf")
    (dst / "tokenizer.json").write_text(text)
    assert main(["convert", str(dst), "-o", str(tmp_path / "o.ternary"), "--quiet"]) == 1
    assert "tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "o.ternary").exists()


def test_errors_are_the_runtimes_own(tmp_path, base_ternary):
    """The schema's errors are TernaryErrors whatever the input (what the CLI prints as one line)."""
    from runtime.formats.ternary_file import TernaryFile

    for value in ([1], {"x": 1}, None, "x", 1e308, -5):
        bad = rewrite_ternary(base_ternary, tmp_path / "m.ternary", lambda h, v=value: h.__setitem__("config", v))
        with pytest.raises(TernaryError):
            TernaryFile(bad)
