"""Tiny random Qwen3.5 hybrids shared by the hybrid tests: an HF reference model and our ModelData.

The HF model's large matrices are replaced by exactly-ternary values (group-wise ``t * s``) so the
reference and our ternary model hold *identical* weights; norms, A_log and dt_bias are random so
that every convention (``1 + w`` norms, the plain gated norm, the decay gate) matters.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator

import pytest
import torch

from runtime.formats.codecs import quantize_ternary
from runtime.formats.model_data import DenseTensor, ModelData, Provenance
from runtime.model.qwen35.names import config_from_hf

transformers = pytest.importorskip("transformers")

GROUP = 16

# name -> overrides of the tiny text config; all have both layer kinds, GQA in the attention and
# (except "equal_heads") fewer DeltaNet key heads than value heads.
TINY_CONFIGS: dict[str, dict] = {
    "gqa_2x": dict(num_attention_heads=4, num_key_value_heads=2, linear_num_key_heads=2, linear_num_value_heads=4,
                   layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"]),
    "gqa_3x": dict(num_attention_heads=6, num_key_value_heads=2, linear_num_key_heads=1, linear_num_value_heads=3,
                   layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention",
                                "linear_attention"]),
    "equal_heads": dict(num_attention_heads=2, num_key_value_heads=1, linear_num_key_heads=2,
                        linear_num_value_heads=2,
                        layer_types=["full_attention", "linear_attention", "linear_attention"]),
}


def hf_text_config(name: str, **extra) -> transformers.Qwen3_5TextConfig:
    o = dict(vocab_size=96, hidden_size=64, intermediate_size=96, head_dim=32, linear_key_head_dim=16,
             linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=256,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
             tie_word_embeddings=False)
    o.update(TINY_CONFIGS[name])
    o.update(extra)
    return transformers.Qwen3_5TextConfig(num_hidden_layers=len(o["layer_types"]), **o)


def _ternary_keep(name: str, w: torch.Tensor) -> bool:
    """Which HF tensors the Bonsai files store ternary (the rest is the dense keep-list)."""
    return w.dim() == 2 and not name.endswith(("in_proj_a.weight", "in_proj_b.weight"))


def build_tiny(name: str, seed: int = 0, group: int = GROUP, **extra) -> tuple[torch.nn.Module, ModelData]:
    """(HF ``Qwen3_5ForCausalLM`` in fp32, the same weights as canonical ModelData)."""
    cfg = hf_text_config(name, **extra)
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    tensors = {}
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if _ternary_keep(pname, p):
                std = (3.0 if pname == "lm_head.weight" else 1.0) / p.shape[1] ** 0.5
                w = torch.randn(p.shape, generator=g) * std
                t, _ = quantize_ternary(w, group, strict=False)
                p.copy_(t.dequantize(torch.float32))
                tensors[pname] = t
                continue
            if pname.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif pname.endswith("norm.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))  # zero-centred: x * (1 + w)
            elif pname.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif pname.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif pname.endswith(("in_proj_a.weight", "in_proj_b.weight")):
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            tensors[pname] = DenseTensor(p.detach().clone())
    data = ModelData(config=config_from_hf(cfg.to_dict()), tensors=tensors,
                     provenance=Provenance(source_name=f"tiny-{name}", source_format="test"), name=f"tiny-{name}")
    return model, data


def hf_greedy(model: torch.nn.Module, prompt: list[int], steps: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        # explicit all-ones mask: with a pad id set, HF would mask prompt tokens equal to it
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps,
                             min_new_tokens=steps, do_sample=False)
    return out[0, len(prompt):].tolist()


def our_greedy(model: torch.nn.Module, prompt: list[int], steps: int, token_by_token: bool = False) -> list[int]:
    """Greedy decode with our model: one prefill (or one token at a time), then single-token steps."""
    out: list[int] = []
    with torch.no_grad():
        if token_by_token:
            for i, t in enumerate(prompt):
                logits = model(torch.tensor([t]), torch.tensor([i]), kv_len=i + 1)
        else:
            n = len(prompt)
            logits = model(torch.tensor(prompt), torch.arange(n), kv_len=n, last_only=True)
        pos = len(prompt)
        for _ in range(steps):
            nxt = int(logits[-1].argmax())
            out.append(nxt)
            logits = model(torch.tensor([nxt]), torch.tensor([pos]), kv_len=pos + 1)
            pos += 1
    return out


_HF_KERNEL_FUNCS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                    "causal_conv1d_update")


@contextlib.contextmanager
def hf_torch_path(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run the transformers reference on its own torch code even where fla / causal-conv1d are installed.

    transformers picks the kernels when ``modeling_qwen3_5`` is imported: each of the functions
    above is wrapped (``use_kernel_func_from_hub_with_fallback``) around the torch implementation
    and dispatches to fla's Triton kernels when importable - which fail on CPU tensors (the GPU
    machine has fla installed). ``inspect.unwrap`` gives back the torch function; older
    transformers kept the choice on the module instance (``self.chunk_gated_delta_rule``,
    ``self.causal_conv1d_fn``), which is reset too.
    """
    hfm = sys.modules[type(model).__module__]
    saved = {n: getattr(hfm, n) for n in _HF_KERNEL_FUNCS if hasattr(hfm, n)}
    try:
        for n, f in saved.items():
            setattr(hfm, n, inspect.unwrap(f))
        for mod in model.modules():
            for attr in ("chunk_gated_delta_rule", "recurrent_gated_delta_rule"):
                if attr in vars(mod) and hasattr(hfm, "torch_" + attr):
                    setattr(mod, attr, getattr(hfm, "torch_" + attr))
            for attr in ("causal_conv1d_fn", "causal_conv1d_update"):
                if attr in vars(mod):
                    setattr(mod, attr, None)
        yield model
    finally:
        for n, f in saved.items():
            setattr(hfm, n, f)
