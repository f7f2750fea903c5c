"""The mapped offload mode in the planner: layers (and the LM head) in pinned host memory that the
GPU kernels read in place: no staging slots, GPU-computed, so tight budgets keep GPU numerics."""

from __future__ import annotations

import json

import pytest
import torch

from runtime.devices import GiB
from runtime.errors import OutOfMemoryError
from runtime.model.config import SYNTHETIC_CONFIGS
from runtime.offload import Placement, host_mapped_tensors, map_linears_to_host
from runtime.planner import (
    MAPPED_READ_FRACTION,
    ModelSizes,
    OffloadCosts,
    fallback_plan,
    plan_memory,
)
from tests.planner.conftest import build_tiny, tiny_model_data

B8 = SYNTHETIC_CONFIGS["bonsai-8b"]


def test_a_1gib_card_maps_every_layer_and_the_lm_head_instead_of_computing_on_the_cpu():
    mapped = plan_memory(B8, 1 * GiB, device="hypothetical")
    assert mapped.offload_mode == "mapped" and mapped.layers_on_cpu == 36
    assert mapped.lm_head_device == "cpu" and mapped.lm_head_mapped  # weights on the host, computed on the GPU
    assert mapped.predicted.offload_staging == 0
    # without the mapped mode (a GPU that cannot read host memory) the same card computes on the CPU
    old = plan_memory(B8, 1 * GiB, device="hypothetical", mapped=False)
    assert old.offload_mode == "cpu" and not old.lm_head_mapped
    assert any("LM head had to stay on the CPU" in r for r in old.reasons)
    assert mapped.predicted_offload_s_per_token < old.predicted_offload_s_per_token / 5
    assert mapped.context_length >= old.context_length


def test_mapped_needs_no_staging_so_more_stays_on_the_gpu():
    stream = plan_memory(B8, 2 * GiB, device="hypothetical", offload_mode="stream")
    mapped = plan_memory(B8, 2 * GiB, device="hypothetical", offload_mode="mapped")
    layer = max(ModelSizes.from_config(B8).layer_bytes)
    assert stream.predicted.offload_staging >= 2 * layer and mapped.predicted.offload_staging == 0
    assert mapped.layers_on_gpu > stream.layers_on_gpu  # the two staging slots' VRAM holds layers instead
    # a tighter card: both offload every layer, and the slots' VRAM becomes context and a full prompt chunk
    stream = plan_memory(B8, 1 * GiB, device="hypothetical", offload_mode="stream")
    mapped = plan_memory(B8, 1 * GiB, device="hypothetical", offload_mode="mapped")
    assert stream.layers_on_cpu == mapped.layers_on_cpu == 36
    assert mapped.context_length > stream.context_length
    assert mapped.prefill_chunk == 512 > stream.prefill_chunk  # the full-GPU run's chunk: same prefill rounding


def test_choice_between_stream_and_mapped_follows_the_read_bandwidth():
    # assumed: mapped reads reach 0.8 of the copy bandwidth; at 2 GiB streaming 30 layers beats reading 28 in place
    assumed = plan_memory(B8, 2 * GiB, device="hypothetical")
    assert assumed.offload_mode == "stream"
    assert OffloadCosts().mapped_rate == pytest.approx(MAPPED_READ_FRACTION * OffloadCosts().h2d_bytes_per_s)
    # measured at the copy bandwidth: the fewer offloaded layers win
    fast = OffloadCosts(mapped_bytes_per_s=20e9, measured=True)
    p = plan_memory(B8, 2 * GiB, device="hypothetical", offload_costs=fast)
    assert p.offload_mode == "mapped" and p.layers_on_cpu < assumed.layers_on_cpu
    assert any("measured speeds" in r for r in p.reasons)


def test_mapped_layers_keep_their_small_dense_tensors_on_the_gpu():
    s = ModelSizes.from_config(B8)
    assert s.lm_head_ternary and all(0 < d < b / 100 for d, b in zip(s.layer_dense_bytes, s.layer_bytes, strict=True))
    p = plan_memory(B8, 2 * GiB, device="hypothetical", offload_mode="mapped")
    on_gpu = s.other_bytes + sum(s.layer_bytes[i] for i in p.gpu_layers) + s.lm_head_bytes
    dense = sum(s.layer_dense_bytes[i] for i in p.cpu_layers)
    assert p.predicted.weights == on_gpu + dense  # (the untied embedding is in pinned host memory)
    assert p.host_bytes == s.embedding_bytes + sum(s.mapped_layer_bytes(i) for i in p.cpu_layers)
    # tied embeddings: the table (gathered in place) and the mapped LM head are two pinned copies
    tied = SYNTHETIC_CONFIGS["bonsai-1.7b"]
    t, st = plan_memory(tied, 1 * GiB, device="hypothetical"), ModelSizes.from_config(tied)
    assert t.lm_head_mapped and t.embedding_device == "cpu"
    assert t.host_bytes == 2 * st.embedding_bytes + sum(st.mapped_layer_bytes(i) for i in t.cpu_layers)
    # the hybrid's DeltaNet layers keep their dense a/b projections and conv weights on the GPU too
    h = ModelSizes.from_config(SYNTHETIC_CONFIGS["bonsai-27b"])
    assert max(h.layer_dense_bytes) > 40 * min(h.layer_dense_bytes) > 0


def test_a_dense_model_has_nothing_to_map():
    md = tiny_model_data()  # matrices stored dequantized (fp32): no Triton linear to map
    s = ModelSizes.from_model_data(md)
    assert s.layer_dense_bytes == s.layer_bytes and not s.lm_head_ternary
    full = plan_memory(md, 2**40, ctx_cap=256, min_margin_bytes=0, margin_fraction=0.0, prefill_chunk=16)
    tight = plan_memory(md, full.predicted.total - 1, ctx_cap=256, min_margin_bytes=0, margin_fraction=0.0,
                        prefill_chunk=16)
    assert tight.layers_on_cpu > 0 and tight.offload_mode != "mapped" and not tight.lm_head_mapped


def test_reasons_and_json_say_mapped():
    p = plan_memory(B8, 1 * GiB, device="hypothetical")
    text = " ".join(p.reasons)
    assert "pinned host memory and the GPU reads them in place" in text and "no staging slots" in text
    assert "same GPU kernels" in text and "CUDA graph" in text
    assert "computing them on the CPU" in text  # the rivals it was compared with
    assert "still computed on the GPU" in text and "stay on the CPU" not in text
    d = p.to_dict()
    assert d["offload_mode"] == "mapped" and d["lm_head_mapped"] is True and d["lm_head_device"] == "cpu"
    assert "mapped: computed on the GPU" in p.describe()
    streamed = plan_memory(B8, 2 * GiB, device="hypothetical")
    assert streamed.to_dict()["lm_head_mapped"] is False
    assert any("reading 27 layers in place" in r for r in streamed.reasons)  # mapped needed fewer layers


def test_forcing_and_refusing_mapped():
    forced = plan_memory(B8, 3 * GiB, device="hypothetical", offload_mode="mapped")
    assert forced.offload_mode == "mapped" and not forced.lm_head_mapped  # the head still fits the GPU
    assert plan_memory(B8, 1 * GiB, device="hypothetical", offload_modes=("stream", "cpu")).offload_mode == "cpu"
    with pytest.raises(ValueError, match="Triton"):
        plan_memory(B8, 2 * GiB, offload_mode="mapped", mapped=False)
    with pytest.raises(ValueError, match="offload mode"):
        plan_memory(B8, 2 * GiB, offload_mode="zero-copy")
    host = plan_memory(B8, None, device="cpu", offload_mode="mapped")  # no GPU: nothing to offload
    assert host.offload_mode == "none" and host.layers_on_gpu == 0


def test_mapping_needs_room_to_build_the_largest_part_on_the_gpu_first():
    s = ModelSizes.from_config(B8)
    huge = ModelSizes(s.config, s.embedding_bytes, 2 * GiB, s.layer_bytes, s.other_bytes, s.largest_matrix_elems,
                      s.layer_dense_bytes, True)  # an LM head bigger than the card
    p = plan_memory(huge, 1 * GiB, device="hypothetical")
    assert not p.lm_head_mapped  # it cannot be prepared on the GPU and then mapped
    with pytest.raises(OutOfMemoryError):
        plan_memory(huge, 1 * GiB, device="hypothetical", offload_mode="mapped")


def test_fallback_from_a_mapped_plan():
    p = plan_memory(B8, int(1.2 * GiB), device="hypothetical")
    assert p.offload_mode == "mapped" and p.context_length < 4096
    q = fallback_plan(B8, p)  # too little context to halve: 85% of the card, still read in place
    assert q.offload_mode == "mapped" and q.lm_head_mapped and q.predicted.total <= p.budget_bytes * 0.85
    # the engine passes mapped=False for a backend that cannot map: the fallback then never maps
    assert fallback_plan(B8, plan_memory(B8, int(1.5 * GiB), device="hypothetical"), mapped=False).offload_mode \
        in ("stream", "cpu")


def test_cli_plan_1gib_has_a_gpu_computed_lm_head_and_no_cpu_computed_layers(capsys):
    from runtime.cli import main

    assert main(["plan", "--synthetic", "bonsai-8b", "--gpu-memory", "141GiB", "--max-vram", "1GiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["offload_mode"] == "mapped" and d["lm_head_mapped"] is True
    assert d["layers_on_cpu"] == 36 and d["predicted_breakdown"]["offload_staging"] == 0
    assert main(["plan", "--synthetic", "bonsai-8b", "--gpu-memory", "141GiB", "--max-vram", "1GiB",
                 "--offload", "cpu", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["offload_mode"] == "cpu" and d["lm_head_mapped"] is False
    assert main(["plan", "--synthetic", "bonsai-8b", "--gpu-memory", "2GiB", "--offload", "mapped"]) == 0
    out = capsys.readouterr().out
    assert "(mapped)" in out and "reads them in place" in out


def test_placement_runs_mapped_layers_and_head_unwrapped(tiny_md):
    """On a CPU device nothing moves (the tensors already are host memory), but the plumbing is the
    GPU's: mapped blocks and the head come back unwrapped, built on the model's device."""
    plan = plan_memory(tiny_md, 2**40, ctx_cap=256)
    plan.cpu_layers, plan.gpu_layers = [2, 3], [0, 1]
    plan.offload_mode, plan.lm_head_device, plan.lm_head_mapped = "mapped", "cpu", True
    pl = Placement(plan, "cpu")
    assert pl.layer_device(3) == torch.device("cpu") and pl.lm_head_device() == torch.device("cpu")
    model = build_tiny(tiny_md)
    blocks = list(model.layers)
    for i in range(len(model.layers)):
        assert pl.wrap_layer(i, model.layers[i]) is blocks[i]
    assert pl.wrap_lm_head(model.lm_head) is model.lm_head
    pl.finish()
    assert pl.graph_safe == (plan.embedding_device == "gpu")  # the head no longer blocks the graph
    assert pl.mapped_bytes == 0 and map_linears_to_host(model) == 0 and host_mapped_tensors(model) == set()


def _tiny_hybrid():
    from runtime.model.qwen35.synthetic import qwen35_synthetic_model
    from tests.model_factory import tiny_hybrid_synthetic_config

    cfg = tiny_hybrid_synthetic_config(hidden=128, intermediate=256, heads=(2, 1), linear_heads=(1, 2))
    return qwen35_synthetic_model("bonsai-27b", seed=2, group_size=64, config=cfg)


@pytest.mark.parametrize("arch", ["qwen3", "qwen35"])
def test_models_build_a_mapped_plan_as_plain_blocks(arch):
    """Both architectures accept a mapped plan (the hybrid refuses only CPU-computed layers) and build
    every layer and the head as ordinary modules on the model's device, computing the same logits."""
    from runtime.model.qwen3 import Qwen3Model
    from runtime.model.qwen35.model import Qwen35Model
    from runtime.offload import HostComputedLayer, StreamedLayer

    data, cls = (tiny_model_data(), Qwen3Model) if arch == "qwen3" else (_tiny_hybrid(), Qwen35Model)
    plan = plan_memory(data, 2**40, ctx_cap=64)
    n = data.config.num_layers
    plan.cpu_layers, plan.gpu_layers, plan.offload_mode = list(range(n)), [], "mapped"
    plan.lm_head_device, plan.lm_head_mapped = "cpu", True
    kw = dict(dtype=torch.float32, max_positions=64, backend="reference")
    model = cls.from_model_data(data, "cpu", placement=Placement(plan, "cpu"), **kw)
    plain = cls.from_model_data(data, "cpu", **kw)
    assert not any(isinstance(m, (StreamedLayer, HostComputedLayer)) for m in model.modules())
    tokens = torch.tensor([5, 17, 250, 3, 99, 42])
    with torch.no_grad():
        assert torch.equal(model(tokens, torch.arange(6)), plain(tokens, torch.arange(6)))


def test_forcing_mapped_on_a_dense_model_explains_instead_of_crashing():
    md = tiny_model_data()
    with pytest.raises(OutOfMemoryError, match="does not fit"):
        plan_memory(md, 1 << 20, offload_mode="mapped", ctx_cap=256, min_margin_bytes=0, margin_fraction=0.0,
                    cuda_context_bytes=0, prefill_chunk=16)


def test_half_the_8b_keeps_the_full_gpu_prompt_chunk_and_room_to_tune_mapped_matrices():
    """#3's offload target: ``--max-vram`` at half the 8B's packed weights on a large card, 1K context.
    The plan maps everything, prefills in the uncapped run's 512-token chunks (a smaller chunk would
    round the prompt differently and change the answer) and keeps room for timing one mapped matrix
    on a device copy, so mapped matrices get the launch configs resident ones get."""
    sizes = ModelSizes.from_config(B8)
    full = plan_memory(sizes, 140 * GiB, ctx_cap=1024)
    half = plan_memory(sizes, 140 * GiB, max_vram=sizes.total_bytes // 2, ctx_cap=1024)
    assert full.offload_mode == "none" and half.offload_mode == "mapped" and half.layers_on_cpu == 36
    assert half.context_length == 1024 and half.prefill_chunk == full.prefill_chunk == 512
    assert half.predicted.tuning_copy == sizes.largest_matrix_bytes == 12288 * 4096 // 4 + 12288 * 4096 // 128 * 2
    assert full.predicted.tuning_copy == 0
    assert not any("chunks of" in r for r in half.reasons)
    assert any("timed on a device copy" in r for r in half.reasons)
    assert "tuning copy" in half.describe() and "tuning copy" not in full.describe()
