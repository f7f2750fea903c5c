"""Gated DeltaNet (the linear-attention half of the Qwen3.5-family hybrid), in plain torch.

Why a module of its own: the recurrence is the one part of the hybrid that is neither a matmul nor
softmax attention, and it must agree bit-for-bit in *meaning* between three implementations: the
token-by-token recurrence (decode, and the readable definition), the chunked form (prefill), and
the fla Triton kernels on CUDA. All three read and write the same static state tensors.

Per value head ``h`` with state ``S [Dk, Dv]`` (fp32), for each token::

    q, k  = l2norm(q), l2norm(k);  q = q / sqrt(Dk)
    S     = S * exp(g)                       # g = -exp(A_log) * softplus(a + dt_bias) <= 0
    delta = beta * (v - k^T S)               # beta = sigmoid(b)
    S     = S + k delta^T
    o     = q^T S

Query/key heads are shared by ``HV / H`` consecutive value heads (HF "grouped" order). The
causal depthwise conv1d over the q/k/v channels keeps the last ``kernel - 1`` inputs as its state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim (the fla / HF convention, not ``max(norm, eps)``)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def causal_conv1d(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Depthwise causal conv + SiLU over ``x [T, C]`` continuing from ``state [C, K-1]`` (updated in place).

    The same code serves prefill (T > 1) and decode (T == 1): the state holds the previous
    ``K-1`` inputs (zeros at the start of a sequence), so a prompt split anywhere gives the same
    outputs as one pass.
    """
    t, c = x.shape
    k = weight.shape[-1]
    xp = torch.cat([state.to(x.dtype), x.transpose(0, 1)], dim=1)  # [C, K-1+T]
    if k > 1:
        state.copy_(xp[:, -(k - 1):])
    w = weight.view(c, k).to(torch.float32)
    xf = xp.to(torch.float32)
    if t == 1:  # decode: one multiply-reduce over the K-wide window (few kernels per step)
        return F.silu((xf * w).sum(-1)).unsqueeze(0).to(x.dtype)
    # K shifted multiply-adds (K = 4): cheaper than a depthwise F.conv1d call for short T
    y = xf[:, 0:t] * w[:, 0:1]
    for j in range(1, k):
        y = y + xf[:, j:j + t] * w[:, j:j + 1]
    return F.silu(y).transpose(0, 1).to(x.dtype)


def gated_delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                               beta: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Token-by-token gated delta rule. ``q, k [T, H, Dk]``, ``v [T, HV, Dv]``, ``g, beta [T, HV]``.

    ``state [HV, Dk, Dv]`` (fp32) is updated in place; returns ``o [T, HV, Dv]`` in v's dtype.
    """
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    s = state.to(torch.float32)
    outs = []
    for i in range(v.shape[0]):
        s = s * g[i].exp()[:, None, None]
        kv_mem = torch.einsum("hkv,hk->hv", s, k[i])
        delta = (v[i] - kv_mem) * beta[i][:, None]
        s = s + k[i][:, :, None] * delta[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", s, q[i]))
    state.copy_(s)
    return torch.stack(outs).to(out_dtype)


def gated_delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, state: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """Same result as :func:`gated_delta_rule_recurrent`, computed ``chunk`` tokens at a time.

    Within a chunk the ``chunk`` rank-one delta updates are folded into matmuls with the WY / UT
    representation (a unit lower-triangular solve), so the Python loop runs T / chunk times.
    """
    out_dtype = v.dtype
    t = v.shape[0]
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    pad = (-t) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))
    n = (t + pad) // chunk
    # [HV, n, C, D] and [HV, n, C]
    q, k, v = (x.transpose(0, 1).reshape(x.shape[1], n, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.transpose(0, 1).reshape(x.shape[1], n, chunk) for x in (g, beta))
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    cum = g.cumsum(-1)  # log decay from the chunk start up to and including each position
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # [i, j]: j <= i
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    # (I + A) with A strictly lower: A[i, j] = beta_i (k_i . k_j) decay(i, j); solve for the WY factors
    a = ((k_beta @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    u = torch.linalg.solve_triangular(eye + a, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(eye + a, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    attn = ((q @ k.transpose(-1, -2)) * decay).masked_fill(~lower, 0.0)
    q_dec = q * cum.exp()[..., None]
    k_dec = k * (cum[..., -1:] - cum).exp()[..., None]
    chunk_decay = cum[..., -1].exp()  # [HV, n]
    s = state.to(torch.float32)
    out = torch.empty_like(v)
    for c in range(n):
        v_new = u[:, c] - w[:, c] @ s
        out[:, c] = q_dec[:, c] @ s + attn[:, c] @ v_new
        s = s * chunk_decay[:, c, None, None] + k_dec[:, c].transpose(-1, -2) @ v_new
    state.copy_(s)
    out = out.reshape(out.shape[0], n * chunk, -1)[:, :t].transpose(0, 1)
    return out.to(out_dtype)


def _prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             beta: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """fp32, l2-normalised and scaled q/k, repeated to the value heads (grouped order)."""
    hv, h = v.shape[1], k.shape[1]
    q, k = l2norm(q.to(torch.float32)), l2norm(k.to(torch.float32))
    q = q * q.shape[-1] ** -0.5
    if hv != h:
        q = q.repeat_interleave(hv // h, dim=1)
        k = k.repeat_interleave(hv // h, dim=1)
    return q, k, v.to(torch.float32), g.to(torch.float32), beta.to(torch.float32)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF ``Qwen3_5RMSNormGated``: plain ``w * norm(x)`` (no +1, in every format) times ``silu(z)``."""
    dtype = x.dtype
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = weight * xf.to(dtype)
    return (y * F.silu(z.to(torch.float32))).to(dtype)


# ---------------------------------------------------------------------------------------------
# CUDA: fla-core Triton kernels when installed (optional dependency; the torch code above is the
# reference and the fallback).
# ---------------------------------------------------------------------------------------------

def fla_available() -> bool:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
    except Exception:  # ImportError, or a triton/driver mismatch raising at import
        return False
    return True


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor, use_fla: bool = False) -> torch.Tensor:
    """Dispatch: fla kernels on CUDA when ``use_fla``, else recurrent for short inputs, chunked otherwise."""
    if use_fla and v.is_cuda:
        return _fla_gated_delta_rule(q, k, v, g, beta, state)
    if v.shape[0] <= 8:
        return gated_delta_rule_recurrent(q, k, v, g, beta, state)
    return gated_delta_rule_chunked(q, k, v, g, beta, state)


def _fla_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                          beta: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    # fla >= 0.5 handles HV > H itself ("GVA": value head i reads key head i // (HV / H), which is
    # HF's grouped order); its kernels want contiguous [B, T, H, D] inputs.
    fn = fused_recurrent_gated_delta_rule if v.shape[0] == 1 else chunk_gated_delta_rule
    o, final = fn(q.contiguous().unsqueeze(0), k.contiguous().unsqueeze(0), v.contiguous().unsqueeze(0),
                  g=g.unsqueeze(0).float().contiguous(), beta=beta.unsqueeze(0).to(v.dtype).contiguous(),
                  initial_state=state.unsqueeze(0), output_final_state=True, use_qk_l2norm_in_kernel=True)
    state.copy_(final[0])
    return o[0]
