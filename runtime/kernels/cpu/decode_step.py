"""One CPU decode token of a dense Qwen3 / Llama model in a single C call (``ternary_decode.h``); a
prompt chunk through the same C layers (:meth:`CpuStep.prompt`).

Why: on the CPU a decoded token of the 1.7B ran ~400 small torch ops (norms, RoPE, attention, SiLU,
residuals, the module tree) around its mat-vecs, and dispatching them cost about as much as the
mat-vecs. The C step runs every layer with the same ternary kernels the model's layers call (same
activation mode per layer), reads the model's RoPE tables and writes the model's own KV cache at
``pos`` exactly as ``KVCache.update`` does, so a prefill through ``model.forward`` and decode through
this step share one cache. The embedding lookup and the LM head are the model's own modules.

:func:`cpu_decode_step` returns None for anything it does not run (other architectures, dense or
non-CPU-kernel matrices, offloaded layers, GPU tensors, non-fp32 activations); the caller then uses
``model.forward``.
"""

from __future__ import annotations

import ctypes

import torch

from runtime.kernels.cpu.ternary import CpuTernaryLinear, kernel_threads

_ARCHES = ("qwen3", "llama")
_KV_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int8: 3}
_MAX_HEAD_DIM = 512  # DS_MAX_HEAD_DIM in ternary_decode.h

_p, _i64 = ctypes.c_void_p, ctypes.c_int64


class _Lin(ctypes.Structure):
    _fields_ = [("words", _p), ("scales", _p), ("N", _i64), ("K", _i64), ("G", _i64), ("int8", _i64)]


class _Layer(ctypes.Structure):
    _fields_ = [(n, _Lin) for n in ("q", "k", "v", "o", "gate", "up", "down")] + [
        (n, _p) for n in ("in_norm", "post_norm", "q_norm", "k_norm", "kc", "vc", "ks", "vs")]


class _Model(ctypes.Structure):
    _fields_ = [(n, _i64) for n in ("n_layers", "E", "H", "Hkv", "D", "I", "P", "kv_dtype")] + [
        ("eps", ctypes.c_float), ("cos", _p), ("sin", _p), ("final_norm", _p), ("layers", _p), ("scratch", _p)]


def _lin(m: torch.nn.Module | None) -> _Lin | None:
    """The C view of a CpuTernaryLinear; None for anything else (dense, other backends, wrappers)."""
    if not isinstance(m, CpuTernaryLinear) or m.codes.device.type != "cpu":
        return None
    return _Lin(m.codes.data_ptr(), m.scales.data_ptr(), m.out_features, m.in_features, m.group_size,
                1 if m._int8 else 0)


def _split(mod: torch.nn.Module, n: int) -> list[_Lin] | None:
    """``n`` slots for a FusedOrSplit (q/k/v or gate/up): its parts, or its fused matrix then empties."""
    if mod.fused is not None:
        lin = _lin(mod.fused)
        return None if lin is None else [lin] + [_Lin(None, None, 0, 0, 0, 0) for _ in range(n - 1)]
    if len(mod.parts) != n:
        return None
    lins = [_lin(p) for p in mod.parts]
    return None if any(x is None for x in lins) else lins  # type: ignore[return-value]


def _f32(t: object, numel: int) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.is_cpu and t.is_contiguous() \
        and t.numel() == numel


class CpuStep:
    """The per-model state of the C step: the structs (rebuilt when the cache or RoPE tables move)."""

    def __init__(self, model: torch.nn.Module, lib: ctypes.CDLL) -> None:
        self.model, self.lib = model, lib
        self.layers_src = list(model.layers)
        self._bound: tuple[int, ...] = ()
        self.x = torch.empty(1, model.config.hidden_size, dtype=torch.float32)
        self.out = torch.empty(1, model.config.hidden_size, dtype=torch.float32)

    def bind(self) -> _Model | None:
        """(Re)build the C description when the cache or RoPE buffers changed (``setup_cache``)."""
        m, c = self.model, self.model.config
        cache, rope = m.cache, m.rope
        key = (cache.k.data_ptr(), rope.cos.data_ptr(), cache.max_positions)
        if key == self._bound:
            return self.cm
        kind = _KV_KINDS.get(cache.k.dtype)
        E, H, Hkv, D, P = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, cache.max_positions
        if kind is None or not cache.k.is_cpu or not cache.k.is_contiguous() or not cache.v.is_contiguous() \
                or tuple(cache.k.shape) != (c.num_layers, Hkv, P, D) \
                or not _f32(rope.cos, P * D) or not _f32(rope.sin, P * D):
            return None
        if kind == 3 and not (_f32(cache.k_scale, c.num_layers * Hkv * P) and _f32(cache.v_scale,
                                                                                   c.num_layers * Hkv * P)):
            return None
        layers = (_Layer * c.num_layers)()
        inter = None
        for i, blk in enumerate(self.layers_src):
            qkv, gu = _split(blk.qkv, 3), _split(blk.gate_up, 2)
            o, down = _lin(blk.o_proj), _lin(blk.down_proj)
            if qkv is None or gu is None or o is None or down is None:
                return None
            inter = down.K
            if sum(x.N for x in qkv) != H * D + 2 * Hkv * D or sum(x.N for x in gu) != 2 * inter \
                    or o.N != E or o.K != H * D or down.N != E:
                return None
            norms = [blk.input_norm, blk.post_norm]
            if blk.qk_norm:
                norms += [blk.q_norm, blk.k_norm]
            if not all(_f32(t, E) for t in norms[:2]) or not all(_f32(t, D) for t in norms[2:]):
                return None
            ks = cache.k_scale[i].data_ptr() if kind == 3 else None
            vs = cache.v_scale[i].data_ptr() if kind == 3 else None
            layers[i] = _Layer(*qkv, o, *gu, down, blk.input_norm.data_ptr(), blk.post_norm.data_ptr(),
                               blk.q_norm.data_ptr() if blk.qk_norm else None,
                               blk.k_norm.data_ptr() if blk.qk_norm else None,
                               cache.k[i].data_ptr(), cache.v[i].data_ptr(), ks, vs)
        if inter is None or not _f32(m.final_norm, E):
            return None
        floats = int(self.lib.ds_scratch_floats(E, H, Hkv, D, inter, P))
        self.scratch = torch.empty(floats + 16, dtype=torch.float32)
        base = self.scratch.data_ptr()
        aligned = (base + 63) // 64 * 64
        self.layers_c = layers  # kept alive: the C struct points into it
        self.cm = _Model(c.num_layers, E, H, Hkv, D, inter, P, kind, float(c.rms_norm_eps),
                         rope.cos.data_ptr(), rope.sin.data_ptr(), m.final_norm.data_ptr(),
                         ctypes.addressof(layers), aligned)
        self.cm_ref = ctypes.byref(self.cm)
        self._bound = key
        return self.cm

    def _first_position(self, positions: torch.Tensor) -> int:
        """Bind (see :meth:`bind`) and check ``positions``: consecutive, inside the cache; the first one."""
        if self.bind() is None:
            raise RuntimeError("the model's KV cache or RoPE tables changed to a layout the CPU decode step "
                               "cannot run")
        flat = positions.reshape(-1).cpu()
        pos, t, last = int(flat[0]), flat.numel(), self.model.cache.max_positions - 1
        if t > 1 and not torch.equal(flat, torch.arange(pos, pos + t)):
            raise ValueError("the CPU prompt step takes consecutive positions")
        if pos < 0 or pos + t - 1 > last:
            where = f"position {pos} is" if t == 1 else f"positions {pos}..{pos + t - 1} are"
            raise IndexError(f"{where} outside the KV cache (0..{last})")
        return pos

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if tokens.numel() != 1 or positions.numel() != 1:
            raise ValueError(f"the CPU decode step takes one token, got {tokens.numel()} tokens and "
                             f"{positions.numel()} positions")
        pos = self._first_position(positions)
        emb = self.model.embed(tokens.reshape(1), torch.float32)
        self.x.copy_(emb.reshape(1, -1))
        self.lib.ds_layers(self.cm_ref, self.x.data_ptr(), self.out.data_ptr(), pos, kernel_threads())
        return self.model.lm_head(self.out).reshape(-1).to(torch.float32)

    def prompt(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """A prompt chunk: every token through every layer in C (``ds_prompt``), K/V into the cache;
        the logits of the LAST token ``[V]`` (what a prefill needs; the others are never computed)."""
        t = tokens.numel()
        if t < 1 or positions.numel() != t:
            raise ValueError(f"the CPU prompt step takes one position per token, got {t} tokens and "
                             f"{positions.numel()} positions")
        pos = self._first_position(positions)
        x = self.model.embed(tokens.reshape(t), torch.float32).reshape(t, -1).contiguous()
        if self.lib.ds_prompt(self.cm_ref, x.data_ptr(), self.out.data_ptr(), pos, t, kernel_threads()) != 0:
            raise MemoryError(f"not enough memory for a {t}-token prompt chunk on the CPU")
        return self.model.lm_head(self.out).reshape(-1).to(torch.float32)


def cpu_decode_step(model: torch.nn.Module) -> CpuStep | None:
    """A :class:`CpuStep`: called as ``(tokens [1] long, positions [1] long) -> logits [V] fp32`` it runs
    one decode token of ``model`` in C (``.prompt`` runs a prompt chunk) and writes its K/V into
    ``model.cache`` as ``model.forward`` would; None
    when the model is not a dense Qwen3 / Llama on the CPU whose matrices all use the C kernel."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "arch", None) not in _ARCHES or getattr(config, "hadamard", None):
        return None
    if getattr(model, "dtype", None) != torch.float32 or getattr(model, "lm_head", None) is None:
        return None
    dev = getattr(model, "device", None)
    if dev is None or torch.device(dev).type != "cpu" or config.head_dim > _MAX_HEAD_DIM or config.head_dim % 2:
        return None
    if config.num_kv_heads <= 0 or config.num_heads % config.num_kv_heads:
        return None
    layers = getattr(model, "layers", None)
    if layers is None or len(layers) != config.num_layers:
        return None
    if not all(hasattr(b, n) for b in layers for n in ("qkv", "gate_up", "o_proj", "down_proj", "input_norm",
                                                       "post_norm", "qk_norm")):
        return None  # e.g. offloaded layers wrapped by a placement
    first = _lin(layers[0].o_proj)
    if first is None:
        return None
    lib = layers[0].o_proj._lib
    for b in layers:  # every matrix must run through the same library (tests swap variants per layer)
        mods = [b.o_proj, b.down_proj, *b.qkv.parts, *b.gate_up.parts, b.qkv.fused, b.gate_up.fused]
        if any(isinstance(x, CpuTernaryLinear) and x._lib is not lib for x in mods):
            return None
    step = CpuStep(model, lib)
    if step.bind() is None:
        return None
    return step
