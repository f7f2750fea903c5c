"""The one in-memory model representation every reader produces and every consumer uses.

Why one representation: converters, the engine, the planner and the kernels must agree on what a
ternary weight *is*. The canonical ternary layout is also the ``.ternary`` on-disk layout and what
the GPU kernels read, so loading is a memory map and an upload, with no re-permutation:

* ``TernaryTensor`` (encoding ``"t2"``): logical shape ``(rows, cols)`` where ``cols`` is the input
  (last) dimension. ``codes`` is ``uint8[rows, cols // 4]``: four consecutive weights per byte,
  weight ``j`` of a row at byte ``j // 4``, bits ``2*(j % 4)`` (LSB first), code = t + 1 so
  0 -> -1, 1 -> 0, 2 -> +1 (3 -> +2 is representable, needed for lossless Q2_0, never produced by
  ternary models). Viewed as little-endian int32 a row is 16 weights per word, weight k at bits 2k.
  ``scales`` is ``float16[rows, cols // group_size]``; weight = (code - 1) * scale.
* ``TernaryTensor`` (encoding ``"t3"``, PTQ1_0-class, ~1.75 bpw): per group of ``group_size``
  weights, ``ceil(group_size / 5)`` bytes; byte ``m`` of a group holds the trits of weights
  ``5m .. 5m+4`` as the base-3 number ``t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4`` (trit = t + 1, so a
  plain integer 0..242, no scaling trick). ``codes`` is ``uint8[rows, groups * ceil(g/5)]``.
* ``DenseTensor``: a plain torch tensor (f32/f16/bf16) for norms, biases, conv and gate params.

``cols`` must be a multiple of ``group_size``; ``group_size`` is a multiple of 4 (t2) or any (t3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# TernaryTensor is defined beside the code that packs it (codecs imports nothing from here);
# it and the encoding names are re-exported, as readers import them from this module.
from runtime.formats.codecs import T2 as T2
from runtime.formats.codecs import T3 as T3
from runtime.formats.codecs import TernaryTensor
from runtime.formats.codecs import t3_bytes_per_group as t3_bytes_per_group
from runtime.model.config import ModelConfig


@dataclass
class DenseTensor:
    """A tensor kept in a plain floating-point dtype (norms, conv weights, DeltaNet gates...)."""

    data: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()


Tensor = TernaryTensor | DenseTensor


@dataclass
class TokenizerData:
    """Enough to rebuild the tokenizer without the original repo.

    ``tokenizer_json`` is a Hugging Face ``tokenizer.json`` document (a GGUF's
    ``tokenizer.ggml.*`` metadata is converted to one), so one code path builds the tokenizer.
    """

    tokenizer_json: str
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    add_bos_token: bool = False
    chat_template: str | None = None


@dataclass
class Provenance:
    source_name: str = ""
    source_sha256: str = ""
    source_format: str = ""  # "gguf:PQ2_0", "hf-safetensors", "ternary", ...
    converter_version: str = ""


@dataclass
class ModelData:
    """A whole model: config, tensors (canonical HF names), tokenizer, defaults, provenance."""

    config: ModelConfig
    tensors: dict[str, Tensor]
    tokenizer: TokenizerData | None = None
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    name: str = ""
    notices: list[str] = field(default_factory=list)  # what loading decided that a user should know

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())
