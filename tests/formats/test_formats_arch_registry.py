"""The architecture registry: every name a file may use finds its ArchSpec, the spec's tensor list is
the one the planner sizes, a config that names two architectures is refused, and the spec's
offload capabilities bound what the planner may choose."""

from __future__ import annotations

import pytest

from runtime.errors import UnsupportedModelError
from runtime.formats.arch import ARCH_MODULES, TERNARY, arch_for_gguf, arch_for_hf, get_arch
from runtime.model.config import ModelConfig
from runtime.planner import GiB, _tensor_shapes, plan_memory
from runtime.synthetic import synthetic_config


@pytest.mark.parametrize("module, names", sorted(ARCH_MODULES.items()))
def test_every_registered_name_finds_its_spec_and_model(module, names):
    specs = {get_arch(n).name for n in names}
    assert len(specs) == 1  # one module, one architecture
    spec = get_arch(names[0])
    assert spec.load_model_class().__module__ in (module, spec.model_class.partition(":")[0])
    assert arch_for_gguf(spec.gguf_arch) is spec
    for mt in spec.hf_model_types:
        assert arch_for_hf(mt, spec.hf_architectures[:1]) is spec


def test_unknown_and_contradictory_names_are_refused():
    with pytest.raises(UnsupportedModelError, match="unsupported GGUF architecture 'mamba'.*known: .*llama"):
        arch_for_gguf("mamba")
    with pytest.raises(UnsupportedModelError, match="model_type 'gpt_neox'"):
        arch_for_hf("gpt_neox", ["LlamaForCausalLM"])  # model_type decides; it must be known
    with pytest.raises(UnsupportedModelError, match="name different architectures"):
        arch_for_hf("qwen3", ["LlamaForCausalLM"])


@pytest.mark.parametrize("name", ["bonsai-8b", "bonsai-27b"])
def test_planner_sizes_the_spec_tensor_list(name):
    cfg = synthetic_config(name)
    want = [(t.name, t.shape, t.kind == TERNARY) for t in get_arch(cfg.arch).tensor_list(cfg)]
    assert _tensor_shapes(cfg) == want


def test_planner_keeps_to_the_architecture_offload_modes(monkeypatch):
    cfg = ModelConfig(arch="llama", vocab_size=1024, hidden_size=512, intermediate_size=1024, num_layers=8,
                      num_heads=8, num_kv_heads=2, head_dim=64, max_position_embeddings=4096)
    spec = get_arch("llama")
    monkeypatch.setattr(spec, "offload_modes", ("none", "cpu"))
    with pytest.raises(ValueError, match="llama models cannot run with offload mode 'stream'"):
        plan_memory(cfg, 1 * GiB, offload_mode="stream", min_context=256)
    with pytest.raises(ValueError, match="support none of the offload modes"):
        plan_memory(cfg, 1 * GiB, offload_modes=("stream", "mapped"), min_context=256)
