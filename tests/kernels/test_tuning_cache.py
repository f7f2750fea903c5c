"""The per-machine cache of measured launch configs: where it lives, and that it round-trips."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch
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
               + tuning._Q3_CANDIDATES + tuning._Q8M_CANDIDATES + tuning._Q8T_CANDIDATES + tuning._Q8W_CANDIDATES)
    files = sorted(tuning.TUNED_DIR.glob("*.json"))
    assert files
    for f in files:
        for key, cfg in json.loads(f.read_text()).items():
            kind = key.split("|")[0]
            if kind == "gemv":
                assert tuple(cfg) in gemv, (f.name, key, cfg)
                rows = int(key.split("|")[1])
                if key.endswith("|a8"):  # int8 x; several rows (a batched step) may also take the 16-bit MMA path
                    allowed = ("q8", "q8c", "q8p", "q3") + (("q8m", "q8t", "q8w", "dot", "dotp") if rows > 1 else ())
                    assert cfg[0] in allowed, (f.name, key, cfg)
                if cfg[0] in ("q8m", "q8t", "q8w"):
                    assert rows > 1, (f.name, key, cfg)
            else:
                assert kind == "prefill", (f.name, key)
                assert cfg[0] == "dequant" or tuple(cfg[1]) in tuning._MM_CANDIDATES, (f.name, key, cfg)


def test_the_tuner_never_picks_a_fast_config_whose_result_disagrees(monkeypatch) -> None:
    """First use of a mat-vec shape times every candidate; a candidate whose output disagrees with the first
    one's (a variant broken on this GPU or Triton) is skipped with a warning however fast it is, and the
    fastest config that agrees is chosen. (Timing and launches are stood in for: this runs without a GPU.)"""
    import warnings as _w

    from runtime.kernels.triton import matvec

    x = torch.randn(4, 1024)
    truth = torch.randn(4, 64)
    times = {("q8", 4, 4096, 1, 2): 3.0, ("dotp", 64, 0, 4, 4): 0.5, ("dotp", 32, 0, 4, 4): 1.0}
    broken = ("dotp", 64, 0, 4, 4)

    state = {"cfg": None, "last": None}

    def launch(x2, nw, w, s, w2, s2, r2, y, n, k, g, encoding, eps, norm_offset, dual, cfg, **_):
        state["last"] = cfg
        y.copy_(truth + (1.0 if cfg == broken else 1e-3 * torch.randn_like(truth)))

    def bench(fn):
        fn()
        return times[state["last"]]

    monkeypatch.setattr(matvec, "INTERPRET", False)
    monkeypatch.setattr(matvec, "_decode_activations", "int8")
    monkeypatch.setattr(matvec, "_gemv_launch", launch)
    monkeypatch.setattr(matvec, "_Q8_CANDIDATES", [("q8", 4, 4096, 1, 2)])
    monkeypatch.setattr(matvec, "_Q8C_CANDIDATES", [])
    monkeypatch.setattr(matvec, "_Q8P_CANDIDATES", [])
    monkeypatch.setattr(matvec, "_XP_CANDIDATES", [])
    monkeypatch.setattr(matvec, "_X3_CANDIDATES", [])
    monkeypatch.setattr(matvec, "_DOT_CANDIDATES", [broken, ("dotp", 32, 0, 4, 4)])
    monkeypatch.setattr(matvec, "_QUICK_DOT", [broken, ("dotp", 32, 0, 4, 4)])
    monkeypatch.setattr(tuning, "_tensors_to_time", lambda dev, *t: list(t))
    monkeypatch.setattr(tuning, "_remember", lambda key, cfg: state.update(cfg=cfg))
    monkeypatch.setattr(tuning, "_tuned", {})
    monkeypatch.setattr(tuning, "_bench", bench)
    codes = torch.zeros(64, 1024 // 4, dtype=torch.uint8)
    scales = torch.ones(64, 8, dtype=torch.float16)
    with _w.catch_warnings(record=True) as caught:
        _w.simplefilter("always")
        cfg = matvec._gemv_config(x.to(torch.bfloat16), None, codes, scales, None, None, None, 64, 1024, 128, "t2",
                                  1e-6, 0.0, False)
    assert cfg == ("dotp", 32, 0, 4, 4) == state["cfg"]  # the fastest that agrees, not the broken 0.5
    assert any("disagrees" in str(c.message) and "64, 0, 4, 4" in str(c.message) for c in caught)
    assert matvec._agrees(truth, truth + 1e-3) and not matvec._agrees(truth + 1.0, truth)
    assert matvec._agrees(truth, torch.full_like(truth, float("nan")))  # an unset x proves nothing
    assert not matvec._agrees(torch.full_like(truth, float("inf")), truth)


def test_bench_winners_land_under_the_keys_the_tuner_looks_up(tmp_path) -> None:
    """scripts/gpu/tuned_from_bench.py writes a batched-bench run's fastest config per (shape, rows) under the very
    key ``_gemv_config`` builds for that call (norm / dual / residual fusion, rows, int8 x), and keeps the table's
    other entries; a key spelled differently would leave a shipped table silently unused."""
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("tuned_from_bench", root / "scripts" / "gpu" / "tuned_from_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    bench = {"rows": [
        {"shape": "qkv+norm", "n": 6144, "k": 4096, "rows": 8,
         "all_ms": {"('q8m', 2, 0, 16, 1)": 0.0138, "('q8w', 16, 0, 1, 4)": 0.0091}},
        {"shape": "gate_up+norm+silu", "n": 12288, "k": 4096, "rows": 16,
         "all_ms": {"('dotp', 64, 0, 2, 4)": 0.0536, "('q8w', 16, 0, 1, 2)": 0.0706}},
        {"shape": "down+residual", "n": 4096, "k": 12288, "rows": 8, "all_ms": {"('q8p', 4, 4096, 4, 2)": 0.03}}]}
    bf = tmp_path / "bench.json"
    bf.write_text(json.dumps(bench))
    table = tmp_path / "gpu.json"
    table.write_text(json.dumps({"prefill|other": ["dequant"]}))
    subprocess.run([sys.executable, str(root / "scripts" / "gpu" / "tuned_from_bench.py"), str(bf), str(table)],
                   check=True, capture_output=True)
    got = json.loads(table.read_text())
    a8 = "|a8"
    assert got[tuning._key("gemv", 8, 6144, 4096, 128, "t2", True, False, False, torch.bfloat16) + a8] == \
        ["q8w", 16, 0, 1, 4]
    assert got[tuning._key("gemv", 16, 12288, 4096, 128, "t2", True, True, False, torch.bfloat16) + a8] == \
        ["dotp", 64, 0, 2, 4]
    assert got[tuning._key("gemv", 8, 4096, 12288, 128, "t2", False, False, True, torch.bfloat16) + a8] == \
        ["q8p", 4, 4096, 4, 2]
    assert got["prefill|other"] == ["dequant"] and len(got) == 4
    assert mod.winners(bench) == {k: v for k, v in got.items() if k.startswith("gemv")}
