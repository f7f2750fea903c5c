"""Synthetic Qwen3.5-family hybrids (``bonsai-27b``, ``bonsai-27b-ptq1``) with the exact 27B shapes.

Why: the 27B headline numbers (<= 6.5 GB VRAM with the ~1.75-bit packing, decode speed) must be
measured on the real tensor shapes without downloading 6-7 GB. Like :mod:`runtime.synthetic`,
every tensor is drawn from its own generator seeded by ``(seed, name)`` and generated lazily, one
at a time, so a writer or the loader can stream the model.

Tensor set (matches the released Bonsai-2-27B GGUF census): 402 ternary matrices (g128 fp16
scales), 96 BF16 DeltaNet ``in_proj_a``/``in_proj_b`` (the keep-list), 353 F32 vectors (norms,
conv1d, A_log, dt_bias). ``encoding="t3"`` generates the base-3 packing directly (no 2-bit
detour), so the t2 and t3 variants hold different random draws of the same distribution.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from runtime.formats.model_data import T2, T3, DenseTensor, ModelData, Provenance, Tensor, TernaryTensor
from runtime.model.config import ModelConfig
from runtime.synthetic import (
    _T2_TERNARY_BYTES,
    DEFAULT_GROUP_SIZE,
    TensorSpec,
    _generator,
    random_ternary,
    synthetic_config,
    synthetic_tokenizer,
)

_CHUNK_ELEMS = 8 * 1024 * 1024


def qwen35_tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
    """Canonical names and shapes. Kinds: ternary, norm (~1.0), plus the DeltaNet keep-list kinds
    ``proj_bf16``, ``conv``, ``a_log`` / ``a``, ``dt_bias``, ``gated_norm``."""
    h, hd = cfg.hidden_size, cfg.head_dim
    kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    vd = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    nv = cfg.linear_num_value_heads
    specs = [TensorSpec("model.embed_tokens.weight", "ternary", (cfg.vocab_size, h))]
    for i, kind in enumerate(cfg.layer_types or []):
        p = f"model.layers.{i}."
        specs.append(TensorSpec(p + "input_layernorm.weight", "norm", (h,)))
        if kind == "linear_attention":
            a = p + "linear_attn."
            specs += [
                TensorSpec(a + "in_proj_qkv.weight", "ternary", (2 * kd + vd, h)),
                TensorSpec(a + "in_proj_z.weight", "ternary", (vd, h)),
                TensorSpec(a + "in_proj_b.weight", "proj_bf16", (nv, h)),
                TensorSpec(a + "in_proj_a.weight", "proj_bf16", (nv, h)),
                TensorSpec(a + "conv1d.weight", "conv", (2 * kd + vd, 1, cfg.linear_conv_kernel_dim)),
                # GGUF-convention configs (norm_weight_offset 0, like bonsai-27b) carry A = -exp(A_log)
                TensorSpec(a + ("A_log" if cfg.norm_weight_offset else "A"),
                           "a_log" if cfg.norm_weight_offset else "a", (nv,)),
                TensorSpec(a + "dt_bias", "dt_bias", (nv,)),
                TensorSpec(a + "norm.weight", "gated_norm", (cfg.linear_value_head_dim,)),
                TensorSpec(a + "out_proj.weight", "ternary", (h, vd)),
            ]
        else:
            s = p + "self_attn."
            q_rows = cfg.num_heads * hd * (2 if cfg.attn_output_gate else 1)
            specs += [
                TensorSpec(s + "q_proj.weight", "ternary", (q_rows, h)),
                TensorSpec(s + "k_proj.weight", "ternary", (cfg.num_kv_heads * hd, h)),
                TensorSpec(s + "v_proj.weight", "ternary", (cfg.num_kv_heads * hd, h)),
                TensorSpec(s + "o_proj.weight", "ternary", (h, cfg.num_heads * hd)),
                TensorSpec(s + "q_norm.weight", "norm", (hd,)),
                TensorSpec(s + "k_norm.weight", "norm", (hd,)),
            ]
        specs += [
            TensorSpec(p + "post_attention_layernorm.weight", "norm", (h,)),
            TensorSpec(p + "mlp.gate_proj.weight", "ternary", (cfg.intermediate_size, h)),
            TensorSpec(p + "mlp.up_proj.weight", "ternary", (cfg.intermediate_size, h)),
            TensorSpec(p + "mlp.down_proj.weight", "ternary", (h, cfg.intermediate_size)),
        ]
    specs.append(TensorSpec("model.norm.weight", "norm", (h,)))
    if not cfg.tie_word_embeddings:
        specs.append(TensorSpec("lm_head.weight", "ternary", (cfg.vocab_size, h)))
    return specs


def _device_generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    if device.type == "cpu":
        return _generator(seed, name)
    g = torch.Generator(device=device)
    g.manual_seed(_generator(seed, name).initial_seed())
    return g


def random_ternary_t3(name: str, shape: tuple[int, int], seed: int = 0, group_size: int = DEFAULT_GROUP_SIZE,
                      device: torch.device | str = "cpu") -> TernaryTensor:
    """Random ternary weights drawn directly in the base-3 ``t3`` packing (uniform trits).

    Byte ``m`` of a group holds 5 trits (0..242); the last byte of a group holds only the
    ``group_size % 5`` remaining trits (0..3^r - 1), as :func:`runtime.formats.codecs.pack_t3` makes.
    ``device="cuda"`` draws on the GPU (seconds instead of minutes for the 27B; the values then
    come from the CUDA generator, deterministic per seed but different from the CPU draw).
    """
    rows, cols = shape
    device = torch.device(device)
    g = _device_generator(seed, name, device)
    groups = cols // group_size
    full, rem = divmod(group_size, 5)
    nbg = full + (1 if rem else 0)
    packed = torch.empty(rows, groups, nbg, dtype=torch.uint8, device=device)
    step = max(1, _CHUNK_ELEMS // (groups * nbg))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        packed[r0:r1, :, :full] = torch.randint(0, 243, (r1 - r0, groups, full), generator=g,
                                                device=device).to(torch.uint8)
        if rem:
            packed[r0:r1, :, full] = torch.randint(0, 3 ** rem, (r1 - r0, groups), generator=g,
                                                   device=device).to(torch.uint8)
    base = (1.5 / cols) ** 0.5
    scales = ((torch.rand(rows, groups, generator=g, device=device) + 0.5) * base).to(torch.float16)
    return TernaryTensor((rows, cols), group_size, packed.view(rows, groups * nbg), scales, T3)


def random_ternary_t2(name: str, shape: tuple[int, int], seed: int = 0, group_size: int = DEFAULT_GROUP_SIZE,
                      device: torch.device | str = "cpu") -> TernaryTensor:
    """Random ternary weights in the 2-bit ``t2`` packing, drawn on ``device`` (uniform codes 0..2).

    Each byte is one of the 81 bytes whose four 2-bit codes are all in {0, 1, 2} (a uniform draw of
    the byte index, looked up in a table on the device), so no code 3 is ever produced. Scales as
    :func:`runtime.synthetic.random_ternary`. Deterministic per ``(seed, name, device type)``; on
    CUDA the values come from the CUDA generator (seconds for the 27B instead of minutes), so they
    differ from the CPU draw of :func:`runtime.synthetic.random_ternary`.
    """
    rows, cols = shape
    if cols % group_size or group_size % 4:
        raise ValueError(f"{name}: width {cols} / group size {group_size} do not fit the t2 layout")
    device = torch.device(device)
    g = _device_generator(seed, name, device)
    table = _T2_TERNARY_BYTES.to(device)
    nb = cols // 4
    packed = torch.empty(rows, nb, dtype=torch.uint8, device=device)
    step = max(1, _CHUNK_ELEMS // nb)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        idx = torch.randint(0, 81, (r1 - r0, nb), generator=g, device=device, dtype=torch.int64)
        packed[r0:r1] = table[idx]
    base = (1.5 / cols) ** 0.5
    scales = ((torch.rand(rows, cols // group_size, generator=g, device=device) + 0.5) * base).to(torch.float16)
    return TernaryTensor((rows, cols), group_size, packed, scales, T2)


def _dense(spec: TensorSpec, seed: int) -> DenseTensor:
    g = _generator(seed, spec.name)
    shape = spec.shape
    if spec.kind in ("norm", "gated_norm"):
        return DenseTensor(1.0 + 0.05 * torch.randn(shape, generator=g))
    if spec.kind == "proj_bf16":
        return DenseTensor((torch.randn(shape, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16))
    if spec.kind == "conv":
        return DenseTensor(torch.randn(shape, generator=g) * (0.5 / shape[-1] ** 0.5))
    if spec.kind in ("a_log", "a"):
        a_log = torch.empty(shape).uniform_(1.0, 16.0, generator=g).log()
        return DenseTensor(a_log if spec.kind == "a_log" else -torch.exp(a_log))
    if spec.kind == "dt_bias":
        return DenseTensor(0.5 * torch.randn(shape, generator=g))
    raise ValueError(f"unknown synthetic tensor kind {spec.kind!r} for {spec.name}")


def qwen35_synthetic_tensors(cfg: ModelConfig, seed: int = 0, encoding: str = T2,
                             group_size: int = DEFAULT_GROUP_SIZE,
                             device: torch.device | str = "cpu") -> Iterator[tuple[str, Tensor]]:
    """Yield ``(name, tensor)`` one at a time (the 27B is ~7 GB t2 / ~6 GB t3: stream it).

    Ternary matrices are drawn on ``device`` (``t3`` by :func:`random_ternary_t3`; ``t2`` off the
    CPU by :func:`random_ternary_t2`, on the CPU by :func:`runtime.synthetic.random_ternary`, the
    values the CPU models have always had); dense tensors are always drawn on the CPU (they are
    small) and moved.
    """
    device = torch.device(device)
    if encoding not in (T2, T3):
        raise ValueError(f"unknown ternary encoding {encoding!r}")
    for spec in qwen35_tensor_specs(cfg):
        if spec.kind == "ternary":
            shape = (spec.shape[0], spec.shape[1])
            if encoding == T3:
                yield spec.name, random_ternary_t3(spec.name, shape, seed, group_size, device)
            elif device.type != "cpu":
                yield spec.name, random_ternary_t2(spec.name, shape, seed, group_size, device)
            else:
                yield spec.name, random_ternary(spec.name, shape, seed, group_size, encoding)
        else:
            d = _dense(spec, seed)
            yield spec.name, DenseTensor(d.data.to(device))


def qwen35_synthetic_model(name: str, seed: int = 0, encoding: str | None = None,
                           group_size: int = DEFAULT_GROUP_SIZE, config: ModelConfig | None = None,
                           device: torch.device | str = "cpu") -> ModelData:
    """A synthetic hybrid in memory. ``bonsai-27b-ptq1`` defaults to t3, everything else to t2.

    ``config`` overrides the shapes (tests use tiny configs; the 27B takes minutes and ~6-7 GB).
    """
    cfg = config or synthetic_config(name)
    if encoding is None:
        encoding = T3 if name.endswith("ptq1") else T2
    tensors = dict(qwen35_synthetic_tensors(cfg, seed, encoding, group_size, device))
    return ModelData(
        config=cfg, tensors=tensors, tokenizer=synthetic_tokenizer(),
        generation_defaults={"temperature": 0.7, "top_p": 0.95, "top_k": 20},
        provenance=Provenance(source_name=f"synthetic:{name}:seed={seed}:g{group_size}:{encoding}",
                              source_format="synthetic"),
        name=f"synthetic-{name}",
    )
