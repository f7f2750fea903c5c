"""Our qwen35 GGUF files run in llama.cpp (llama-cpp-python), and both engines agree.

This checks every GGUF convention of the hybrid (names, +1 norms, ``ssm_a``, conv layout, the
V-head reorder) against llama.cpp's own qwen35 graph, and our engine on the same file against it.
Tolerances follow tests/cpu/test_cpu_llamacpp_parity.py: llama.cpp multiplies F16 weights with
fp16-rounded activations and ternary types with 8-bit-quantized activations, so the bound is on
``max |dlogsoftmax| / max(1, std(logits))``; F32 weights give the tight structural check.
"""

from __future__ import annotations

import llama_cpp  # in the test extra; a missing install must fail, not skip
import numpy as np
import pytest
import torch
from hybrid_helpers import build_tiny

import runtime.model.qwen35.spec  # noqa: F401  (registers qwen35 for HF model_type lookups)
from runtime.formats.gguf import read_gguf
from runtime.model.qwen35.model import Qwen35Model
from tests.model_factory import hf_model_to_model_data, tiny_tokenizer, write_gguf

pytestmark = pytest.mark.llamacpp

# observed (2 configs): F32 5e-4..1.4e-3, F16 ~1e-2, Q2_0 ~0.2 (8-bit activations through the DeltaNet);
# a convention error (norm offset, V-head order, missing rotation) gives > 0.5
TOLERANCE = {"F32": 5e-3, "F16": 2e-2, "Q2_0": 0.3}
PROMPT = [5, 17, 42, 100, 7, 250, 3, 9, 291, 60]
STEPS = 32
# widths that fit Q2_0 64-weight blocks; value head dim 64 so ssm_out columns reorder by whole groups;
# key head dim == value head dim because llama.cpp derives both from qwen35.ssm.state_size
SHAPES = dict(vocab_size=300, hidden_size=128, intermediate_size=256, linear_key_head_dim=64,
              linear_value_head_dim=64)


def _ours(path) -> tuple[list[int], torch.Tensor]:
    m = Qwen35Model.from_model_data(read_gguf(path, group_size=64), max_positions=64, backend="reference")
    toks: list[int] = []
    with torch.no_grad():
        logits = [m(torch.tensor(PROMPT), torch.arange(len(PROMPT)), kv_len=len(PROMPT))]
        for step in range(STEPS):
            toks.append(int(logits[-1][-1].argmax()))
            if step + 1 < STEPS:
                pos = len(PROMPT) + step
                logits.append(m(torch.tensor([toks[-1]]), torch.tensor([pos]), kv_len=pos + 1))
    return toks, torch.cat(logits).double()


def _llama(path, tokens: list[int]) -> torch.Tensor:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False)
    llm.eval(tokens)
    scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float64)
    llm.close()
    return torch.from_numpy(scores)


@pytest.mark.parametrize("ttype", ["F32", "F16", "Q2_0"])
@pytest.mark.parametrize("name", ["gqa_2x", "gqa_3x"])
def test_hybrid_gguf_matches_llamacpp(tmp_path, name, ttype):
    hf, _ = build_tiny(name, seed=3, group=64, **SHAPES)
    path = write_gguf(hf_model_to_model_data(hf, tiny_tokenizer(), group_size=64), tmp_path / "m.gguf", ttype)
    ours_toks, ours = _ours(path)
    theirs = _llama(path, PROMPT + ours_toks[:-1])
    assert theirs.shape == ours.shape
    ls_ours, ls_theirs = ours.log_softmax(-1), theirs.log_softmax(-1)
    scale = max(1.0, float(ours.std(-1).max()))
    err = float((ls_ours - ls_theirs).abs().max()) / scale
    assert err <= TOLERANCE[ttype], f"{name}/{ttype}: normalized log-softmax error {err:.4g}"
    gen = slice(len(PROMPT) - 1, None)
    top2 = ls_ours[gen].topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    their_toks = ls_theirs[gen].argmax(-1).tolist()
    flips = [i for i in range(STEPS) if their_toks[i] != ours_toks[i]]
    assert not [i for i in flips if float(margin[i]) >= 2 * TOLERANCE[ttype] * scale], (name, ttype, flips)
    assert len(flips) <= 2
