"""Plain-torch references for every fused GPU op in ``runtime.kernels.triton_*``.

Why: each Triton kernel fuses several steps and rounds at different points than a naive torch
chain; tests compare the kernel against these slow, obviously-correct versions (which follow the
Hugging Face Qwen3/Qwen3.5 rounding order), never against the kernel's own arithmetic.
Everything here runs on any device and dtype; nothing here is on a hot path.
"""

from __future__ import annotations

import torch

from runtime.formats.codecs import dequantize_ternary
from runtime.formats.model_data import T2, TernaryTensor, t3_bytes_per_group


def ternary_weight(codes: torch.Tensor, scales: torch.Tensor, group_size: int, encoding: str = T2,
                   cols: int | None = None) -> torch.Tensor:
    """fp32 dense copy of a packed weight (rows, cols)."""
    rows = codes.shape[0]
    if cols is None:
        cols = scales.shape[1] * group_size
    t = TernaryTensor((rows, cols), group_size, codes, scales, encoding)
    return dequantize_ternary(t, torch.float32)


def ref_ternary_matmul(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int,
                       encoding: str = T2, residual: torch.Tensor | None = None) -> torch.Tensor:
    """``y = x @ W^T (+ residual)`` computed in fp32, returned in x's dtype."""
    w = ternary_weight(codes, scales, group_size, encoding, x.shape[-1])
    y = x.float() @ w.t()
    y = y.to(x.dtype)
    if residual is not None:
        y = (residual + y).to(x.dtype)  # HF: residual + proj(x), in the model dtype
    return y


def ref_int8_activations(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """x as the int8-activation mat-vec sees it: per ``block`` consecutive values, ``q = round(x / s)`` with
    ``s = absmax / 127`` (round half up), returned dequantized (``q * s``, fp32)."""
    xf = x.float().reshape(*x.shape[:-1], -1, block)
    amax = xf.abs().amax(-1, keepdim=True)
    rcp = torch.where(amax > 0, 127.0 / amax.clamp_min(1e-30), torch.zeros_like(amax))
    q = torch.floor(xf * rcp + 0.5).clamp(-127, 127)
    return (q * (amax / 127.0)).reshape(x.shape)


def ref_t3_slot_weights(k: int, g: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[KW3, 20]`` weight index (or -1 for padding) of slot ``(byte bb, digit i)`` = column ``5 bb + i``
    of each int32 word of a t3 row, digit i being trit ``4 - i`` of its byte (as the q3 mat-vec decodes)."""
    nbg = t3_bytes_per_group(g)
    kw3 = (k // g) * nbg // 4
    w = torch.arange(kw3, device=device)[:, None, None]
    bb = torch.arange(4, device=device)[None, :, None]
    i = torch.arange(5, device=device)[None, None, :]
    byte = 4 * w + bb
    j = 5 * (byte % nbg) + 4 - i
    return torch.where(j < g, (byte // nbg) * g + j, -1).reshape(kw3, 20)


def ref_q3_activations(x: torch.Tensor, g: int) -> torch.Tensor:
    """x as the t3 int8-activation (q3) mat-vec sees it: per int32 code word (its <= 20 real
    activations) ``q = floor(x / s + 0.5)`` with ``s = absmax / 127``, returned dequantized (fp32)."""
    k = x.shape[-1]
    slots = ref_t3_slot_weights(k, g, x.device)
    xf = x.float().reshape(-1, k)
    xs = torch.where(slots >= 0, xf[:, slots.clamp_min(0)], torch.zeros((), device=x.device))  # [M, KW3, 20]
    amax = xs.abs().amax(-1, keepdim=True)
    rcp = torch.where(amax > 0, 127.0 / amax.clamp_min(1e-30), torch.zeros_like(amax))
    q = torch.floor(xs * rcp + 0.5).clamp(-127, 127) * (amax / 127.0)
    out = torch.zeros_like(xf)
    valid = slots >= 0
    out[:, slots[valid]] = q[:, valid]
    return out.reshape(x.shape)


def ref_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float = 0.0) -> torch.Tensor:
    """HF RMSNorm. offset 0 (Qwen3): ``w * (x * rsqrt(ms + eps)).to(dtype)``; offset 1 (Qwen3.5):
    ``(x * rsqrt(ms + eps) * (1 + w)).to(dtype)`` with the product in fp32."""
    xf = x.float()
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight_offset == 0.0:
        return weight.to(x.dtype) * h.to(x.dtype)
    return (h * (weight_offset + weight.float())).to(x.dtype)


def ref_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    weight_offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = residual + x`` (model dtype); returns ``(rmsnorm(h), h)``."""
    h = (residual + x).to(x.dtype)
    return ref_rmsnorm(h, weight, eps, weight_offset), h


def ref_fused_rmsnorm_matvec(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, codes: torch.Tensor,
                             scales: torch.Tensor, group_size: int, encoding: str = T2,
                             weight_offset: float = 0.0) -> torch.Tensor:
    return ref_ternary_matmul(ref_rmsnorm(x, norm_weight, eps, weight_offset), codes, scales, group_size, encoding)


def ref_swiglu_matvec(x: torch.Tensor, gate_codes: torch.Tensor, gate_scales: torch.Tensor,
                      up_codes: torch.Tensor, up_scales: torch.Tensor, group_size: int, encoding: str = T2,
                      norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
                      weight_offset: float = 0.0) -> torch.Tensor:
    """``silu(x W_g^T) * (x W_u^T)`` (optionally on rmsnorm(x)), each projection rounded to x's dtype."""
    if norm_weight is not None:
        x = ref_rmsnorm(x, norm_weight, eps, weight_offset)
    g = ref_ternary_matmul(x, gate_codes, gate_scales, group_size, encoding)
    u = ref_ternary_matmul(x, up_codes, up_scales, group_size, encoding)
    return (torch.nn.functional.silu(g.float()) * u.float()).to(x.dtype)


def _rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF ``apply_rotary_pos_emb`` with partial rotary: rotate the first ``cos.shape[-1]`` dims."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    half = r // 2
    rot = torch.cat((-xr[..., half:], xr[..., :half]), dim=-1)
    out = xr * cos + rot * sin
    return torch.cat((out, xp), dim=-1)


def ref_qk_norm_rope_kv_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_norm_weight: torch.Tensor,
                              k_norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                              start_pos: int, k_cache: torch.Tensor, v_cache: torch.Tensor, eps: float,
                              weight_offset: float = 0.0, k_scale: torch.Tensor | None = None,
                              v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """q/k ``[T, heads, D]`` -> per-head RMSNorm -> RoPE at ``start_pos + t``; writes k/v into the
    caches ``[kv_heads, max_pos, D]`` (in place; int8 caches get per-token-per-head scales) and
    returns the rotated q. ``cos/sin`` are HF tables ``[max_pos, rotary_dim]`` (fp32)."""
    t = q.shape[0]
    pos = torch.arange(start_pos, start_pos + t, device=q.device)
    c = cos[pos].float()[:, None, :]
    s = sin[pos].float()[:, None, :]
    qn = ref_rmsnorm(q, q_norm_weight, eps, weight_offset).float()
    kn = ref_rmsnorm(k, k_norm_weight, eps, weight_offset).float()
    q_out = _rope_rotate(qn, c, s).to(q.dtype)
    k_rot = _rope_rotate(kn, c, s).to(k.dtype)
    if k_cache.dtype == torch.int8:
        kq, ks = quantize_kv_int8(k_rot)
        vq, vs = quantize_kv_int8(v)
        k_cache[:, pos] = kq.transpose(0, 1)
        v_cache[:, pos] = vq.transpose(0, 1)
        k_scale[:, pos] = ks.transpose(0, 1)
        v_scale[:, pos] = vs.transpose(0, 1)
    else:
        k_cache[:, pos] = k_rot.transpose(0, 1).to(k_cache.dtype)
        v_cache[:, pos] = v.transpose(0, 1).to(v_cache.dtype)
    return q_out


def quantize_kv_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per (token, head): ``x ~ q * scale``, scale = max|x| / 127 (fp32)."""
    xf = x.float()
    scale = xf.abs().amax(-1) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe[..., None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def ref_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_len: int,
                         sm_scale: float, k_scale: torch.Tensor | None = None,
                         v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """One query token ``q [Hq, D]`` over the first ``seq_len`` cache positions (GQA), fp32 math."""
    hq, d = q.shape
    hkv = k_cache.shape[0]
    k = k_cache[:, :seq_len].float()
    v = v_cache[:, :seq_len].float()
    if k_scale is not None:
        k = k * k_scale[:, :seq_len, None].float()
        v = v * v_scale[:, :seq_len, None].float()
    qg = q.float().reshape(hkv, hq // hkv, d)
    s = torch.einsum("hgd,hsd->hgs", qg, k) * sm_scale
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("hgs,hsd->hgd", p, v)
    return o.reshape(hq, d).to(q.dtype)
