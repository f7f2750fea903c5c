"""Llama 3 (dense) through Engine.load equals transformers' LlamaForCausalLM on the same ternary weights.

A tiny model is built here (GQA, ``llama3`` RoPE scaling, tied or untied head), its weights
ternary-quantised (exactly ``t * s`` per group), then written as a Hugging Face safetensors folder
and as a GGUF (llama.cpp's q/k row order), and loaded back through the real readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from runtime.engine import Engine
from runtime.formats.gguf import GGUFFile
from runtime.generation import GenerationSettings
from runtime.model.rope import rope_inv_freq
from tests import model_factory as mf
from tests.engine.conftest import hf_greedy

GROUP = 128  # what Engine.load recovers from a float safetensors folder
PROMPT = "The quick brown fox jumps over the lazy dog. 你好"
CASES = [("tied-gqa2", {"tie_word_embeddings": True, "num_key_value_heads": 2}),
         ("untied-gqa4", {"tie_word_embeddings": False, "num_key_value_heads": 1})]


def tiny_llama(seed: int, **overrides: Any) -> Any:
    """A LlamaForCausalLM with llama3 RoPE scaling whose matrices are exactly ternary per group."""
    from transformers import LlamaConfig, LlamaForCausalLM

    kw: dict[str, Any] = dict(
        vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
        bos_token_id=mf.TOKEN_IDS["<|endoftext|>"], eos_token_id=mf.TOKEN_IDS["<|im_end|>"],
        pad_token_id=mf.TOKEN_IDS["<|endoftext|>"],
        # original context 64 puts the head_dim 32 frequencies in all three llama3 bands
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    )
    kw.update(overrides)
    cfg = LlamaConfig(**kw)

    def matrix(name: str, p: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
        if p.ndim != 2:
            return None
        rows, cols = p.shape
        return mf.random_ternary(rows, cols, GROUP, gen, 1.0 if "embed" in name else 1.0 / cols ** 0.5)

    return mf._random_qwen3(lambda: LlamaForCausalLM(cfg), seed, matrix)


@pytest.fixture(autouse=True)
def exact_cpu_activations(monkeypatch):
    """Parity is measured on exact fp32 activations and an fp32 KV cache (``kv_dtype`` below): the
    CPU kernel's int8 activations and the fp16 cache are memory/speed options, not the model."""
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "exact")


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def files(request, tmp_path_factory) -> tuple[Any, Path, Path]:
    """(transformers model, HF folder, GGUF file) of one case."""
    name, overrides = request.param
    hf = tiny_llama(seed=5, **overrides)
    tmp = tmp_path_factory.mktemp(name)
    tok = mf.tiny_tokenizer()
    folder = mf.write_hf_folder(hf, tok, tmp / "hf")
    gguf = mf.write_gguf(mf.hf_model_to_model_data(hf, tok, group_size=GROUP), tmp / "model.gguf", "Q2_0")
    return hf, folder, gguf


def _logprobs_error(engine: Engine, hf: Any, ids: torch.Tensor) -> float:
    with torch.no_grad():
        ref = torch.log_softmax(hf(ids[None]).logits[0].float(), -1)
        ours = torch.log_softmax(engine.model(ids, torch.arange(len(ids)), kv_len=len(ids)), -1)
    return (ours - ref).abs().max().item()


@pytest.mark.parametrize("source", ["gguf", "hf"])
def test_llama_matches_transformers(files, source):
    """Greedy tokens identical for 24 steps and log-probs within the Qwen3 tolerance (1e-3)."""
    hf, folder, gguf = files
    engine = Engine.load(gguf if source == "gguf" else folder, device="cpu", context_length=128, kv_dtype=torch.float32)
    assert engine.config.arch == "llama" and type(engine.model).__name__ == "LlamaModel"
    assert engine.config.tie_word_embeddings == hf.config.tie_word_embeddings
    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(3))
    assert _logprobs_error(engine, hf, ids) <= 1e-3
    prompt = engine.tokenizer.encode(PROMPT, add_special_tokens=True)
    settings = GenerationSettings(temperature=0.0, max_new_tokens=24, ignore_eos=True)
    done = list(engine.generate(PROMPT, settings))[-1]
    assert done.stats.token_ids == hf_greedy(hf, prompt, 24)


def test_llama3_rope_scaling_is_read_and_used(files):
    """Both sources carry the llama3 scaling, it changes the frequencies, and HF computes the same."""
    hf, folder, gguf = files
    plain = Engine.load(folder, device="cpu", context_length=64, kv_dtype=torch.float32)
    rs = plain.config.rope_scaling
    assert rs is not None and (rs.type, rs.factor, rs.original_max_position_embeddings) == ("llama3", 8.0, 64)
    assert (rs.low_freq_factor, rs.high_freq_factor) == (1.0, 4.0)
    assert Engine.load(gguf, device="cpu", context_length=64, kv_dtype=torch.float32).config.rope_scaling == rs
    ours, scale = rope_inv_freq(plain.config)
    ref = hf.model.rotary_emb.inv_freq
    assert scale == 1.0 and torch.allclose(ours, ref.float(), rtol=1e-6)
    unscaled = 1.0 / 10000.0 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32)
    assert (ours < unscaled * 0.99).any() and (ours == unscaled).any()  # divided, blended and kept bands


def test_llama_gguf_uses_llama_cpp_names_and_row_order(files):
    """The GGUF is a llama.cpp ``llama`` file: no q/k norms, q/k rows interleaved per head."""
    hf, _folder, gguf = files
    f = GGUFFile(gguf)
    try:
        assert f.metadata["general.architecture"] == "llama"
        assert f.metadata["llama.rope.scaling.type"] == "llama3"
        assert not any("attn_q_norm" in n for n in f.tensors)
        assert ("output.weight" in f.tensors) != hf.config.tie_word_embeddings
        q = f.decode("blk.0.attn_q.weight").dequantize(torch.float32)
    finally:
        f.close()
    w = hf.model.layers[0].self_attn.q_proj.weight.detach()
    d = 32
    # llama.cpp's convert_hf_to_gguf permute: per head [2, d/2, cols] -> [d/2, 2, cols]
    expected = w.reshape(4, 2, d // 2, -1).swapaxes(1, 2).reshape(w.shape)
    assert torch.equal(q, expected) and not torch.equal(q, w)


def test_llama_cpp_rope_freqs_tensor_carries_the_scaling(files, tmp_path):
    """llama.cpp writes llama3 scaling as ``rope_freqs.weight`` (per-frequency divisors) and no
    scaling metadata: such a GGUF decodes exactly what transformers does with the scaling on."""
    import dataclasses

    from runtime.formats.model_data import DenseTensor

    hf, folder, _gguf = files
    data = mf.hf_model_to_model_data(hf, mf.tiny_tokenizer(), group_size=GROUP)
    scaled, _ = rope_inv_freq(data.config)
    plain_cfg = dataclasses.replace(data.config, rope_scaling=None)
    plain, _ = rope_inv_freq(plain_cfg)
    data.config = plain_cfg
    data.tensors["rope_freqs.weight"] = DenseTensor(plain / scaled)
    path = mf.write_gguf(data, tmp_path / "llamacpp.gguf", "Q2_0")
    f = GGUFFile(path)
    try:
        assert "rope_freqs.weight" in f.tensors and "llama.rope.scaling.type" not in f.metadata
    finally:
        f.close()
    engine = Engine.load(path, device="cpu", context_length=128, kv_dtype=torch.float32)
    assert engine.config.rope_scaling is None
    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(3))
    assert _logprobs_error(engine, hf, ids) <= 1e-3
    prompt = engine.tokenizer.encode(PROMPT, add_special_tokens=True)
    done = list(engine.generate(PROMPT, GenerationSettings(temperature=0.0, max_new_tokens=24, ignore_eos=True)))[-1]
    assert done.stats.token_ids == hf_greedy(hf, prompt, 24)
    # without the factors the same file is a different model (the comparison is not vacuous)
    del data.tensors["rope_freqs.weight"]
    bare = Engine.load(mf.write_gguf(data, tmp_path / "bare.gguf", "Q2_0"), device="cpu", context_length=128, kv_dtype=torch.float32)
    assert _logprobs_error(bare, hf, ids) > 1e-2
