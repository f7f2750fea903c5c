"""Running a model whose weights do not all fit on the GPU: layers kept in host memory.

Three ways to run a layer that lives on the host (the planner picks one per machine, see
:mod:`runtime.planner`):

* **stream** (:class:`LayerStreamer`): the layer's prepared GPU tensors (whatever the kernel
  backend made of them) are moved into one pinned host buffer per layer. Two GPU *staging slots*
  (each the size of the largest streamed layer) are reused in turn: streamed layer ``j`` runs from
  slot ``j % 2``; while it computes, the copy of layer ``j + 1`` into the other slot is already in
  flight on a side stream, and as soon as layer ``j`` is done its slot receives layer ``j + 2``.
  The layer's tensors are rebound once to fixed views into its slot, so addresses never change and
  the whole step, copies included, can be captured in a CUDA graph. Cost per token: streamed
  bytes / host->device bandwidth (overlapped with the GPU-resident layers' compute).
* **mapped** (:func:`map_linears_to_host`): the layer is built on the GPU as usual, then the packed
  matrices of its Triton ternary linears move to pinned host memory, which is mapped into the
  GPU's address space (UVA); the same Triton kernels read them there over the bus. Everything else
  (norms, dense projections, KV cache, recurrent state) stays on the GPU. No staging slots, the
  block is not wrapped (fused decode steps see an ordinary block), the step stays CUDA-graph
  capturable, and the arithmetic is the resident kernels' own, so the output equals the full-GPU
  run's. Cost per token: layer bytes / mapped read bandwidth (not overlapped: the kernels wait on
  the bus). The LM head of a mapped plan is mapped the same way instead of computed on the CPU.
* **cpu** (:class:`HostComputedLayer`): the layer is built with the CPU backend and runs on the
  CPU; the hidden state crosses the bus twice per token and the layer's KV cache lives in host
  RAM. Cost per token: layer bytes / CPU matvec throughput. Not capturable in a CUDA graph.

The embedding table can also stay on the host: :class:`MappedHostEmbedding` keeps it in pinned
memory that the GPU reads itself (graph-capturable), :class:`HostEmbedding` gathers on the CPU (the
fallback). A decode step gathers one row. Every wrapper keeps the wrapped module's call signature,
so the model's forward is unchanged.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runtime.kernels.ternary_embedding import DenseEmbedding, TernaryEmbedding
from runtime.planner import OffloadCosts, Plan

_ALIGN = 256
DEFAULT_KEEP_ON_DEVICE = ("cache", "state")  # tensor names that must stay on the GPU (KV / recurrent)


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(_map_tensors(o, fn) for o in obj)
    if isinstance(obj, list):
        return [_map_tensors(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


# ----------------------------------------------------------------------------------------------
# Streaming
# ----------------------------------------------------------------------------------------------


@dataclass
class _Binding:
    module: torch.nn.Module
    attr: str
    kind: str  # "buffer" | "param" | "attr"
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_key: int
    elem_offset: int  # storage_offset() in elements


def same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are the same device here (an unindexed CUDA device means the current
    one); ``!=`` on torch devices says otherwise, which once made offload silently stream nothing."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or (a.index is not None and b.index is not None):
        return a.index == b.index
    cur = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (cur if a.index is None else a.index) == (cur if b.index is None else b.index)


def _collect_bindings(block: torch.nn.Module, device: torch.device,
                      keep: tuple[str, ...]) -> list[_Binding]:
    """Every tensor of ``block`` on ``device`` (buffers, parameters, plain tensor attributes)."""
    out = []
    for mname, mod in block.named_modules():
        items: list[tuple[str, str, torch.Tensor]] = []
        items += [(n, "buffer", t) for n, t in mod._buffers.items() if t is not None]
        items += [(n, "param", t) for n, t in mod._parameters.items() if t is not None]
        items += [(n, "attr", t) for n, t in vars(mod).items() if isinstance(t, torch.Tensor)]
        for name, kind, t in items:
            full = f"{mname}.{name}" if mname else name
            if any(k in full for k in keep) or not same_device(t.device, device):
                continue
            out.append(_Binding(mod, name, kind, t.dtype, tuple(t.shape), tuple(t.stride()),
                                t.untyped_storage().data_ptr(), t.storage_offset()))
    return out


def _rebind(b: _Binding, base: torch.Tensor, byte_offset: int) -> None:
    """Point binding ``b`` at storage ``base`` (uint8) starting at ``byte_offset``."""
    el = torch.empty((), dtype=b.dtype).element_size()
    typed = base.view(b.dtype)  # base is aligned and a whole number of elements long
    view = typed.as_strided(b.shape, b.stride, typed.storage_offset() + byte_offset // el + b.elem_offset)
    if b.kind == "buffer":
        b.module._buffers[b.attr] = view
    elif b.kind == "param":
        b.module._parameters[b.attr] = torch.nn.Parameter(view, requires_grad=False)
    else:
        object.__setattr__(b.module, b.attr, view)


class StreamedLayer(torch.nn.Module):
    """A layer whose weights live in pinned host memory and are copied to a GPU slot before use."""

    def __init__(self, block: torch.nn.Module, streamer: LayerStreamer, index: int) -> None:
        super().__init__()
        self.block = block
        self.index = index
        object.__setattr__(self, "_streamer", streamer)  # not a submodule (no recursion in .to())

    def before(self) -> None:
        """Wait until this layer's weights are in its staging slot (and start fetching the next)."""
        self._streamer.before(self.index)  # type: ignore[operator]

    def after(self) -> None:
        """Mark this layer's slot free for the layer after next (call when its kernels are queued)."""
        self._streamer.after(self.index)  # type: ignore[operator]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.before()
        out = self.block(*args, **kwargs)
        self.after()
        return out


def unwrap_streamed(layer: torch.nn.Module) -> tuple[torch.nn.Module, StreamedLayer | None]:
    """A model layer's block and, when the layer is streamed, its :class:`StreamedLayer` (else ``None``)."""
    return (layer.block, layer) if isinstance(layer, StreamedLayer) else (layer, None)


class LayerStreamer:
    """Owns the pinned host copies, the two GPU staging slots, the copy stream and its events.

    Use: ``wrapped = streamer.adopt(block)`` for each streamed layer *in execution order* (the block
    must already be prepared on ``device``), then ``streamer.finish()`` once. Tensors whose name
    contains one of ``keep`` (KV cache, recurrent state) are left where they are.
    """

    def __init__(self, device: torch.device | str, keep: tuple[str, ...] = DEFAULT_KEEP_ON_DEVICE) -> None:
        self.device = torch.device(device)
        self.keep = keep
        self.layers: list[StreamedLayer] = []
        self._host: list[torch.Tensor] = []  # one pinned uint8 buffer per layer
        self._layout: list[list[tuple[_Binding, int]]] = []  # per layer: (binding, byte offset)
        self._bytes: list[int] = []
        self.slots: list[torch.Tensor] = []
        self.resident = False  # <= 2 streamed layers: each gets its own slot, copied once
        self.finished = False
        cuda = self.device.type == "cuda"
        self._copy_stream = torch.cuda.Stream(self.device) if cuda else None
        self._ready: list[Any] = []
        self._free: list[Any] = []
        self._issued: set[int] = set()

    @property
    def host_bytes(self) -> int:
        return sum(self._bytes)

    @property
    def slot_bytes(self) -> int:
        return sum(s.numel() for s in self.slots)

    def adopt(self, block: torch.nn.Module) -> StreamedLayer:
        """Move ``block``'s device tensors into a pinned host buffer; return the streaming wrapper."""
        if self.finished:
            raise RuntimeError("LayerStreamer.adopt after finish()")
        bindings = _collect_bindings(block, self.device, self.keep)
        storages: dict[int, tuple[int, torch.Tensor]] = {}  # key -> (byte offset, source bytes)
        total = 0
        sources: dict[int, torch.Tensor] = {}
        for b in bindings:
            if b.storage_key in sources:
                continue
            t = _lookup(b)
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            sources[b.storage_key] = raw
            storages[b.storage_key] = (total, raw)
            total += (raw.numel() + _ALIGN - 1) // _ALIGN * _ALIGN
        host = torch.empty(max(total, _ALIGN), dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        for off, raw in storages.values():
            host[off:off + raw.numel()].copy_(raw)
        layout = [(b, storages[b.storage_key][0]) for b in bindings]
        for b, off in layout:  # point the block at host memory until finish() gives it a slot
            _rebind(b, host, off)
        del sources, storages
        self._host.append(host)
        self._layout.append(layout)
        self._bytes.append(total)
        wrapped = StreamedLayer(block, self, len(self.layers))
        self.layers.append(wrapped)
        return wrapped

    def finish(self) -> None:
        """Allocate the staging slots and bind every layer to its slot."""
        n = len(self.layers)
        if n == 0 or self.finished:
            self.finished = True
            return
        self.resident = n <= 2
        if self.resident:
            self.slots = [torch.empty(b, dtype=torch.uint8, device=self.device) for b in self._bytes]
        else:
            size = max(self._bytes)
            self.slots = [torch.empty(size, dtype=torch.uint8, device=self.device) for _ in range(2)]
        for j, layout in enumerate(self._layout):
            slot = self.slots[j] if self.resident else self.slots[j % 2]
            for b, off in layout:
                _rebind(b, slot, off)
        if self.resident:
            for j in range(n):
                self.slots[j][: self._bytes[j]].copy_(self._host[j][: self._bytes[j]])
        if self._copy_stream is not None:
            self._ready = [torch.cuda.Event() for _ in range(n)]
            self._free = [torch.cuda.Event() for _ in range(2)]
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # return the freed per-layer GPU copies to the driver
        self.finished = True

    def _slot(self, j: int) -> torch.Tensor:
        return self.slots[j % 2]

    def _issue(self, j: int, wait_free: bool) -> None:
        if j in self._issued or j >= len(self.layers):
            return
        self._issued.add(j)
        nb = self._bytes[j]
        if self._copy_stream is None:  # CPU "device" (tests): a plain synchronous copy
            self._slot(j)[:nb].copy_(self._host[j][:nb])
            return
        with torch.cuda.stream(self._copy_stream):
            if wait_free:
                self._copy_stream.wait_event(self._free[j % 2])
            self._slot(j)[:nb].copy_(self._host[j][:nb], non_blocking=True)
            self._ready[j].record(self._copy_stream)

    def before(self, j: int) -> None:
        if not self.finished:
            raise RuntimeError("LayerStreamer.finish() was not called after adopting layers")
        if self.resident:
            return
        cur = torch.cuda.current_stream(self.device) if self._copy_stream is not None else None
        if j == 0 or j not in self._issued:
            # start of a step: everything before ran on the current stream, so forking the copy
            # stream from it orders the copies after the previous use of both slots (and is legal
            # inside CUDA-graph capture, unlike waiting on an event recorded outside it)
            if self._copy_stream is not None:
                self._copy_stream.wait_stream(cur)
            self._issue(j, wait_free=False)
            self._issue(j + 1, wait_free=False)
        if cur is not None:
            cur.wait_event(self._ready[j])

    def after(self, j: int) -> None:
        if self.resident:
            return
        n = len(self.layers)
        if self._copy_stream is not None:
            self._free[j % 2].record(torch.cuda.current_stream(self.device))
        self._issue(j + 2, wait_free=True)
        if j == n - 1:
            if self._copy_stream is not None:  # join the copy stream back (graph capture needs it)
                torch.cuda.current_stream(self.device).wait_stream(self._copy_stream)
            self._issued.clear()


def _lookup(b: _Binding) -> torch.Tensor:
    if b.kind == "buffer":
        return b.module._buffers[b.attr]
    if b.kind == "param":
        return b.module._parameters[b.attr]
    return getattr(b.module, b.attr)


# ----------------------------------------------------------------------------------------------
# Mapping: GPU kernels reading pinned host memory in place
# ----------------------------------------------------------------------------------------------

MAPPED_BUFFERS = ("codes", "scales")  # the packed matrix of a Triton ternary linear


def _triton_linear_class() -> type | None:
    try:
        from runtime.kernels.triton.backend import TritonLinear
    except ImportError:  # no Triton: nothing can be mapped
        return None
    return TritonLinear


def map_linears_to_host(module: torch.nn.Module) -> int:
    """Move the packed matrices of every Triton ternary linear in ``module`` (row-fused q/k/v and
    gate/up included) to pinned host memory; return the bytes moved off the GPU.

    Why: pinned host memory is mapped into the GPU's address space, so the very same Triton
    kernels read those bytes over the bus (as :class:`MappedHostEmbedding` does for rows): the
    module runs unchanged, needs no staging copy, stays CUDA-graph capturable, and rounds exactly
    like its resident twin. Only ``codes``/``scales`` of Triton linears move: other tensors (norm
    weights, dense projections, conv weights, caches) are read by ops that need device memory and
    stay where they are. Call ``torch.cuda.empty_cache()`` afterwards to return the freed VRAM.
    """
    cls = _triton_linear_class()
    if cls is None:
        return 0
    moved = 0
    for m in module.modules():
        if not isinstance(m, cls):
            continue
        for name in MAPPED_BUFFERS:
            t = m._buffers.get(name)
            if t is None or t.device.type != "cuda":
                continue
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t)  # the kernels require contiguous buffers, which TritonLinear already made
            m._buffers[name] = host
            moved += t.numel() * t.element_size()
    return moved


def host_mapped_tensors(model: torch.nn.Module) -> set[int]:
    """``id()`` of every tensor of ``model`` that lives in pinned host memory for GPU kernels to
    read in place (a mapped embedding table, mapped linears): host-resident, yet graph-safe."""
    cls = _triton_linear_class()
    out: set[int] = set()
    for m in model.modules():
        if isinstance(m, MappedHostEmbedding):
            out.update(id(t) for t in m.buffers())
        elif cls is not None and isinstance(m, cls):
            out.update(id(t) for n, t in m._buffers.items()
                       if n in MAPPED_BUFFERS and t is not None and t.device.type == "cpu" and t.is_pinned())
    return out


# ----------------------------------------------------------------------------------------------
# Computing on the CPU
# ----------------------------------------------------------------------------------------------


class _HostLayerCache:
    """KV cache of one CPU-computed layer, with the model cache's ``update`` signature."""

    def __init__(self, kv_heads: int, max_positions: int, head_dim: int, dtype: torch.dtype) -> None:
        self.max_positions = max_positions
        self.k = torch.zeros(kv_heads, max_positions, head_dim, dtype=dtype)
        self.v = torch.zeros(kv_heads, max_positions, head_dim, dtype=dtype)

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               kv_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(1, input_pos, k.transpose(0, 1).to(self.k.dtype))
        self.v.index_copy_(1, input_pos, v.transpose(0, 1).to(self.v.dtype))
        if kv_len is not None:
            return self.k[:, :kv_len], self.v[:, :kv_len]
        return self.k, self.v


class HostComputedLayer(torch.nn.Module):
    """Runs a CPU-built layer for a model that otherwise lives on ``device``.

    Tensor arguments are copied to the CPU (floating ones in the layer's own dtype), a cache-like
    argument (anything with ``update`` and a ``k`` tensor ``[layers, heads, positions, dim]``) is
    replaced by this layer's own host KV cache, and tensor results are copied back to ``device``.
    """

    def __init__(self, block: torch.nn.Module, device: torch.device | str,
                 compute_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.block = block
        self.device = torch.device(device)
        floats = [t for t in list(block.buffers()) + list(block.parameters()) if t.is_floating_point()]
        self.compute_dtype = compute_dtype or (floats[0].dtype if floats else torch.float32)
        self._cache: _HostLayerCache | None = None

    def _host_cache(self, cache: Any) -> _HostLayerCache:
        if self._cache is None or self._cache.max_positions != cache.k.shape[2]:
            _, heads, positions, dim = cache.k.shape
            self._cache = _HostLayerCache(heads, positions, dim, self.compute_dtype)
        return self._cache

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out_dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)

        def to_host(t: torch.Tensor) -> torch.Tensor:
            return t.to("cpu", dtype=self.compute_dtype) if t.is_floating_point() else t.to("cpu")

        def swap(a: Any) -> Any:
            if hasattr(a, "update") and isinstance(getattr(a, "k", None), torch.Tensor):
                return self._host_cache(a)
            return _map_tensors(a, to_host)

        out = self.block(*[swap(a) for a in args], **{k: swap(v) for k, v in kwargs.items()})
        return _map_tensors(out, lambda t: t.to(self.device, dtype=out_dtype if t.is_floating_point() and out_dtype else t.dtype))


class HostEmbedding(torch.nn.Module):
    """An embedding kept in host memory: gather (and dequantize) on the CPU, send the rows over."""

    def __init__(self, embed: torch.nn.Module, device: torch.device | str) -> None:
        super().__init__()
        self.inner = embed
        self.device = torch.device(device)

    def forward(self, ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = self.inner(ids.to("cpu"), *args, **kwargs)
        return out.to(self.device, non_blocking=True)


class MappedHostEmbedding(HostEmbedding):
    """An embedding kept in *pinned* host memory and gathered by the GPU itself (zero-copy, see
    :mod:`runtime.kernels.triton.gather`): no host sync per token, so decode stays graph-captured,
    and the table still costs no VRAM. Packed ternary (t2/t3) and dense tables."""

    def __init__(self, embed: torch.nn.Module, device: torch.device | str) -> None:
        super().__init__(embed, device)
        for name, buf in list(embed._buffers.items()):
            if name in ("codes", "scales", "weight") and buf is not None:
                embed._buffers[name] = buf.to("cpu").pin_memory()

    @staticmethod
    def supports(embed: torch.nn.Module, device: torch.device | str) -> bool:
        if torch.device(device).type != "cuda":
            return False
        try:
            import runtime.kernels.triton.gather  # noqa: F401
        except ImportError:
            return False
        return isinstance(embed, DenseEmbedding) or (isinstance(embed, TernaryEmbedding)
                                                     and embed.encoding in ("t2", "t3"))

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # type: ignore[override]
        from runtime.kernels.triton.gather import gather_rows

        ids = ids.to(self.device).reshape(-1)
        e = self.inner
        if isinstance(e, DenseEmbedding):
            return gather_rows(ids, dtype, dense=e.weight)
        return gather_rows(ids, dtype, codes=e.codes, scales=e.scales, group_size=e.group_size, encoding=e.encoding)


# ----------------------------------------------------------------------------------------------
# Applying a plan
# ----------------------------------------------------------------------------------------------


class Placement:
    """Turns a :class:`~runtime.planner.Plan` into per-layer devices and wrappers for model builders.

    Call in build order: ``layer_device(i)`` to know where to prepare layer ``i``,
    ``wrap_layer(i, block)`` right after building it, ``embedding_device()`` /
    ``wrap_embedding(module)`` for the table, ``lm_head_device()`` / ``wrap_lm_head(module)`` for
    the head, and ``finish()`` once at the end.
    """

    def __init__(self, plan: Plan, device: torch.device | str) -> None:
        self.plan = plan
        self.device = torch.device(device)
        self.cpu_layers = set(plan.cpu_layers) if plan.offload_mode in ("stream", "mapped", "cpu") else set()
        self.mode = plan.offload_mode
        self.streamer = LayerStreamer(self.device) if self.mode == "stream" else None
        self.embedding_mapped = False  # the host-side table is read by the GPU itself (graph-safe)
        # a mapped LM head is built on the GPU and computed there (its matrix read from host memory)
        self.lm_head_mapped = bool(getattr(plan, "lm_head_mapped", False))
        self.mapped_bytes = 0  # moved to pinned host memory by map_linears_to_host

    @property
    def graph_safe(self) -> bool:
        """Whether a decode step can be captured in a CUDA graph with this placement."""
        head_ok = self.plan.lm_head_device != "cpu" or self.lm_head_mapped
        return self.mode != "cpu" and head_ok and (self.plan.embedding_device != "cpu" or self.embedding_mapped)

    def layer_device(self, i: int) -> torch.device:
        return torch.device("cpu") if (self.mode == "cpu" and i in self.cpu_layers) else self.device

    def embedding_device(self) -> torch.device:
        return torch.device("cpu") if self.plan.embedding_device == "cpu" else self.device

    def lm_head_device(self) -> torch.device:
        return torch.device("cpu") if self.plan.lm_head_device == "cpu" and not self.lm_head_mapped else self.device

    def wrap_layer(self, i: int, block: torch.nn.Module) -> torch.nn.Module:
        if i not in self.cpu_layers:
            return block
        if self.mode == "cpu":
            return HostComputedLayer(block, self.device)
        if self.mode == "mapped":  # the block itself, its matrices now read from host memory
            self.mapped_bytes += map_linears_to_host(block)
            return block
        assert self.streamer is not None
        return self.streamer.adopt(block)

    def wrap_embedding(self, embed: torch.nn.Module) -> torch.nn.Module:
        if self.plan.embedding_device != "cpu":
            return embed
        if MappedHostEmbedding.supports(embed, self.device):
            self.embedding_mapped = True
            return MappedHostEmbedding(embed, self.device)
        return HostEmbedding(embed, self.device)

    def wrap_lm_head(self, head: torch.nn.Module) -> torch.nn.Module:
        if self.lm_head_mapped:
            self.mapped_bytes += map_linears_to_host(head)
            return head
        return HostComputedLayer(head, self.device, torch.float32) if self.plan.lm_head_device == "cpu" else head

    def finish(self) -> None:
        if self.streamer is not None:
            self.streamer.finish()
        if self.mapped_bytes and self.device.type == "cuda":
            torch.cuda.empty_cache()  # return the mapped matrices' former GPU copies to the driver


# ----------------------------------------------------------------------------------------------
# Measuring what decides between the three modes
# ----------------------------------------------------------------------------------------------


def measure_offload_costs(device: torch.device | str = "cuda", rows: int = 4096, cols: int = 4096,
                          h2d_bytes: int = 256 * 1024 * 1024, repeats: int = 5,
                          mapped_bytes: int = 128 * 1024 * 1024) -> OffloadCosts:
    """Measure pinned host->device bandwidth, CPU ternary matvec throughput, one activation hop and
    (CUDA with Triton) the mapped read bandwidth.

    The CPU figure uses the fastest CPU linear backend on a random ternary ``rows x cols`` matrix
    (packed bytes processed per second, batch 1), which is what a CPU-computed layer costs; the
    mapped figure is :func:`measure_mapped_read` over ``mapped_bytes`` of packed matrix.
    """
    from runtime.kernels.linear import prepare_linear
    from runtime.synthetic import random_ternary

    device = torch.device(device)
    t = random_ternary("offload-probe", (rows, cols), seed=0)
    lin = prepare_linear(t, "cpu")
    x = torch.randn(1, cols)
    lin(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lin(x)
        times.append(time.perf_counter() - t0)
    cpu_bps = t.nbytes / statistics.median(times)
    if device.type != "cuda":
        return OffloadCosts(h2d_bytes_per_s=float("inf"), cpu_bytes_per_s=cpu_bps, hop_s=0.0, measured=True,
                            mapped_bytes_per_s=float("inf"))
    host = torch.empty(h2d_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(h2d_bytes, dtype=torch.uint8, device=device)
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    h2d = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dev.copy_(host, non_blocking=True)
        b.record()
        b.synchronize()
        h2d.append(a.elapsed_time(b) / 1e3)
    hx = torch.randn(1, cols, device=device)
    hops = []
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        hx.to("cpu").to(device)
        torch.cuda.synchronize(device)
        hops.append(time.perf_counter() - t0)
    del host, dev
    try:
        mapped = measure_mapped_read(device, mapped_bytes, repeats)
    except ImportError:  # no Triton: no mapped mode either; keep the assumed figure
        mapped = None
    return OffloadCosts(h2d_bytes_per_s=h2d_bytes / statistics.median(h2d), cpu_bytes_per_s=cpu_bps,
                        hop_s=statistics.median(hops), measured=True, mapped_bytes_per_s=mapped)


def measure_mapped_read(device: torch.device | str = "cuda", nbytes: int = 128 * 1024 * 1024,
                        repeats: int = 5, cols: int = 4096, group_size: int = 128) -> float:
    """Packed weight bytes per second a decode mat-vec gets from a t2 matrix in pinned host memory.

    A random ``[~nbytes / row, cols]`` matrix (LM-head-like) is mapped and multiplied by one bf16
    row through :func:`runtime.kernels.triton.matvec.ternary_matvec`, with the launch config a
    mapped layer gets, timed with CUDA events: exactly what a mapped layer costs per byte.
    """
    from runtime.kernels.triton.matvec import ternary_matvec

    device = torch.device(device)
    row_bytes = cols // 4 + (cols // group_size) * 2
    rows = max(1, nbytes // row_bytes)
    codes = torch.empty(rows, cols // 4, dtype=torch.uint8, pin_memory=True)
    codes.random_(0, 256)  # any bit pattern times the same
    scales = torch.empty(rows, cols // group_size, dtype=torch.float16, pin_memory=True).fill_(0.01)
    x = torch.randn(1, cols, device=device, dtype=torch.bfloat16)
    ternary_matvec(x, codes, scales, group_size)  # compile outside the timing
    torch.cuda.synchronize(device)
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        ternary_matvec(x, codes, scales, group_size)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return (codes.numel() + scales.numel() * 2) / statistics.median(times)
