"""The packaged catalog: contents, pins, planner-consistent memory columns, user additions."""

from __future__ import annotations

import json
import re

import pytest

from runtime.atomic import read_json
from runtime.hub.catalog import (
    Catalog,
    CatalogModel,
    _model_from_dict,
    chat_models,
    embedding_memory,
    memory_requirements,
    resources_dir,
)
from runtime.hub.recommend import MachineMemory, recommend_model

# The only sha256 pins in shared research ternary-models.md §2 for the files we list (GGUF repos).
RESEARCH_PINS = {
    "Ternary-Bonsai-8B-Q2_0.gguf": ("3c8d70470a5d97e5a2b9410ddd899cb740116591462626c60cb2fead6448f60b", 2_182_184_672),
    "Ternary-Bonsai-4B-Q2_0.gguf": ("4e0bf8b737b0431552f8c2c97695ab7c0cb214c94bcdeb4f5f267e67ddf28b8b", 1_074_969_344),
    "Ternary-Bonsai-4B-PQ2_0.gguf": ("829abec7eb92f5bf464762be7c9e8a45d777c714543a1474fc90cee20e698beb", 1_074_969_344),
    "Ternary-Bonsai-27B-Q2_0.gguf": ("868c11714cf8fe47f5ec9eeb2be0ab1a337112886f92ee0ede6b855c4fa31757", 7_165_121_600),
    "Ternary-Bonsai-2-27B-PQ2_0.gguf": ("3907dc1658db1f78a9826bf8d5bcb8dc65db0d466388937af57f2294fae62ec1", 7_206_168_928),
    "Ternary-Bonsai-2-27B-PTQ1_0.gguf": ("53107f530aa52eb00912263ab1ee29bd199261c87cd7b4ad4ca1318c1fe33ee3", 5_946_648_928),
}


def test_catalog_has_the_supported_models_with_repos_on_both_hubs(paths):
    cat = Catalog.load(paths)
    assert [m.id for m in cat.models] == ["bonsai-1.7b", "bonsai-4b", "bonsai-8b", "bonsai-27b", "bonsai-2-27b",
                                          "qwen3-embedding-0.6b"]
    assert [m.id for m in chat_models(cat.models)] == [m.id for m in cat.models[:5]]
    for m in chat_models(cat.models):
        assert m.huggingface.repo.startswith("prism-ml/") and m.modelscope.repo == m.huggingface.repo
        assert m.modelscope.verified is False  # nobody here confirmed the mirror
        assert m.context_length in (32768, 65536, 262144) and m.sampling["top_k"] == 20
        assert sum(f.default for f in m.files) == 1 and m.default_file().quant == "PQ2_0"
        for f in m.files:
            assert f.file.endswith(".gguf") and f.approx_size and f.approx_size > 4e8
    assert cat.get("bonsai-2-27b").file_named("PTQ1_0").file == "Ternary-Bonsai-2-27B-PTQ1_0.gguf"
    assert cat.get("bonsai-27b").file_named("q2_0_g64").file == "Ternary-Bonsai-27B-Q2_g64.gguf"


def test_only_research_pins_no_invented_hashes():
    raw = read_json(resources_dir() / "catalog.json")
    pins = {f["file"]: (f["sha256"], f["size"]) for m in raw["models"] for f in m["files"] if f["sha256"]}
    assert pins == RESEARCH_PINS
    sizes = {f["file"]: f["size"] for m in raw["models"] for f in m["files"] if f["size"] is not None}
    assert sizes == {k: v[1] for k, v in RESEARCH_PINS.items()}
    text = (resources_dir() / "catalog.json").read_text()
    assert set(re.findall(r"[0-9a-f]{64}", text)) == {v[0] for v in RESEARCH_PINS.values()}


def test_memory_columns_come_from_the_planner_and_match_prismml_figures(paths):
    cat = Catalog.load(paths)
    for m in chat_models(cat.models):
        for f in m.files:
            assert (f.packed_bytes, f.min_vram_bytes, f.min_ram_bytes) == memory_requirements(m.shape_config, f.quant)
            assert f.packed_bytes < f.min_ram_bytes < f.min_vram_bytes
    # PrismML README (ternary-models.md §4.4): 27B peak 7.8 GiB at 4K context with llama.cpp Q2_0 (g128)
    q2 = cat.get("bonsai-27b").file_named("Q2_0 (legacy)")
    assert q2.min_vram_bytes / 1024**3 == pytest.approx(7.8, rel=0.10)
    # the PTQ1_0 packing is what makes the 27B smaller
    two = cat.get("bonsai-2-27b")
    assert two.file_named("PTQ1_0").min_vram_bytes < two.default_file().min_vram_bytes
    assert Catalog.load(paths, with_memory=False).models[0].files[0].min_vram_bytes is None


def test_packed_sizes_match_independent_measurements():
    # llama-bench "model size" of the gen-1 g128 files (ternary-models.md §1.1): 436.16 MiB and 1019.50 MiB
    assert memory_requirements("bonsai-1.7b", "PQ2_0")[0] == 457_345_184
    assert memory_requirements("bonsai-4b", "PQ2_0")[0] == 1_069_018_824
    # the 8B file (2,182,184,672 B pinned) = tensors + the same ~5.95 MB tokenizer/metadata as the 4B file
    eight = memory_requirements("bonsai-8b", "Q2_0")[0]
    assert 2_182_184_672 - eight == pytest.approx(1_074_969_344 - 1_069_018_824, abs=100)


def test_user_additions_persist_atomically(paths, tmp_path):
    cat = Catalog.load(paths)
    cat.add_user_model(model_id="my-hf", file="x.gguf", source="hf", repo="me/thing", sha256="A" * 64)
    cat.add_user_model(model_id="my-ms", file="y.gguf", source="modelscope", repo="me/other")
    local = tmp_path / "local.gguf"
    local.write_bytes(b"GGUF")
    cat.add_user_model(model_id="my-local", file="local.gguf", source="local", local_path=str(local))
    raw = json.loads(paths.user_catalog_file.read_text())
    assert [m["id"] for m in raw["models"]] == ["my-hf", "my-ms", "my-local"]
    assert not list(paths.config_dir.glob(".*.tmp"))
    again = Catalog.load(paths)
    hf = again.get("my-hf")
    assert hf.user and hf.huggingface.repo == "me/thing" and hf.files[0].sha256 == "a" * 64
    assert again.get("my-ms").modelscope.revision == "master"
    assert again.get("my-local").local_path == str(local.resolve())
    assert again.find_repo_file("me/thing", "x.gguf")[0].id == "my-hf"
    assert again.remove_user_model("my-ms") and Catalog.load(paths).get("my-ms") is None
    with pytest.raises(ValueError, match="built-in"):
        again.add_user_model(model_id="bonsai-8b", file="z.gguf", source="hf", repo="a/b")
    with pytest.raises(ValueError, match="owner/name"):
        again.add_user_model(model_id="bad", file="z.gguf", source="hf", repo="noslash")
    with pytest.raises(ValueError, match="not found"):
        again.add_user_model(model_id="bad", file="z.gguf", source="local", local_path=str(tmp_path / "none"))
    with pytest.raises(ValueError, match="64 hex"):
        again.add_user_model(model_id="bad", file="z.gguf", source="hf", repo="a/b", sha256="xyz")


def test_broken_user_entry_does_not_hide_the_catalog(paths):
    paths.user_catalog_file.write_text(json.dumps({"schema": 1, "models": [{"id": "broken"}]}))
    assert len(Catalog.load(paths).models) == 6  # the five Bonsai models and the embedding model


def test_resources_dir_override(monkeypatch, tmp_path):
    (tmp_path / "catalog.json").write_text(json.dumps({"schema": 1, "models": []}))
    monkeypatch.setenv("TERNARY_CHAT_RESOURCES", str(tmp_path))
    assert resources_dir() == tmp_path
    assert Catalog.load().models == []


def test_embedding_model_entry_is_marked_and_never_a_chat_model(paths):
    cat = Catalog.load(paths)
    emb = cat.get("qwen3-embedding-0.6b")
    assert emb.role == "embedding" and emb.is_embedding and not cat.get("bonsai-4b").is_embedding
    assert emb.huggingface.repo == "Qwen/Qwen3-Embedding-0.6B-GGUF" and emb.huggingface.verified
    assert emb.modelscope.repo == emb.huggingface.repo and emb.modelscope.verified is False
    f = emb.default_file()
    assert (f.file, f.format, f.quant) == ("Qwen3-Embedding-0.6B-f16.gguf", "gguf", "F16")
    # no pin in our research notes: the hub's own sha256 is checked at download time (as for the 1.7B)
    assert f.sha256 is None and f.size is None
    assert abs(f.approx_size - 2 * emb.parameters) < 16_000_000  # F16: 2 bytes a parameter + tokenizer
    # memory from the embedding runtime's arithmetic (fp32 on the CPU, bf16 on a GPU), not the chat planner
    assert (f.packed_bytes, f.min_vram_bytes, f.min_ram_bytes) == embedding_memory(emb.parameters, f.approx_size)
    assert f.packed_bytes < f.min_vram_bytes < f.min_ram_bytes < 4 * 1024**3
    assert cat.role_of_file("Qwen3-Embedding-0.6B-f16.gguf") == "embedding"
    assert cat.role_of_file("Ternary-Bonsai-4B-PQ2_0.gguf") == cat.role_of_file("mine.gguf") == "chat"
    for mem in (MachineMemory(None, 0, 64 * 1024**3), MachineMemory("GPU", 80 * 1024**3, 64 * 1024**3),
                MachineMemory(None, 0, 3 * 1024**3)):
        rec = recommend_model(cat, mem)
        assert rec.model is None or rec.model.role == "chat"
    only_embedding = Catalog([emb], None)
    assert recommend_model(only_embedding, MachineMemory(None, 0, 64 * 1024**3)).model is None


def test_catalog_role_is_checked():
    base = {"id": "x", "name": "X", "architecture": "qwen3", "context_length": 512,
            "files": [{"variant": "F16", "file": "x.gguf", "format": "gguf", "default": True}]}
    assert _model_from_dict(base).role == "chat"
    assert isinstance(_model_from_dict(dict(base, role="embedding")), CatalogModel)
    with pytest.raises(ValueError, match="role must be one of chat, embedding"):
        _model_from_dict(dict(base, role="reranker"))
