"""Download a real (tiny) ternary GGUF and convert it to .ternary with provenance."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from runtime.cli import main
from runtime.hub.paths import HubPaths
from runtime.hub.store import ModelStore

REPO = "prism-ml/Tiny-Real-gguf"


def test_download_converts_gguf_to_ternary_with_provenance(hub, tmp_path, capsys):
    from runtime.formats.gguf_writer import write_gguf
    from runtime.formats.model_data import ModelData
    from runtime.model.config import ModelConfig
    from runtime.synthetic import synthetic_tensors, synthetic_tokenizer

    cfg = ModelConfig(arch="qwen3", vocab_size=261, hidden_size=128, intermediate_size=256, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=64, tie_word_embeddings=True, max_position_embeddings=512)
    md = ModelData(config=cfg, tensors=dict(synthetic_tensors(cfg, seed=1)), tokenizer=synthetic_tokenizer())
    write_gguf(md, tmp_path / "tiny.gguf", "PQ2_0")
    gguf = (tmp_path / "tiny.gguf").read_bytes()
    hub.add(REPO, "tiny-PQ2_0.gguf", gguf)
    home = tmp_path / "home"
    rc = main(["download", f"{REPO}:tiny-PQ2_0.gguf", "--source", "modelscope", "--endpoint", hub.url,
               "--home", str(home)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "converted:" in out.out, out.err
    store = ModelStore(HubPaths.resolve(home))
    items = {i.filename: i for i in store.installed()}
    assert set(items) == {"tiny-PQ2_0.gguf", "tiny-PQ2_0.ternary"}
    sha = hashlib.sha256(gguf).hexdigest()
    ternary = items["tiny-PQ2_0.ternary"]
    assert ternary.record["converted_from"]["sha256"] == sha
    assert ternary.record["converted_from"]["source"] == "modelscope"
    assert Path(ternary.path).read_bytes()[:8] == b"BONSAI2\0"
    # the file's own provenance header records the original sha256 too
    from runtime.formats.ternary_file import read_ternary

    prov = read_ternary(ternary.path).provenance
    assert prov.source_sha256 == sha and prov.source_name == "tiny-PQ2_0.gguf"
    assert json.loads((home / "data" / "models").joinpath(
        "prism-ml--Tiny-Real-gguf", "tiny-PQ2_0.ternary.verified.json").read_text())["sha256"] == ternary.sha256
