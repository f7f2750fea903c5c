"""The per-machine cache of measured launch configs: where it lives, and that it round-trips."""

from __future__ import annotations

import json

import triton

from runtime.kernels.triton import tuning


def test_cache_file_is_per_gpu_model_and_triton_version(tmp_path, monkeypatch):
    monkeypatch.delenv(tuning.TUNE_CACHE_ENV, raising=False)
    monkeypatch.setenv("TERNARY_CHAT_HOME", str(tmp_path / "home"))
    f = tuning.tuned_cache_file("NVIDIA GeForce RTX 4060 Laptop GPU")
    assert f == tmp_path / "home" / "cache" / "kernels" / f"nvidia-geforce-rtx-4060-laptop-gpu-triton{triton.__version__}.json"
    monkeypatch.setenv(tuning.TUNE_CACHE_ENV, str(tmp_path / "k"))
    assert tuning.tuned_cache_file("A/B C").parent == tmp_path / "k"
    assert "/" not in tuning.tuned_cache_file("A/B C").name


def test_a_measured_config_is_written_and_read_back(tmp_path, monkeypatch):
    f = tmp_path / "cache" / "gpu.json"
    monkeypatch.setattr(tuning, "_user_tuned_file", lambda: f)
    key, other = "gemv|test-only|1", "prefill|test-only|2"
    try:
        tuning._remember(key, ("q8", 2, 4096, 1, 2))
        tuning._remember(other, ("dequant", None))
        stored = json.loads(f.read_text())
        assert stored[key] == ["q8", 2, 4096, 1, 2] and stored[other] == ["dequant", None]
        assert not list(f.parent.glob("*.tmp*"))  # written atomically, no temp file left
        del tuning._tuned[key], tuning._tuned[other]
        assert tuning.load_tuned(f) >= 2
        assert tuning._tuned[key] == ("q8", 2, 4096, 1, 2) and tuning._tuned[other] == ("dequant", None)
    finally:
        tuning._tuned.pop(key, None)
        tuning._tuned.pop(other, None)


def test_an_unwritable_cache_only_costs_retuning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(tuning, "_user_tuned_file", lambda: blocker / "gpu.json")
    try:
        tuning._remember("gemv|test-only|3", ("q8", 8, 1024, 1, 4))  # must not raise
        assert tuning._tuned["gemv|test-only|3"] == ("q8", 8, 1024, 1, 4)
    finally:
        tuning._tuned.pop("gemv|test-only|3", None)


def test_shipped_configs_are_known_candidates():
    """Every config in the shipped tuned files names a kernel variant and tile the launcher knows (a stale entry
    would otherwise only fail on that GPU, at that shape)."""
    gemv = set(tuning._GEMV_CANDIDATES + tuning._XP_CANDIDATES + tuning._X3_CANDIDATES + tuning._DOT_CANDIDATES
               + tuning._Q8_CANDIDATES + tuning._Q8C_CANDIDATES + tuning._Q8P_CANDIDATES
               + tuning._Q3_CANDIDATES)
    files = sorted(tuning.TUNED_DIR.glob("*.json"))
    assert files
    for f in files:
        for key, cfg in json.loads(f.read_text()).items():
            kind = key.split("|")[0]
            if kind == "gemv":
                assert tuple(cfg) in gemv, (f.name, key, cfg)
                if key.endswith("|a8"):
                    assert cfg[0] in ("q8", "q8c", "q8p", "q3"), (f.name, key, cfg)
            else:
                assert kind == "prefill", (f.name, key)
                assert cfg[0] == "dequant" or tuple(cfg[1]) in tuning._MM_CANDIDATES, (f.name, key, cfg)
