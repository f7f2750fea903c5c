"""Memory planner: how much context fits, and what (if anything) must live on the CPU.

Why: a 27B model on a 6-8 GB card only works if every byte is accounted for before loading, and
the GUI's "will it fit" badge, ``ternary plan``, ``ternary bench`` and ``Engine.load`` must give
the same answer. The plan is computed from the model's *real* sizes (per-layer packed bytes,
embedding, LM head, norms), the KV cache per token (only full-attention layers for the hybrid),
the fixed recurrent state of Gated-DeltaNet layers, workspace buffers, the CUDA context and a
safety margin. It is pure arithmetic: no GPU is needed, so ``--gpu-memory 8GiB`` answers for a
card this machine does not have.

Where a GPU can read host memory itself (CUDA with Triton), an untied embedding table lives in
pinned host memory by default, as in llama.cpp: decode gathers one row per token, which the GPU
reads over the bus inside the CUDA graph at no measured cost (27B: 106.1 tok/s either way), and
the table's VRAM (278-338 MB for the 27B) goes to context instead.

Placement policy when the weights do not fit (cheapest loss first):
1. the embedding table goes to the CPU (when it is not there already); with tied
   embeddings the table *is* the LM head, which is read in full every token, so it stays;
2. whole decoder layers (the last ones, as one contiguous block) go to host memory, either
   *streamed* to the GPU ahead of use (pinned host memory, two GPU staging slots, copies on a
   side stream), *mapped* (pinned host memory the GPU kernels read in place over the bus: no
   staging slots, same kernels as a resident layer; CUDA with Triton only) or *computed* on the
   CPU (the hidden state crosses the bus twice per token); which one is chosen from measured (or
   default) PCIe and CPU speeds, see :class:`OffloadCosts`;
3. the LM head leaves the GPU as the last resort: mapped (still computed on the GPU) in a mapped
   plan, computed on the CPU otherwise.
The context is then the largest multiple of 256 that fits, up to the model maximum and the cap.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.devices import GiB, MiB, format_bytes
from runtime.errors import OutOfMemoryError
from runtime.formats.model_data import T2, DenseTensor, ModelData, TernaryTensor, t3_bytes_per_group
from runtime.model.config import ModelConfig

CTX_ALIGN = 256
# Device memory outside torch's allocator (CUDA context, cuBLAS workspace, loaded Triton/CUDA
# modules). For a card we cannot see (--gpu-memory) a typical consumer figure; for a real card
# CONTEXT_BYTES_PER_SM x its multiprocessors (measured on an H200, 132 SMs, torch 2.11 + CUDA 13,
# 2026-12-02, five runs of 1.7B-8B at 4K-32K context: NVML used - NVML used before the process
# (615 MiB the driver reserves, which NVML reports as used) - torch reserved = 741-765 MiB; the
# per-SM scaling to other cards is an estimate).
DEFAULT_CUDA_CONTEXT_BYTES = 500 * MiB
CONTEXT_BYTES_PER_SM = int(5.8 * MiB)
# Allocations above the modelled buffers seen on the H200 (first-use kernel tuning, graph pool,
# allocator rounding). First measured at 215-245 MiB for Bonsai-8B at 4K-32K context, when every graph
# capture still left a 32 MiB cuBLAS workspace behind (fixed: runtime/capture_stream.py); refitted on
# the run after that fix (2026-12-04, 8B at 1K/4K/8K/32K): 66-97 MiB above the modelled buffers in
# max_memory_allocated, plus headroom that keeps the device-level figure at or under the plan at 32K.
ALLOCATOR_SLACK_BYTES = 160 * MiB
DEFAULT_PREFILL_CHUNK = 512
SMALLER_PREFILL_CHUNKS = (256, 128, 64)  # tried, in order, when the default chunk cannot reach the context
KV_DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
OFFLOAD_MODES = ("none", "stream", "mapped", "cpu")
# Assumed share of the pinned host->device copy bandwidth that GPU kernels get reading pinned host
# memory in place (zero-copy loads are smaller and less deep than a copy engine's DMA); an estimate
# until :func:`runtime.offload.measure_offload_costs` measures it on the machine.
MAPPED_READ_FRACTION = 0.8

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


# ----------------------------------------------------------------------------------------------
# Model sizes
# ----------------------------------------------------------------------------------------------


@dataclass
class ModelSizes:
    """Bytes of every part of a model that the planner places. Built from a file or a config."""

    config: ModelConfig
    embedding_bytes: int
    lm_head_bytes: int  # 0 when tied to the embedding (the table then serves both)
    layer_bytes: list[int]  # weights of each decoder layer, in layer order
    other_bytes: int  # final norm and anything else outside layers
    largest_matrix_elems: int  # rows*cols of the largest in-layer matrix (prefill scratch)
    # per layer, the bytes that are not packed ternary matrices (norms, dense projections, conv
    # weights): what a *mapped* layer keeps on the GPU (its ternary matrices move to host memory)
    layer_dense_bytes: list[int] = field(default_factory=list)
    lm_head_ternary: bool = True  # the LM head (or the tied table) is packed ternary: it can be mapped
    largest_matrix_bytes: int = 0  # packed bytes of the largest in-layer ternary matrix (mapped tuning copy)

    def mapped_layer_bytes(self, i: int) -> int:
        """Bytes of layer ``i`` that leave the GPU when it is mapped (its packed ternary matrices)."""
        dense = self.layer_dense_bytes[i] if i < len(self.layer_dense_bytes) else 0
        return self.layer_bytes[i] - dense

    @property
    def tied(self) -> bool:
        return self.lm_head_bytes == 0

    @property
    def total_bytes(self) -> int:
        return self.embedding_bytes + self.lm_head_bytes + sum(self.layer_bytes) + self.other_bytes

    @classmethod
    def from_model_data(cls, md: ModelData) -> ModelSizes:
        return cls.from_tensor_sizes(md.config, {n: (t.nbytes, _elems(t)) for n, t in md.tensors.items()})

    @classmethod
    def from_tensor_sizes(cls, cfg: ModelConfig, sizes: dict[str, tuple[int, int]]) -> ModelSizes:
        """``sizes``: canonical tensor name -> (bytes, elements).

        A tensor with fewer bytes than elements is a packed ternary matrix (2 bits or less per
        weight plus group scales); dense tensors take at least a byte per element.
        """
        layers = [0] * cfg.num_layers
        dense = [0] * cfg.num_layers
        emb = head = other = largest = largest_packed = 0
        emb_ternary = head_ternary = True
        for name, (nbytes, elems) in sizes.items():
            m = _LAYER_RE.search(name)
            if m and int(m.group(1)) < cfg.num_layers:
                layers[int(m.group(1))] += nbytes
                if nbytes >= elems:
                    dense[int(m.group(1))] += nbytes
                else:
                    largest_packed = max(largest_packed, nbytes)
                largest = max(largest, elems)
            elif name.endswith("embed_tokens.weight"):
                emb += nbytes
                emb_ternary = nbytes < elems
            elif name.startswith("lm_head") or name.endswith("lm_head.weight"):
                head += nbytes
                head_ternary = nbytes < elems
            else:
                other += nbytes
        tied = cfg.tie_word_embeddings
        return cls(cfg, emb, 0 if tied else head, layers, other, largest, dense,
                   emb_ternary if tied else head_ternary, largest_packed)

    @classmethod
    def from_config(cls, cfg: ModelConfig, group_size: int = 128, encoding: str = T2) -> ModelSizes:
        """Sizes a file with this config would have (every matrix ternary, norms fp32)."""
        sizes = {}
        for name, shape, ternary in _tensor_shapes(cfg):
            elems = 1
            for d in shape:
                elems *= d
            if ternary:
                rows, cols = shape
                groups = cols // group_size
                code_bytes = rows * cols // 4 if encoding == T2 else rows * groups * t3_bytes_per_group(group_size)
                sizes[name] = (code_bytes + rows * groups * 2, elems)
            else:
                sizes[name] = (elems * 4, elems)
        return cls.from_tensor_sizes(cfg, sizes)


def _elems(t: TernaryTensor | DenseTensor) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _tensor_shapes(cfg: ModelConfig) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, shape, is_ternary) of every tensor, from the architecture's ArchSpec."""
    from runtime.formats.arch import TERNARY, get_arch

    return [(t.name, tuple(t.shape), t.kind == TERNARY) for t in get_arch(cfg.arch).tensor_list(cfg)]


# ----------------------------------------------------------------------------------------------
# Per-token and fixed state sizes
# ----------------------------------------------------------------------------------------------


def kv_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "fp16", layers: int | None = None) -> int:
    """KV-cache bytes per context token over ``layers`` attention layers (default: all of them).

    int8 stores one fp32 scale per (token, head) for K and for V next to the int8 values (the
    layout of ``runtime.kv_cache.KVCache`` and the Triton kernels).
    """
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV cache type {kv_dtype!r}; choose one of {', '.join(KV_DTYPES)}")
    n = cfg.kv_layers if layers is None else layers
    per_head = cfg.head_dim * KV_DTYPES[kv_dtype] + (4 if kv_dtype == "int8" else 0)
    return n * cfg.num_kv_heads * per_head * 2


def recurrent_state_bytes_per_layer(cfg: ModelConfig) -> int:
    """Fixed state of one Gated-DeltaNet layer: fp32 recurrent [Hv, Dk, Dv] + fp32 conv [C, kernel]."""
    if not cfg.linear_num_value_heads:  # no linear-attention layers (dense architectures)
        return 0
    conv_dim = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    rec = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    return rec + conv_dim * cfg.linear_conv_kernel_dim * 4


def _layer_is_attention(cfg: ModelConfig, i: int) -> bool:
    return cfg.layer_types is None or cfg.layer_types[i] == "full_attention"


def workspace_bytes(cfg: ModelConfig, prefill_chunk: int = DEFAULT_PREFILL_CHUNK, largest_matrix_elems: int = 0) -> int:
    """Transient buffers: prefill activations for one chunk, a dequantized-matrix scratch for the
    prefill GEMM, last-token logits and the GPU sampler's sort buffers, plus the allocator slack
    measured on the H200 (:data:`ALLOCATOR_SLACK_BYTES`).
    """
    h, ffn = cfg.hidden_size, cfg.intermediate_size
    q_out = cfg.num_heads * cfg.head_dim * (2 if cfg.attn_output_gate else 1)
    kv_out = cfg.num_kv_heads * cfg.head_dim
    if cfg.linear_num_value_heads:  # linear-attention (DeltaNet) projections
        lin = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + 2 * cfg.linear_num_value_heads * cfg.linear_value_head_dim
        q_out = max(q_out, lin)
    per_token = 2 * (6 * h + 2 * q_out + 2 * kv_out + 3 * ffn)  # fp16 activations alive at once
    # the prefill GEMM dequantizes a matrix in row chunks of <= 32 MiB (runtime.kernels.triton.gemm.DEQUANT_BUFFER_ELEMS)
    prefill = prefill_chunk * per_token + min(2 * largest_matrix_elems, 32 * MiB)
    sampler = cfg.vocab_size * (4 * 4 + 4 + 8)  # fp32 logits/probs/noise/work, counts, sorted idx
    return prefill + sampler + ALLOCATOR_SLACK_BYTES


# ----------------------------------------------------------------------------------------------
# The plan
# ----------------------------------------------------------------------------------------------


@dataclass
class OffloadCosts:
    """Speeds that decide how layers in host memory run: streamed, mapped or computed on the CPU.

    ``h2d_bytes_per_s``: pinned host -> device copy bandwidth; ``cpu_bytes_per_s``: packed weight
    bytes per second the CPU backend gets through in a batch-1 matvec; ``hop_s``: one
    activation round-trip GPU -> CPU -> GPU (latency-bound); ``mapped_bytes_per_s``: packed weight
    bytes per second the GPU's mat-vec kernels read from pinned host memory in place (``None``:
    assumed :data:`MAPPED_READ_FRACTION` of the copy bandwidth). Defaults are typical desktop values
    (PCIe 4.0 x16, a few cores); :func:`runtime.offload.measure_offload_costs` measures them.
    """

    h2d_bytes_per_s: float = 20e9
    cpu_bytes_per_s: float = 2e9
    hop_s: float = 100e-6
    measured: bool = False
    mapped_bytes_per_s: float | None = None

    @property
    def mapped_rate(self) -> float:
        """Bytes/s of mapped reads: measured, else the assumed share of the copy bandwidth."""
        return self.mapped_bytes_per_s or MAPPED_READ_FRACTION * self.h2d_bytes_per_s

    def stream_seconds(self, nbytes: int) -> float:
        return nbytes / self.h2d_bytes_per_s

    def mapped_seconds(self, nbytes: int) -> float:
        return nbytes / self.mapped_rate

    def cpu_seconds(self, nbytes: int) -> float:
        return nbytes / self.cpu_bytes_per_s + (self.hop_s if nbytes else 0.0)


@dataclass
class MemoryBreakdown:
    """Predicted peak device memory by part. ``total`` includes the CUDA context."""

    weights: int = 0
    kv_cache: int = 0
    recurrent_state: int = 0
    workspace: int = 0
    offload_staging: int = 0
    tuning_copy: int = 0  # mapped plans: a device copy of the matrices whose launch config is being timed
    cuda_context: int = 0

    @property
    def allocated(self) -> int:
        """What ``torch.cuda.max_memory_allocated`` should report (everything but the context)."""
        return (self.weights + self.kv_cache + self.recurrent_state + self.workspace + self.offload_staging
                + self.tuning_copy)

    @property
    def total(self) -> int:
        return self.allocated + self.cuda_context

    def to_dict(self) -> dict[str, int]:
        d = asdict(self)
        d["allocated"] = self.allocated
        d["total"] = self.total
        return d


@dataclass
class Plan:
    """Where every part of the model lives and how much context fits. See module docstring."""

    device: str  # "cuda:0", "cpu", "mps" or "hypothetical" (--gpu-memory)
    context_length: int
    max_context: int  # the model's own maximum
    gpu_layers: list[int]
    cpu_layers: list[int]
    embedding_device: str  # "gpu" | "cpu" (where the table's weights live)
    lm_head_device: str  # "gpu" | "cpu" (where its weights live; see lm_head_mapped)
    offload_mode: str  # "none" | "stream" | "mapped" | "cpu"
    kv_dtype: str
    prefill_chunk: int
    budget_bytes: int  # device memory this plan may use (context included)
    predicted: MemoryBreakdown
    host_bytes: int  # weights (and KV of CPU-computed layers) kept in host RAM
    predicted_offload_s_per_token: float = 0.0
    reasons: list[str] = field(default_factory=list)
    # the LM head's weights are in pinned host memory (lm_head_device "cpu") but the GPU computes it,
    # reading them in place: a mapped plan's head, not a CPU-computed one
    lm_head_mapped: bool = False

    @property
    def layers_on_gpu(self) -> int:
        return len(self.gpu_layers)

    @property
    def layers_on_cpu(self) -> int:
        return len(self.cpu_layers)

    @property
    def predicted_peak_bytes(self) -> int:
        return self.predicted.total

    @property
    def fits(self) -> bool:
        return self.context_length > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "context_length": self.context_length,
            "max_context": self.max_context,
            "layers_on_gpu": self.layers_on_gpu,
            "layers_on_cpu": self.layers_on_cpu,
            "cpu_layer_indices": list(self.cpu_layers),
            "embedding_device": self.embedding_device,
            "lm_head_device": self.lm_head_device,
            "lm_head_mapped": self.lm_head_mapped,
            "offload_mode": self.offload_mode,
            "kv_dtype": self.kv_dtype,
            "prefill_chunk": self.prefill_chunk,
            "budget_bytes": self.budget_bytes,
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "predicted_breakdown": self.predicted.to_dict(),
            "host_bytes": self.host_bytes,
            "predicted_offload_s_per_token": self.predicted_offload_s_per_token,
            "reasons": list(self.reasons),
        }

    def describe(self) -> str:
        """Multi-line human summary (what ``ternary plan`` prints)."""
        p = self.predicted
        lines = [
            f"device:            {self.device}  (budget {format_bytes(self.budget_bytes)})",
            f"context length:    {self.context_length} tokens (model max {self.max_context})",
            f"layers:            {self.layers_on_gpu} on GPU, {self.layers_on_cpu} on CPU"
            + (f" ({self.offload_mode})" if self.cpu_layers else ""),
            f"embedding:         {self.embedding_device}",
            f"lm_head:           {self.lm_head_device}"
            + (" (mapped: computed on the GPU, read from pinned host memory)" if self.lm_head_mapped else ""),
            f"KV cache:          {self.kv_dtype}",
            f"predicted peak:    {format_bytes(p.total)} = weights {format_bytes(p.weights)} + KV {format_bytes(p.kv_cache)}"
            + (f" + recurrent {format_bytes(p.recurrent_state)}" if p.recurrent_state else "")
            + f" + workspace {format_bytes(p.workspace)}"
            + (f" + staging {format_bytes(p.offload_staging)}" if p.offload_staging else "")
            + (f" + tuning copy {format_bytes(p.tuning_copy)}" if p.tuning_copy else "")
            + f" + CUDA context {format_bytes(p.cuda_context)}",
            f"host RAM (weights): {format_bytes(self.host_bytes)}",
            "why:",
        ]
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def _as_sizes(model: ModelData | ModelConfig | ModelSizes) -> ModelSizes:
    if isinstance(model, ModelSizes):
        return model
    if isinstance(model, ModelData):
        return ModelSizes.from_model_data(model)
    if isinstance(model, ModelConfig):
        return ModelSizes.from_config(model)
    raise TypeError(f"plan_memory needs ModelData, ModelConfig or ModelSizes, got {type(model).__name__}")


@dataclass
class _Placement:
    cpu_layers: list[int]
    embedding_gpu: bool
    lm_head_gpu: bool
    mode: str


def _fixed_gpu_bytes(s: ModelSizes, pl: _Placement, kv_dtype: str, ws: int) -> tuple[MemoryBreakdown, int, int]:
    """(breakdown without KV, KV bytes per token on the GPU, host bytes) for a placement."""
    cfg = s.config
    cpu = set(pl.cpu_layers)
    weights = s.other_bytes
    host = 0
    for i, b in enumerate(s.layer_bytes):
        if i not in cpu:
            weights += b
        elif pl.mode == "mapped":  # its packed matrices go to host memory, the rest stays
            host += s.mapped_layer_bytes(i)
            weights += b - s.mapped_layer_bytes(i)
        else:
            host += b
    if pl.embedding_gpu or (s.tied and pl.lm_head_gpu):
        weights += s.embedding_bytes
    else:
        host += s.embedding_bytes
    if s.lm_head_bytes:
        if pl.lm_head_gpu:
            weights += s.lm_head_bytes
        else:
            host += s.lm_head_bytes
    elif _head_mapped(s, pl):  # tied: the mapped head is its own pinned copy next to the table's
        host += s.embedding_bytes
    # The model's KV cache / recurrent state is one device allocation for all layers (streamed and
    # mapped layers use it; CPU-computed layers keep a host copy of their own, counted in host bytes)
    on_gpu = list(range(cfg.num_layers))
    attn_gpu = sum(1 for i in on_gpu if _layer_is_attention(cfg, i))
    rec_layers = sum(1 for i in on_gpu if not _layer_is_attention(cfg, i))
    staging = 2 * max((s.layer_bytes[i] for i in cpu), default=0) if pl.mode == "stream" and len(cpu) > 2 else 0
    if pl.mode == "stream" and 0 < len(cpu) <= 2:
        staging = sum(s.layer_bytes[i] for i in cpu)  # one slot per streamed layer: copied once
    # A mapped matrix's launch configs are timed on a device copy (timed over the bus they could differ
    # from a resident matrix's and change the output), only for a shape no launch table holds yet: one
    # matrix while the prompt's activations are alive; the decode step's gate+up pair is timed after
    # they are freed, in their room.
    tuning = s.largest_matrix_bytes if pl.mode == "mapped" and cpu else 0
    br = MemoryBreakdown(weights=weights, recurrent_state=rec_layers * recurrent_state_bytes_per_layer(cfg),
                         workspace=ws, offload_staging=staging, tuning_copy=tuning)
    return br, kv_bytes_per_token(cfg, kv_dtype, layers=attn_gpu), host


def _layers_seconds(s: ModelSizes, costs: OffloadCosts, pl: _Placement) -> float:
    """Per-token cost of a placement's host-resident layers in its offload mode (LM head apart)."""
    if pl.mode == "mapped":
        return costs.mapped_seconds(sum(s.mapped_layer_bytes(i) for i in pl.cpu_layers))
    nbytes = sum(s.layer_bytes[i] for i in pl.cpu_layers)
    return costs.cpu_seconds(nbytes) if pl.mode == "cpu" else costs.stream_seconds(nbytes)


def _versus(s: ModelSizes, costs: OffloadCosts, chosen: _Placement, rivals: list[_Placement | str]) -> str:
    """" vs ..." naming what each other offload mode would have cost (a mode given by name did not
    reach the context at all), or "" when no other mode was considered."""
    rate = {"stream": f"{costs.h2d_bytes_per_s / 1e9:.0f} GB/s through two staging slots",
            "mapped": f"{costs.mapped_rate / 1e9:.0f} GB/s", "cpu": f"{costs.cpu_bytes_per_s / 1e9:.1f} GB/s"}
    verb = {"stream": "streaming", "mapped": "reading in place", "cpu": "computing on the CPU"}
    parts = []
    for r in rivals:
        if isinstance(r, str):
            parts.append(f"{verb[r]} would not fit")
            continue
        n = len(r.cpu_layers)
        layers = f"{n} layers" if n != len(chosen.cpu_layers) else "them"
        what = {"stream": f"streaming {layers}", "mapped": f"reading {layers} in place",
                "cpu": f"computing {layers} on the CPU"}[r.mode]
        parts.append(f"~{_layers_seconds(s, costs, r) * 1e3:.1f} ms/token {what} at {rate[r.mode]}")
    return f" vs {', '.join(parts)}" if parts else ""


def _head_mapped(s: ModelSizes, pl: _Placement) -> bool:
    """The LM head is off the GPU in a mapped plan and packed ternary: the GPU reads it in place."""
    return pl.mode == "mapped" and not pl.lm_head_gpu and s.lm_head_ternary


def _mapped_load_peak(s: ModelSizes, pl: _Placement) -> int:
    """Extra device bytes while loading a mapped plan: a mapped layer (or the LM head) is prepared on
    the GPU like a resident one and only then moved to host memory, one at a time."""
    if pl.mode != "mapped":
        return 0
    peak = max((s.mapped_layer_bytes(i) for i in pl.cpu_layers), default=0)
    if _head_mapped(s, pl):
        peak = max(peak, s.lm_head_bytes or s.embedding_bytes)
    return peak


def _max_context(avail_for_kv: int, kv_per_token: int, cap: int) -> int:
    if avail_for_kv < 0:
        return 0
    if kv_per_token == 0:
        return cap
    n = min(cap, avail_for_kv // kv_per_token)
    return (n // CTX_ALIGN) * CTX_ALIGN


def plan_memory(
    model: ModelData | ModelConfig | ModelSizes,
    device_memory: int | None = None,
    *,
    device: str = "cuda:0",
    max_vram: int | None = None,
    ctx_cap: int | None = None,
    kv_dtype: str = "fp16",
    min_context: int = 4096,
    offload_costs: OffloadCosts | None = None,
    offload_mode: str | None = None,
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES,
    margin_fraction: float = 0.03,
    min_margin_bytes: int = 64 * MiB,
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
    host_memory: int | None = None,
    host_embedding: bool | None = None,
    mapped: bool | None = None,
    offload_modes: tuple[str, ...] | None = None,
) -> Plan:
    """Plan placement and context for ``model`` on a GPU with ``device_memory`` bytes.

    ``device_memory`` is what this process may use on the card, CUDA context included (a card's
    free memory, or the size of a hypothetical card). ``max_vram`` caps it further. The context
    aims for ``min(ctx_cap, model max, min_context)`` first (offloading if needed to reach it), then
    grows to the largest that fits. ``offload_mode`` forces "stream", "mapped" or "cpu";
    ``offload_modes`` limits the choice to some of them; by default the cheapest per token under
    ``offload_costs`` is chosen. For ``device="cpu"`` everything is on the CPU and only host RAM
    limits the context. ``host_embedding`` keeps an untied embedding table in host memory even when
    it would fit, and ``mapped`` offers the mapped mode (both default: yes for a GPU device, which a
    ``--gpu-memory`` card is assumed to be; pass False for a GPU whose kernels cannot read host
    memory, i.e. without Triton). Raises :class:`OutOfMemoryError` when nothing fits, with the numbers.
    """
    s = _as_sizes(model)
    cfg = s.config
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV cache type {kv_dtype!r}; choose one of {', '.join(KV_DTYPES)}")
    if mapped is None:
        mapped = device not in ("cpu", "mps")
    if offload_mode is not None:
        modes = [offload_mode]
    else:  # a choice: a mode this device cannot run drops out (a forced one is refused below)
        choice = tuple(offload_modes or ("stream", "mapped", "cpu"))
        modes = [m for m in choice if m != "mapped" or mapped] or list(choice)
    bad = [m for m in modes if m not in OFFLOAD_MODES[1:]]
    if bad or not modes:
        raise ValueError(f"offload mode must be 'stream', 'mapped' or 'cpu', got {(bad or [''])[0]!r}")
    from runtime.formats.arch import get_arch

    supported = get_arch(cfg.arch).offload_modes  # the architecture's capabilities
    if offload_mode is not None and offload_mode not in supported:
        raise ValueError(f"{cfg.arch} models cannot run with offload mode {offload_mode!r} "
                         f"(supported: {', '.join(m for m in supported if m != 'none')})")
    modes = [m for m in modes if m in supported]
    if not modes:
        raise ValueError(f"{cfg.arch} models support none of the offload modes asked for")
    model_max = cfg.max_position_embeddings
    cap = model_max if not ctx_cap else min(ctx_cap, model_max)
    cap = max(CTX_ALIGN, (cap // CTX_ALIGN) * CTX_ALIGN)
    target = min(cap, min_context)
    ws = workspace_bytes(cfg, prefill_chunk, s.largest_matrix_elems)
    costs = offload_costs or OffloadCosts()
    reasons: list[str] = []
    all_layers = list(range(cfg.num_layers))

    if device in ("cpu", "mps") or (device_memory is None and max_vram is None):
        return _plan_host(s, device, cap, kv_dtype, ws, host_memory, prefill_chunk)

    if "mapped" in modes and not mapped:
        raise ValueError("mapped offload needs a CUDA GPU whose Triton kernels read host memory")
    budget = device_memory if device_memory is not None else max_vram
    assert budget is not None
    if max_vram is not None and max_vram < budget:
        budget = max_vram
        reasons.append(f"--max-vram caps device memory at {format_bytes(max_vram)}.")
    margin = max(min_margin_bytes, int(budget * margin_fraction))
    avail = budget - cuda_context_bytes - margin
    reasons.append(
        f"{format_bytes(budget)} budget - {format_bytes(cuda_context_bytes)} CUDA context - "
        f"{format_bytes(margin)} safety margin leaves {format_bytes(max(avail, 0))} for weights, KV cache and buffers.")

    def _host_kv_per_token(pl: _Placement) -> int:
        if pl.mode != "cpu":
            return 0
        return kv_bytes_per_token(cfg, kv_dtype, layers=sum(1 for i in pl.cpu_layers if _layer_is_attention(cfg, i)))

    def evaluate(pl: _Placement, want: int) -> tuple[int, MemoryBreakdown, int, int]:
        br, kvpt, host = _fixed_gpu_bytes(s, pl, kv_dtype, ws)
        ctx = _max_context(avail - br.allocated, kvpt, want)
        if br.weights + _mapped_load_peak(s, pl) > avail:  # a mapped part is built on the GPU first
            ctx = 0
        host_kvpt = _host_kv_per_token(pl)
        if host_memory is not None and host_kvpt:  # CPU-computed layers keep their KV in RAM
            ctx = min(ctx, _max_context(int(host_memory * 0.9) - host, host_kvpt, want))
        return ctx, br, kvpt, host

    # groups of candidate placements, in order of increasing cost; within a group the same bytes
    # leave the GPU and only the offload mode differs
    if host_embedding is None:
        host_embedding = device not in ("cpu", "mps")
    host_embedding = host_embedding and not s.tied
    groups: list[list[_Placement]] = [] if host_embedding else [[_Placement([], True, True, "none")]]
    if not s.tied:
        groups.append([_Placement([], False, True, "none")])
    emb_gpu = s.tied  # tied: the table is the LM head

    def offered(layers: list[int]) -> list[str]:
        # mapping a layer without packed ternary matrices (dense weights) would move nothing
        return [m for m in modes if m != "mapped" or all(s.mapped_layer_bytes(i) > 0 for i in layers)]

    for n in range(1, cfg.num_layers + 1):
        layers = all_layers[cfg.num_layers - n:]
        groups.append([_Placement(layers, emb_gpu, True, m) for m in offered(layers)])
    groups.append([_Placement(all_layers, False, False, m) for m in offered(all_layers)])
    groups = [g for g in groups if g]
    candidates = [c for g in groups for c in g]

    def speed_key(pl: _Placement) -> float:
        nbytes = sum(s.layer_bytes[i] for i in pl.cpu_layers)
        head = 0 if pl.lm_head_gpu else (s.lm_head_bytes or s.embedding_bytes)
        if pl.mode == "cpu":
            return costs.cpu_seconds(nbytes + head)  # one hop for layers and head together
        head_s = costs.mapped_seconds(head) if _head_mapped(s, pl) else costs.cpu_seconds(head) if head else 0.0
        return _layers_seconds(s, costs, pl) + head_s

    # per offload mode, the first (least offload) placement that reaches the target context;
    # then the faster of those under the offload costs (CPU compute frees KV memory too, so it
    # may need fewer CPU layers than streaming, yet still be slower per token)
    rivals: dict[str, _Placement] = {}  # the last search's placement per offload mode (for the reasons)

    def search(want: int) -> _Placement | None:
        found: list[_Placement] = []
        for group in groups:
            fitting = [c for c in group if evaluate(c, want)[0] >= want]
            if not fitting:
                continue
            found += [c for c in fitting if c.mode not in {x.mode for x in found}]
            if {c.mode for c in found} >= set(modes) or found[0].mode == "none":
                break
        rivals.clear()
        rivals.update({c.mode: c for c in found})
        return min(found, key=speed_key) if found else None

    # A smaller prompt chunk needs less prefill activation memory, but it changes the prefill's GEMM
    # shapes and so its rounding: on the H200 the 8B under a 2 GiB cap kept 2 more layers on the GPU
    # with 128-token chunks (35.9 vs 30.8 tok/s) yet its greedy tokens left the full-GPU run's after 8.
    # Output that does not depend on the VRAM cap comes first, so the chunk shrinks only when the
    # default chunk cannot reach the context at all.
    chunks = [prefill_chunk] + [c for c in SMALLER_PREFILL_CHUNKS if c < prefill_chunk]
    default_ws = ws

    def search_chunks(want: int) -> tuple[_Placement | None, int]:
        nonlocal ws
        for ch in chunks:
            ws = workspace_bytes(cfg, ch, s.largest_matrix_elems)
            c = search(want)
            if c is not None:
                return c, ch
        ws = default_ws
        return None, prefill_chunk

    chosen, chunk = search_chunks(target)
    want = target
    while chosen is None and want > CTX_ALIGN:
        # the target context does not fit even with everything offloaded: halve it
        want = max(CTX_ALIGN, (want // 2) // CTX_ALIGN * CTX_ALIGN)
        chosen, chunk = search_chunks(want)
    if chosen is None:
        ws = workspace_bytes(cfg, chunks[-1], s.largest_matrix_elems)  # the least any plan needs
        most = candidates[-1] if candidates else _Placement(all_layers, False, False, "stream")
        br, kvpt, _ = _fixed_gpu_bytes(s, most, kv_dtype, ws)
        raise OutOfMemoryError(
            f"{cfg.arch} model does not fit in {format_bytes(budget)} of device memory even with every layer "
            f"on the CPU: needs {format_bytes(br.allocated + cuda_context_bytes + margin + CTX_ALIGN * kvpt)} "
            f"for {CTX_ALIGN} tokens of context; use --device cpu or a larger --max-vram")
    if want < target:
        reasons.append(f"Even with maximum offload {target} tokens of context do not fit; settled for at least {want}.")
    target = want
    if chunk != prefill_chunk:
        reasons.append(f"Prompts are prefilled in chunks of {chunk} tokens instead of {prefill_chunk} (workspace "
                       f"{format_bytes(ws)} instead of {format_bytes(default_ws)}): the context does not fit otherwise. The "
                       "prompt's sums then round slightly differently, so answers can differ from a run with more memory.")

    ctx, br, kvpt, host = evaluate(chosen, cap)
    br.kv_cache = ctx * kvpt
    br.cuda_context = cuda_context_bytes
    if chosen.mode == "cpu":
        host += ctx * _host_kv_per_token(chosen)
        cpu_set = set(chosen.cpu_layers)
        host += sum(recurrent_state_bytes_per_layer(cfg) for i in cpu_set if not _layer_is_attention(cfg, i))

    weights_total = s.total_bytes
    if not chosen.cpu_layers and chosen.embedding_gpu:
        reasons.append(f"All weights ({format_bytes(weights_total)}) fit on the GPU.")
    if not chosen.embedding_gpu and chosen.lm_head_gpu:
        if host_embedding:
            reasons.append(f"The embedding table ({format_bytes(s.embedding_bytes)}) lives in pinned host memory: the GPU "
                           "reads the one row per token it needs over the bus, at no measured decode cost, and the "
                           "VRAM goes to context instead.")
        else:
            reasons.append(f"The embedding table ({format_bytes(s.embedding_bytes)}) stays on the CPU: decoding gathers "
                           "only one row per token, so it costs almost nothing there.")
    if s.tied and chosen.lm_head_gpu:
        if chosen.cpu_layers:
            reasons.append("Embeddings are tied to the LM head, which is read in full every token, so the table stays on the GPU.")
    if chosen.cpu_layers:
        nbytes = sum(s.layer_bytes[i] for i in chosen.cpu_layers)
        lo, hi = chosen.cpu_layers[0], chosen.cpu_layers[-1]
        reasons.append(
            f"Weights do not fit with {target} tokens of context: layers {lo}-{hi} ({len(chosen.cpu_layers)} of "
            f"{cfg.num_layers}, {format_bytes(nbytes)}) stay in host memory.")
        mbytes = sum(s.mapped_layer_bytes(i) for i in chosen.cpu_layers)
        how = "measured" if costs.measured else "assumed"
        versus = _versus(s, costs, chosen, [rivals.get(m) or m for m in modes if m != chosen.mode])
        layer_s = _layers_seconds(s, costs, chosen)
        if chosen.mode == "stream":
            reasons.append(
                f"They are streamed to the GPU ahead of use through two staging slots ({format_bytes(br.offload_staging)}): "
                f"~{layer_s * 1e3:.1f} ms/token at {costs.h2d_bytes_per_s / 1e9:.0f} GB/s host->device{versus} "
                f"({how} speeds).")
        elif chosen.mode == "mapped":
            reasons.append(
                f"Their packed matrices ({format_bytes(mbytes)}) stay in pinned host memory and the GPU reads them in place "
                f"every token (zero-copy, no staging slots, so that VRAM goes to layers and context): "
                f"~{layer_s * 1e3:.1f} ms/token at {costs.mapped_rate / 1e9:.0f} GB/s{versus} ({how} speeds). "
                "Decoding runs the same GPU kernels, with the launch configs a resident layer would get (timed on a "
                "device copy, not over the bus), and stays one CUDA graph.")
        else:
            reasons.append(
                f"They are computed on the CPU: ~{layer_s * 1e3:.1f} ms/token at {costs.cpu_bytes_per_s / 1e9:.1f} GB/s"
                f"{versus} ({how} speeds); they keep their own KV cache in host RAM.")
    head_mapped = _head_mapped(s, chosen)
    if head_mapped:
        head_bytes = s.lm_head_bytes or s.embedding_bytes
        reasons.append(
            f"The LM head ({format_bytes(head_bytes)}) had to leave the GPU too: it stays in pinned host memory and the "
            f"GPU reads it in place (~{costs.mapped_seconds(head_bytes) * 1e3:.1f} ms/token), so it is still computed on "
            "the GPU.")
    elif not chosen.lm_head_gpu:
        reasons.append("Even the LM head had to stay on the CPU; decoding will be slow.")
    kv_note = f"{kvpt} B/token" + (" (full-attention layers only)" if cfg.layer_types else "")
    if ctx >= cap:
        why = "the model maximum" if cap == model_max else "the requested cap"
        reasons.append(f"Context {ctx} tokens is {why}; KV cache {kv_note} -> {format_bytes(br.kv_cache)}.")
    else:
        reasons.append(f"Context {ctx} tokens is the largest multiple of {CTX_ALIGN} that fits "
                       f"(KV cache {kv_note} -> {format_bytes(br.kv_cache)}; cap {cap}).")
    if br.recurrent_state:
        reasons.append(f"Gated-DeltaNet layers keep {format_bytes(br.recurrent_state)} of fixed recurrent state.")
    offload_s = speed_key(chosen) if chosen.cpu_layers or not chosen.lm_head_gpu else 0.0
    if host_memory is not None and host > host_memory:
        reasons.append(f"Warning: {format_bytes(host)} must live in host RAM but only {format_bytes(host_memory)} is available.")
    return Plan(
        device=device, context_length=ctx, max_context=model_max, gpu_layers=[i for i in all_layers if i not in set(chosen.cpu_layers)],
        cpu_layers=list(chosen.cpu_layers), embedding_device="gpu" if chosen.embedding_gpu or (s.tied and chosen.lm_head_gpu) else "cpu",
        lm_head_device="gpu" if chosen.lm_head_gpu else "cpu", offload_mode=chosen.mode if chosen.cpu_layers else "none",
        kv_dtype=kv_dtype, prefill_chunk=chunk, budget_bytes=budget, predicted=br, host_bytes=host,
        predicted_offload_s_per_token=offload_s, reasons=reasons, lm_head_mapped=head_mapped,
    )


def _plan_host(s: ModelSizes, device: str, cap: int, kv_dtype: str, ws: int, host_memory: int | None,
               prefill_chunk: int) -> Plan:
    """Everything in host memory (CPU device, or MPS unified memory)."""
    cfg = s.config
    kvpt = kv_bytes_per_token(cfg, kv_dtype)
    rec = sum(recurrent_state_bytes_per_layer(cfg) for i in range(cfg.num_layers) if not _layer_is_attention(cfg, i))
    reasons = [f"No GPU budget given: everything runs on the {device.upper()} in host memory."]
    fixed = s.total_bytes + rec + ws
    ctx = cap
    if host_memory is not None:
        avail = int(host_memory * 0.9) - fixed
        ctx = _max_context(avail, kvpt, cap)
        if ctx < CTX_ALIGN:
            raise OutOfMemoryError(
                f"model needs {format_bytes(fixed + CTX_ALIGN * kvpt)} of RAM but only {format_bytes(host_memory)} is available")
        reasons.append(f"{format_bytes(host_memory)} RAM available; keeping 10% free for the system.")
    reasons.append(f"Context {ctx} tokens (KV cache {kvpt} B/token -> {format_bytes(ctx * kvpt)}).")
    br = MemoryBreakdown(weights=s.total_bytes, kv_cache=ctx * kvpt, recurrent_state=rec, workspace=ws)
    return Plan(
        device=device, context_length=ctx, max_context=cfg.max_position_embeddings, gpu_layers=[],
        cpu_layers=list(range(cfg.num_layers)), embedding_device="cpu", lm_head_device="cpu", offload_mode="none",
        kv_dtype=kv_dtype, prefill_chunk=prefill_chunk, budget_bytes=host_memory or 0, predicted=br,
        host_bytes=br.allocated, reasons=reasons,
    )


def fallback_plan(model: ModelData | ModelConfig | ModelSizes, plan: Plan, **kw: Any) -> Plan:
    """The next smaller plan after an out-of-memory error with ``plan``.

    First the context halves (down to 2048 tokens); after that the same budget is planned again
    with 15% of it held back, which moves more onto the host. ``kw`` are the ``plan_memory``
    arguments the first plan was made with (``device``, ``kv_dtype``, costs...). Raises
    :class:`OutOfMemoryError` when nothing smaller exists. The engine calls this, rebuilds, and
    tells the user what changed (the new plan's last reason says it).
    """
    kw = dict(kw)
    kw.pop("ctx_cap", None)
    kw.setdefault("host_embedding", plan.embedding_device == "cpu")  # a table already on the host stays there
    kw.setdefault("kv_dtype", plan.kv_dtype)
    kw.setdefault("device", plan.device)
    kw.pop("max_vram", None)
    if plan.context_length >= 2 * 2048:
        ctx = plan.context_length // 2 // CTX_ALIGN * CTX_ALIGN
        new = plan_memory(model, plan.budget_bytes, ctx_cap=ctx, min_context=min(ctx, 4096), **kw)
        new.reasons.append(f"Out of memory with {plan.context_length} tokens of context: retrying with {new.context_length}.")
        return new
    budget = int(plan.budget_bytes * 0.85)
    new = plan_memory(model, budget, ctx_cap=plan.context_length, min_context=min(plan.context_length, 4096), **kw)
    if new.layers_on_cpu <= plan.layers_on_cpu and new.context_length >= plan.context_length:
        raise OutOfMemoryError(f"out of device memory and no smaller plan exists (context {plan.context_length}, "
                               f"{plan.layers_on_cpu} layers already on the CPU)")
    new.reasons.append(f"Out of memory: planned again for {format_bytes(budget)} (85% of the budget), "
                       f"{new.layers_on_cpu} layers on the CPU.")
    return new


def plan_for_this_machine(model: ModelData | ModelConfig | ModelSizes, *, device: str = "auto",
                          max_vram: int | None = None, gpu_memory: int | None = None, **kw: Any) -> Plan:
    """Plan against the real hardware (or a hypothetical ``gpu_memory`` card); what the CLI/GUI call."""
    from runtime import devices

    if gpu_memory is not None:  # a card we cannot see: assumed able to run the Triton kernels (mapped too)
        return plan_memory(model, gpu_memory, device="hypothetical", max_vram=max_vram, **kw)
    rep = devices.detect()
    if device == "auto":
        device = rep.best
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        gpu = next((g for g in rep.gpus if g.index == idx), None)
        if gpu is None:
            raise OutOfMemoryError(f"no CUDA device {device} on this machine")
        usable = gpu.free_bytes + _own_cuda_usage(idx)
        # --max-vram emulates a smaller card: charge that card's typical context, not this one's
        kw.setdefault("cuda_context_bytes", DEFAULT_CUDA_CONTEXT_BYTES if max_vram is not None
                      else cuda_context_estimate(gpu.multiprocessors))
        reads_host = devices.triton_supported(gpu.capability)  # Triton kernels read pinned host memory
        kw.setdefault("host_embedding", reads_host)  # the GPU gathers host rows
        kw.setdefault("mapped", reads_host)  # ... and reads mapped layers' matrices
        return plan_memory(model, usable, device=f"cuda:{idx}", max_vram=max_vram,
                           host_memory=rep.ram_available_bytes, **kw)
    return plan_memory(model, None, device=device if device != "mps" else "mps", host_memory=rep.ram_available_bytes, **kw)


def cuda_context_estimate(multiprocessors: int) -> int:
    """Non-torch device memory of a real card: per-SM scaling of the H200 measurement, >= 500 MiB."""
    return max(DEFAULT_CUDA_CONTEXT_BYTES, multiprocessors * CONTEXT_BYTES_PER_SM)


def _own_cuda_usage(index: int) -> int:
    """Memory this process already holds on the device (so a re-plan can count it as available)."""
    try:
        import torch

        if torch.cuda.is_initialized():
            return int(torch.cuda.memory_reserved(index)) + DEFAULT_CUDA_CONTEXT_BYTES
    except Exception:
        pass
    return 0


GIB = GiB  # re-export for callers formatting sizes
