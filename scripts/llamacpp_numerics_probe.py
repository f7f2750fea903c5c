"""Why our greedy tokens and llama.cpp's part on a test model: an emulation of llama.cpp's CPU arithmetic.

Usage (CPU machine, repo root, test extras installed):
    python scripts/llamacpp_numerics_probe.py [--config hd128-mha] [--steps 64]

What it does: builds one of the llama.cpp parity test's tiny ternary Qwen3 models
(``tests/cpu/test_cpu_llamacpp_parity.py``), writes it as a TQ2_0 GGUF, and decodes greedily with

* llama.cpp (llama-cpp-python, flash attention off: its default),
* our engine, int8 and exact CPU activations,
* a numpy forward pass that computes as llama.cpp's CPU backend does, each rounding switchable: activations
  quantised to Q8_K before every mat-vec (one scale per 256 values, ``iscale = -127 / max``, round half to
  even), TQ2_0 x Q8_K dot products summed per block in float32 in block order, the RMSNorm sum in double,
  RoPE angles by repeated float32 multiplication, K and V stored as fp16, Q and the attention
  probabilities rounded to fp16 (the F16 mat-muls of the non-flash-attention path).

It prints how many greedy steps each agrees with llama.cpp, then, prompt length by prompt length, the largest
logit difference between the full emulation and llama.cpp, and the smallest distance of any Q8_K-scaled
activation from a rounding tie (x.5) at each position: a value on a tie rounds either way with a one-ulp
difference in the float arithmetic before it, and one int8 step there moves the logits by ~1e-2. Last, the same
with the first exact tie(s) rounded the other way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

f32, f16 = np.float32, np.float16
CONFIGS = {"untied-gqa2": {}, "hd128-mha": {"head_dim": 128, "num_key_value_heads": 4}}
PROMPT = [5, 17, 42, 100, 7, 250, 3, 9, 291, 60]  # the parity test's prompt


class Emulation:
    """A Qwen3 forward pass of an exactly ternary model (group 256) with llama.cpp's CPU roundings."""

    def __init__(self, hf_model, cfg, q8k: bool = True, f16_attention: bool = True, flip_ties: int = 0) -> None:
        self.sd = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
        self.flip_ties = flip_ties  # the first quantisations with an exact tie round it the other way
        self.cfg, self.q8k, self.f16_attention = cfg, q8k, f16_attention
        self.layers, self.heads, self.kv_heads, self.d = (cfg.num_hidden_layers, cfg.num_attention_heads,
                                                          cfg.num_key_value_heads, cfg.head_dim)
        names = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj")
        self.w = {f"model.layers.{i}.{n}": _ternary(self.sd[f"model.layers.{i}.{n}.weight"])
                  for i in range(self.layers) for n in names}
        self.head = _ternary(self.sd.get("lm_head.weight", self.sd["model.embed_tokens.weight"]))
        self.theta_scale = f32(cfg.rope_parameters["rope_theta"]) ** f32(-2.0 / self.d)
        self.near_tie: list[float] = []  # per Q8_K block: distance of its scaled values from x.5

    def matvec(self, x: np.ndarray, wt: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        t, s = wt
        if not self.q8k:
            return ((t * np.repeat(s, 256, axis=1)).astype(np.float64) @ x.astype(np.float64)).astype(f32)
        q, d = self.quantize(x)
        sumi = np.einsum("nbk,bk->nb", t.reshape(t.shape[0], -1, 256), q)  # exact integers
        y = np.zeros(t.shape[0], f32)
        for b in range(q.shape[0]):  # sumf += (float) sumi * d_w * d_x, block by block, in float32
            y = (y + (sumi[:, b].astype(f32) * s[:, b] * d[b]).astype(f32)).astype(f32)
        return y

    def quantize(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Q8_K as ``quantize_row_q8_K_ref``: the signed value of largest magnitude (first of equals) maps to -127."""
        x = x.astype(f32).reshape(-1, 256)
        q = np.zeros(x.shape, np.int64)
        d = np.zeros(x.shape[0], f32)
        for b in range(x.shape[0]):
            mx = x[b, int(np.argmax(np.abs(x[b])))]
            if mx == 0:
                continue
            iscale = f32(-127.0) / mx
            v = (iscale * x[b]).astype(f32)
            self.near_tie.append(float(np.min(np.abs(np.abs(v - np.floor(v)) - 0.5))))
            r = np.rint(v)
            tie = np.abs(v - np.floor(v)) == 0.5
            if tie.any() and self.flip_ties > 0:
                self.flip_ties -= 1
                r = np.where(tie, np.where(r == np.floor(v), r + 1, r - 1), r)
            q[b] = np.minimum(127, r).astype(np.int64)
            d[b] = f32(1.0) / iscale
        return q, d

    def rope(self, x: np.ndarray, pos: int) -> np.ndarray:
        """NEOX RoPE with ggml's angle recursion (theta *= theta_scale in float32)."""
        half, theta, out = self.d // 2, f32(pos), x.copy()
        for i in range(half):
            c, s = f32(np.cos(theta)), f32(np.sin(theta))
            a, b = x[:, i], x[:, i + half]
            out[:, i] = (a * c - b * s).astype(f32)
            out[:, i + half] = (a * s + b * c).astype(f32)
            theta = f32(theta * self.theta_scale)
        return out

    def greedy(self, prompt: list[int], steps: int, force: list[int] | None = None) -> tuple[list[int], list]:
        """Greedy tokens (or ``force``'s), the logits before each, and per prompt position the closest tie."""
        sd, d = self.sd, self.d
        kc: list[list[np.ndarray]] = [[] for _ in range(self.layers)]
        vc: list[list[np.ndarray]] = [[] for _ in range(self.layers)]
        group = self.heads // self.kv_heads

        def forward(tok: int, pos: int) -> np.ndarray:
            x = sd["model.embed_tokens.weight"][tok].astype(f32)
            for i in range(self.layers):
                p = f"model.layers.{i}."
                h = _rms(x, sd[p + "input_layernorm.weight"])
                q = self.matvec(h, self.w[p + "self_attn.q_proj"]).reshape(self.heads, d)
                k = self.matvec(h, self.w[p + "self_attn.k_proj"]).reshape(self.kv_heads, d)
                v = self.matvec(h, self.w[p + "self_attn.v_proj"]).reshape(self.kv_heads, d)
                q = self.rope(np.stack([_rms(r, sd[p + "self_attn.q_norm.weight"]) for r in q]), pos)
                k = self.rope(np.stack([_rms(r, sd[p + "self_attn.k_norm.weight"]) for r in k]), pos)
                kc[i].append(k.astype(f16))
                vc[i].append(v.astype(f16))
                keys = np.stack(kc[i], 1).astype(np.float64)
                values = np.stack(vc[i], 1).astype(np.float64)
                att = np.zeros((self.heads, d), f32)
                for j in range(self.heads):
                    qj = q[j].astype(f16) if self.f16_attention else q[j]
                    sc = (keys[j // group] @ qj.astype(np.float64)).astype(f32) * f32(1 / np.sqrt(d))
                    e = np.exp((sc - sc.max()).astype(f32)).astype(f32)
                    pr = (e * f32(1.0 / float(np.sum(e.astype(np.float64))))).astype(f32)
                    if self.f16_attention:
                        pr = pr.astype(f16)
                    att[j] = (pr.astype(np.float64) @ values[j // group]).astype(f32)
                x = (x + self.matvec(att.reshape(-1), self.w[p + "self_attn.o_proj"])).astype(f32)
                h = _rms(x, sd[p + "post_attention_layernorm.weight"])
                g = self.matvec(h, self.w[p + "mlp.gate_proj"])
                u = self.matvec(h, self.w[p + "mlp.up_proj"])
                a = ((g / (f32(1) + np.exp(-g).astype(f32))).astype(f32) * u).astype(f32)
                x = (x + self.matvec(a, self.w[p + "mlp.down_proj"])).astype(f32)
            return self.matvec(_rms(x, sd["model.norm.weight"]), self.head)

        ties = []
        for pos, tok in enumerate(prompt):
            self.near_tie.clear()
            logits = forward(tok, pos)
            ties.append(min(self.near_tie) if self.near_tie else float("nan"))
        out, before = [], []
        for s in range(steps):
            before.append(logits)
            out.append(int(np.argmax(logits)) if force is None else force[s])
            logits = forward(out[-1], len(prompt) + s)
        return out, [before, ties]


def _ternary(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W = s t exactly, one scale per 256 inputs: codes t [N, K] and the fp16 scales [N, K / 256] as float32."""
    n, k = w.shape
    g = w.reshape(n, k // 256, 256)
    s = np.abs(g).max(-1)
    t = np.rint(g / np.where(s > 0, s, 1)[..., None]).astype(np.int64)
    if not np.allclose(t * s[..., None], g):
        raise ValueError("the weights are not exactly ternary at group 256")
    return t.reshape(n, k), s.astype(f16).astype(f32)


def _rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """ggml's RMSNorm: squares in float32, their sum in double, 1/sqrt in float32."""
    x = x.astype(f32)
    mean = f32(float(np.sum((x * x).astype(np.float64))) / x.size)
    return ((x * (f32(1.0) / np.sqrt(f32(mean + f32(eps))))).astype(f32) * w).astype(f32)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main() -> int:
    import llama_cpp

    from runtime.engine import Engine
    from runtime.kernels.cpu import ternary as cpu_ternary
    from tests.model_factory import (
        hf_model_to_model_data,
        make_ternary_hf_model,
        tiny_qwen3_config,
        tiny_tokenizer,
        write_gguf,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="hd128-mha", choices=list(CONFIGS))
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--out", default="/tmp", help="folder for the GGUF")
    a = ap.parse_args()
    cfg = tiny_qwen3_config(**CONFIGS[a.config])
    hf = make_ternary_hf_model(cfg, seed=1, group_size=256)
    path = write_gguf(hf_model_to_model_data(hf, tiny_tokenizer()), Path(a.out) / f"{a.config}-TQ2_0.gguf", "TQ2_0")

    def llama_logits(tokens: list[int]) -> np.ndarray:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                              verbose=False)
        llm.eval(tokens)
        out = np.array(llm.scores[: llm.n_tokens], np.float64)
        llm.close()
        return out

    def llama_greedy(steps: int) -> list[int]:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                              verbose=False)
        llm.eval(PROMPT)
        out = []
        for _ in range(steps):
            out.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([out[-1]])
        llm.close()
        return out

    def ours(steps: int, activations: str) -> list[int]:
        try:
            eng = Engine.load(path, device="cpu", context_length=256, decode_activations=activations)
        finally:
            cpu_ternary.set_default_activations(None)
        m, out = eng.model, []
        with torch.inference_mode():
            logits = m(torch.tensor(PROMPT), torch.arange(len(PROMPT)), kv_len=len(PROMPT))[-1]
            for s in range(steps):
                out.append(int(logits.argmax()))
                pos = len(PROMPT) + s
                logits = m(torch.tensor([out[-1]]), torch.tensor([pos]), kv_len=pos + 1)[-1]
        eng.close()
        return out

    ref = llama_greedy(a.steps)
    runs = {"ours, int8 activations": ours(a.steps, "int8"), "ours, exact activations": ours(a.steps, "exact")}
    for q8k, f16_attention in ((True, True), (True, False), (False, True), (False, False)):
        emu = Emulation(hf, cfg, q8k, f16_attention)
        runs[f"emulation, Q8_K {q8k}, fp16 Q and P {f16_attention}"] = emu.greedy(PROMPT, a.steps)[0]
    print(f"{a.config}: llama.cpp's first greedy tokens {ref[:12]}")
    for name, toks in runs.items():
        print(f"  {name:42s} equal to llama.cpp's for the first {_first_difference(toks, ref)} of {a.steps}")
    theirs = llama_logits(PROMPT)
    for n in range(1, len(PROMPT) + 1):
        _, (before, ties) = Emulation(hf, cfg).greedy(PROMPT[:n], 1, force=[0])
        diff = float(np.abs(before[0].astype(np.float64) - theirs[n - 1]).max())
        print(f"  prompt of {n:2d}: full emulation vs llama.cpp, largest logit difference {diff:.2g}; "
              f"closest Q8_K rounding tie at the last position {ties[-1]:.1g}")
    for flips in (1, 2):  # gate and up quantise the same vector: a tie there is met twice
        _, (before, _) = Emulation(hf, cfg, flip_ties=flips).greedy(PROMPT, 1, force=[0])
        diff = float(np.abs(before[0].astype(np.float64) - theirs[-1]).max())
        print(f"  the first {flips} quantisation(s) with an exact tie rounded the other way: whole prompt vs "
              f"llama.cpp, largest logit difference {diff:.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
