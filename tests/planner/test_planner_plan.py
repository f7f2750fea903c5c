"""Plan arithmetic for every synthetic Bonsai config, and the ``ternary plan`` CLI."""

from __future__ import annotations

import json

import pytest

from runtime.devices import GiB, MiB, parse_bytes
from runtime.errors import OutOfMemoryError
from runtime.model.config import SYNTHETIC_CONFIGS
from runtime.planner import (
    CTX_ALIGN,
    DEFAULT_CUDA_CONTEXT_BYTES,
    ModelSizes,
    OffloadCosts,
    fallback_plan,
    kv_bytes_per_token,
    plan_memory,
    recurrent_state_bytes_per_layer,
)
from tests.planner.conftest import tiny_model_data

BUDGETS = [1 * GiB, 2 * GiB, 4 * GiB, 6 * GiB, 8 * GiB, 24 * GiB]


def test_parse_bytes_units():
    assert parse_bytes("6GiB") == 6 * 2**30
    assert parse_bytes("8GB") == 8 * 10**9
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1.5 GiB") == int(1.5 * 2**30)
    assert parse_bytes("123456") == 123456
    assert parse_bytes(42) == 42
    for bad in ("six GiB", "6XB", "", "GiB", "-1GiB"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_sizes_from_config_match_generated_model():
    md = tiny_model_data(layers=3, dense=False)
    a, b = ModelSizes.from_model_data(md), ModelSizes.from_config(md.config)
    assert a.layer_bytes == b.layer_bytes
    assert (a.embedding_bytes, a.lm_head_bytes, a.other_bytes) == (b.embedding_bytes, b.lm_head_bytes, b.other_bytes)
    assert a.total_bytes == md.nbytes


def test_bonsai_8b_sizes_are_the_packed_bytes():
    s = ModelSizes.from_config(SYNTHETIC_CONFIGS["bonsai-8b"])
    h, v = 4096, 151_669
    assert s.embedding_bytes == v * h // 4 + v * h // 128 * 2  # 2 bits + fp16 scale per 128
    assert s.lm_head_bytes == s.embedding_bytes  # untied
    assert len(s.layer_bytes) == 36 and len(set(s.layer_bytes)) == 1
    assert 2.0 * GiB < s.total_bytes < 2.1 * GiB


def test_bonsai_27b_kv_and_recurrent_state():
    cfg = SYNTHETIC_CONFIGS["bonsai-27b"]
    assert kv_bytes_per_token(cfg) == 64 * 1024  # only the 16 full-attention layers
    rec = 48 * recurrent_state_bytes_per_layer(cfg)
    assert 145 * MiB < rec < 160 * MiB
    assert kv_bytes_per_token(SYNTHETIC_CONFIGS["bonsai-8b"]) == 36 * 8 * 128 * 2 * 2
    assert kv_bytes_per_token(cfg, "int8") < kv_bytes_per_token(cfg) * 0.52


def test_27b_fits_an_8gib_card_with_4k_context():
    p = plan_memory(SYNTHETIC_CONFIGS["bonsai-27b"], 8 * GiB, device="hypothetical")
    assert p.layers_on_gpu == 64 and p.layers_on_cpu == 0
    assert p.context_length >= 4096
    assert p.predicted.recurrent_state > 145 * MiB
    assert p.predicted.kv_cache == p.context_length * 64 * 1024
    assert p.predicted_peak_bytes <= 8 * GiB


@pytest.mark.parametrize("name", list(SYNTHETIC_CONFIGS))
@pytest.mark.parametrize("budget", BUDGETS)
def test_plan_invariants(name, budget):
    cfg = SYNTHETIC_CONFIGS[name]
    try:
        p = plan_memory(cfg, budget, device="hypothetical")
    except OutOfMemoryError as exc:
        assert budget <= 1 * GiB, exc  # only the smallest budgets may be impossible
        return
    br = p.predicted
    assert p.context_length % CTX_ALIGN == 0 and CTX_ALIGN <= p.context_length <= cfg.max_position_embeddings
    assert sorted(p.gpu_layers + p.cpu_layers) == list(range(cfg.num_layers))
    assert br.total == (br.weights + br.kv_cache + br.recurrent_state + br.workspace + br.offload_staging
                        + br.tuning_copy + br.cuda_context)
    assert br.tuning_copy == (ModelSizes.from_config(cfg).largest_matrix_bytes if p.offload_mode == "mapped" else 0)
    assert br.cuda_context == DEFAULT_CUDA_CONTEXT_BYTES
    assert br.total <= budget  # never plans past the card
    assert br.kv_cache == p.context_length * kv_bytes_per_token(cfg)
    if cfg.tie_word_embeddings and p.lm_head_device == "gpu":
        assert p.embedding_device == "gpu"  # the table *is* the LM head
    if p.cpu_layers:
        assert p.offload_mode in ("stream", "mapped", "cpu")
        assert p.cpu_layers == list(range(cfg.num_layers - len(p.cpu_layers), cfg.num_layers))  # one block at the end
        assert not cfg.tie_word_embeddings or p.embedding_device == "gpu" or p.lm_head_device == "cpu"
    else:
        assert p.offload_mode == "none"
    if p.offload_mode == "mapped":
        assert br.offload_staging == 0  # the GPU reads mapped layers in place: no staging slots
    # only a mapped plan's LM head is read in place; otherwise a host-side LM head is CPU-computed
    assert p.lm_head_mapped == (p.offload_mode == "mapped" and p.lm_head_device == "cpu")
    assert p.reasons and all(isinstance(r, str) and r.endswith(".") for r in p.reasons)


def test_bigger_card_never_gets_less():
    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    prev = None
    for b in [2 * GiB, 3 * GiB, 4 * GiB, 6 * GiB, 8 * GiB]:
        p = plan_memory(cfg, b, device="hypothetical")
        if prev is not None:
            assert p.layers_on_gpu >= prev.layers_on_gpu
            if p.layers_on_gpu == prev.layers_on_gpu:
                assert p.context_length >= prev.context_length
        prev = p


def test_context_cap_and_model_max():
    cfg = SYNTHETIC_CONFIGS["bonsai-1.7b"]
    assert plan_memory(cfg, 80 * GiB).context_length == cfg.max_position_embeddings
    assert plan_memory(cfg, 80 * GiB, ctx_cap=5000).context_length == 4864  # rounded down to 256
    assert plan_memory(cfg, 80 * GiB, max_vram=2 * GiB).budget_bytes == 2 * GiB


def test_embedding_goes_first_for_untied_models():
    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    s = ModelSizes.from_config(cfg)
    full = plan_memory(cfg, 80 * GiB, ctx_cap=4096, host_embedding=False)
    assert full.embedding_device == "gpu"
    # a budget just below "everything on the GPU" but above "everything but the embedding"
    budget = full.predicted.total - s.embedding_bytes // 2
    p = plan_memory(cfg, budget, ctx_cap=4096, margin_fraction=0.0, min_margin_bytes=0, host_embedding=False)
    assert p.embedding_device == "cpu" and p.layers_on_cpu == 0


def test_untied_embedding_lives_on_the_host_by_default_on_a_gpu():
    cfg = SYNTHETIC_CONFIGS["bonsai-27b-ptq1"]
    s = ModelSizes.from_config(cfg)
    on_host = plan_memory(cfg, 80 * GiB, ctx_cap=4096)
    on_gpu = plan_memory(cfg, 80 * GiB, ctx_cap=4096, host_embedding=False)
    assert on_host.embedding_device == "cpu" and on_host.layers_on_cpu == 0 and on_host.offload_mode == "none"
    assert on_host.lm_head_device == "gpu" and on_gpu.embedding_device == "gpu"
    assert on_gpu.predicted.weights - on_host.predicted.weights == s.embedding_bytes
    assert on_host.host_bytes == s.embedding_bytes
    assert any("pinned host memory" in r for r in on_host.reasons)
    # a card we cannot see is assumed to run the kernels that read host memory
    assert plan_memory(cfg, 8 * GiB, device="hypothetical", ctx_cap=4096).embedding_device == "cpu"
    # a tied table is the LM head (read in full every token): it stays on the GPU
    tied = SYNTHETIC_CONFIGS["bonsai-1.7b"]
    assert tied.tie_word_embeddings and plan_memory(tied, 80 * GiB).embedding_device == "gpu"
    # an out-of-memory fallback keeps the table where it was
    assert fallback_plan(cfg, on_host).embedding_device == "cpu"


def test_offload_mode_follows_costs():
    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    slow_bus = OffloadCosts(h2d_bytes_per_s=1e9, cpu_bytes_per_s=100e9, hop_s=1e-5)
    fast_bus = OffloadCosts(h2d_bytes_per_s=50e9, cpu_bytes_per_s=1e9, hop_s=1e-4)
    assert plan_memory(cfg, 2 * GiB, offload_costs=slow_bus).offload_mode == "cpu"
    p = plan_memory(cfg, 2 * GiB, offload_costs=fast_bus)
    assert p.offload_mode == "stream" and p.predicted.offload_staging >= 2 * max(ModelSizes.from_config(cfg).layer_bytes)
    forced = plan_memory(cfg, 2 * GiB, offload_mode="cpu")
    assert forced.offload_mode == "cpu" and forced.host_bytes > p.host_bytes - 1  # KV of CPU layers in RAM too


def test_impossible_budget_raises_with_numbers():
    with pytest.raises(OutOfMemoryError, match="does not fit"):
        plan_memory(SYNTHETIC_CONFIGS["bonsai-8b"], 300 * MiB)


def test_cpu_plan_limited_by_ram():
    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    p = plan_memory(cfg, None, device="cpu", host_memory=4 * GiB)
    assert p.layers_on_gpu == 0 and p.embedding_device == "cpu"
    assert p.predicted.allocated <= 4 * GiB
    with pytest.raises(OutOfMemoryError):
        plan_memory(cfg, None, device="cpu", host_memory=1 * GiB)


def test_cli_plan_json(capsys):
    from runtime.cli import main

    assert main(["plan", "--synthetic", "bonsai-27b", "--gpu-memory", "8GiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("context_length", "layers_on_gpu", "layers_on_cpu", "embedding_device", "predicted_peak_bytes",
                "lm_head_device", "offload_mode", "reasons"):
        assert key in d
    assert d["layers_on_gpu"] == 64 and d["context_length"] >= 4096
    assert d["predicted_peak_bytes"] <= 8 * GiB


def test_cli_plan_text_and_errors(capsys):
    from runtime.cli import main

    assert main(["plan", "--synthetic", "bonsai-8b", "--gpu-memory", "2GiB", "--ctx", "4096"]) == 0
    out = capsys.readouterr().out
    assert "context length:    4096" in out and "why:" in out and "host memory" in out
    assert main(["plan", "--synthetic", "bonsai-8b", "--gpu-memory", "lots"]) == 1
    assert "cannot parse byte size" in capsys.readouterr().err
    assert main(["plan", "--synthetic", "bonsai-99b", "--gpu-memory", "8GiB"]) == 1


def test_context_estimate_scales_with_sms_and_has_a_floor():
    from runtime.planner import cuda_context_estimate

    assert 740 * MiB < cuda_context_estimate(132) < 770 * MiB  # the H200 measurement (741-765 MiB)
    assert cuda_context_estimate(24) == DEFAULT_CUDA_CONTEXT_BYTES


def test_fallback_plan_shrinks_context_then_offloads():
    from runtime.planner import fallback_plan

    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    p = plan_memory(cfg, 8 * GiB, device="hypothetical")
    assert p.context_length >= 8192 and p.layers_on_cpu == 0
    q = fallback_plan(cfg, p)
    assert q.context_length <= p.context_length // 2 and q.layers_on_cpu == 0
    assert "Out of memory" in q.reasons[-1]
    small = plan_memory(cfg, 3 * GiB, device="hypothetical", ctx_cap=2048)
    r = fallback_plan(cfg, small)
    assert r.layers_on_cpu > small.layers_on_cpu or r.embedding_device == "cpu"
    assert r.predicted.total <= small.budget_bytes * 0.85
    tiny = plan_memory(cfg, 1 * GiB, device="hypothetical", ctx_cap=256)
    with pytest.raises(OutOfMemoryError):
        fallback_plan(cfg, fallback_plan(cfg, tiny))


def test_plan_sizes_from_a_file_header(tmp_path, capsys):
    from runtime.cli import main
    from runtime.cli.plan import sizes_from_file
    from runtime.formats.ternary_file import write_model

    md = tiny_model_data(layers=3, dense=False)
    md.tokenizer = None
    path = write_model(md, tmp_path / "tiny.ternary")
    s = sizes_from_file(str(path))
    assert s.total_bytes == ModelSizes.from_model_data(md).total_bytes
    assert main(["plan", str(path), "--gpu-memory", "1GiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layers_on_gpu"] == 3 and d["context_length"] == md.config.max_position_embeddings


def test_prompt_chunk_shrinks_only_when_the_context_needs_it(monkeypatch):
    """A smaller prefill chunk changes the prefill's rounding, so the output would depend on the VRAM
    cap: the planner keeps the default 512 whenever a plan reaches the context with it (2 GiB: layers
    are streamed, chunk unchanged) and shrinks it only when that gains context (0.92 GiB)."""
    import runtime.planner as planner_mod

    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    fast_bus = OffloadCosts(h2d_bytes_per_s=50e9, cpu_bytes_per_s=1e9, hop_s=1e-4)
    streamed = plan_memory(cfg, 2 * GiB, offload_costs=fast_bus)
    assert streamed.cpu_layers and streamed.prefill_chunk == 512
    tight = plan_memory(cfg, int(0.92 * GiB), offload_costs=fast_bus)
    assert tight.prefill_chunk < 512 and any("chunks of" in r for r in tight.reasons)
    assert tight.predicted.workspace == planner_mod.workspace_bytes(
        cfg, tight.prefill_chunk, ModelSizes.from_config(cfg).largest_matrix_elems)
    monkeypatch.setattr(planner_mod, "SMALLER_PREFILL_CHUNKS", ())
    fixed = plan_memory(cfg, int(0.92 * GiB), offload_costs=fast_bus)
    assert fixed.prefill_chunk == 512 and fixed.context_length < tight.context_length
