"""Synthetic Qwen3.5-family hybrids (``bonsai-27b``, ``bonsai-27b-ptq1``) with the exact 27B shapes.

Why: the 27B headline numbers (<= 6.5 GB VRAM with the ~1.75-bit packing, decode speed) must be
measured on the real tensor shapes without downloading 6-7 GB. Like :mod:`runtime.synthetic`,
every tensor is drawn from its own generator seeded by ``(seed, name)`` and generated lazily, one
at a time, so a writer or the loader can stream the model.

Tensor set: the qwen35 ArchSpec's list (matches the released Bonsai-2-27B GGUF census: 402
ternary matrices, 96 BF16 DeltaNet ``in_proj_a``/``in_proj_b``, 353 F32 vectors). ``encoding="t3"``
generates the base-3 packing directly (no 2-bit detour), so the t2 and t3 variants hold different
random draws of the same distribution.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from runtime.formats.model_data import T2, T3, ModelData, Provenance, Tensor
from runtime.model.config import ModelConfig
from runtime.synthetic import DEFAULT_GROUP_SIZE, synthetic_config, synthetic_tensors, synthetic_tokenizer


def qwen35_synthetic_tensors(cfg: ModelConfig, seed: int = 0, encoding: str = T2,
                             group_size: int = DEFAULT_GROUP_SIZE,
                             device: torch.device | str = "cpu") -> Iterator[tuple[str, Tensor]]:
    """Yield ``(name, tensor)`` one at a time (the 27B is ~7 GB t2 / ~6 GB t3: stream it).

    Ternary matrices are drawn on ``device`` (``t3`` directly in base 3; ``t2`` off the CPU by
    :func:`runtime.synthetic.random_ternary_t2`, on the CPU by :func:`runtime.synthetic.random_ternary`,
    the values the CPU models have always had); other tensors are drawn on the CPU and moved.
    """
    return synthetic_tensors(cfg, seed, encoding, group_size, device, direct_t3=True)


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
