"""Our engine vs llama.cpp (llama-cpp-python) on the same tiny ternary Qwen3 GGUF files.

Both read the very same file. Token ids are fed directly (no tokenizer differences). For each
type llama.cpp supports (Q2_0 g64, TQ1_0, TQ2_0, F16) we compare, at every position of a prompt
plus 32 greedy steps:

* log-softmax of the logits. llama.cpp does not compute in fp32: F16 weights are multiplied with
  activations rounded to fp16 (11-bit mantissa), and the ternary types multiply with activations
  quantized to 8 bits per block (Q8_0 / Q8_K, ~0.4 % relative error per element, compounded over
  the layers). Errors therefore scale with the size of the logits, so the bound is on
  ``max |dlogsoftmax| / max(1, std(logits))``: 1e-2 for F16 (observed ~2e-3) and 0.15 for the 8-bit
  types (observed ~0.07). Our engine runs both of its CPU activation modes: ``exact`` (fp32, see
  test_cpu_backends and the transformers parity tests) and ``int8`` (the default; one scale per 32
  values), whose own rounding adds to llama.cpp's (8-bit types: observed ~0.08 instead of ~0.07).
* greedy tokens: llama.cpp is fed our 32 greedy tokens (teacher forcing) and its argmax must equal
  ours at every step, except at a near-tie, where our top-2 log-prob margin is below twice the
  logit error the tolerance allows; at most 2 of 32 steps may be such exempt ties.
"""

from __future__ import annotations

import llama_cpp  # in the test extra; a missing install must fail, not skip
import numpy as np
import pytest
import torch

from runtime.kernels.cpu.ternary import cpu_ternary_available
from tests.model_factory import (
    hf_model_to_model_data,
    make_ternary_hf_model,
    tiny_qwen3_config,
    tiny_tokenizer,
    write_gguf,
)

pytestmark = pytest.mark.llamacpp

TOLERANCE = {"F16": 1e-2, "Q2_0": 0.15, "TQ2_0": 0.15, "TQ1_0": 0.15}
INT8_TOLERANCE = 0.15
CONFIGS = {
    "untied-gqa2": {},
    "tied-yarn": {"tie": True, "yarn": (4.0, 128)},
    "hd128-mha": {"head_dim": 128, "num_key_value_heads": 4},
}
PROMPT = [5, 17, 42, 100, 7, 250, 3, 9, 291, 60]
STEPS = 32


@pytest.fixture(scope="module")
def model_data():
    """One ModelData per config, exactly ternary at group 256 (so TQ1_0/TQ2_0 store it losslessly)."""
    tok = tiny_tokenizer()
    out = {}
    for name, kw in CONFIGS.items():
        hf = make_ternary_hf_model(tiny_qwen3_config(**kw), seed=1, group_size=256)
        out[name] = hf_model_to_model_data(hf, tok)
    return out


def _ours_greedy(path, activations: str) -> tuple[list[int], torch.Tensor]:
    """Our engine from the GGUF: prefill, then incremental greedy decode with the KV cache."""
    from runtime.engine import Engine
    from runtime.kernels.cpu import ternary as cpu_ternary

    try:
        eng = Engine.load(path, device="cpu", context_length=128, decode_activations=activations)
    finally:
        cpu_ternary.set_default_activations(None)  # the setting is process-wide
    m = eng.model
    modes = {w.activations for w in m.modules() if isinstance(w, cpu_ternary.CpuTernaryLinear)}
    assert modes == {activations}, modes
    toks: list[int] = []
    with torch.inference_mode():
        ids = torch.tensor(PROMPT)
        logits = [m(ids, torch.arange(len(PROMPT)), kv_len=len(PROMPT))]
        for step in range(STEPS):
            toks.append(int(logits[-1][-1].argmax()))
            if step + 1 < STEPS:
                pos = len(PROMPT) + step
                logits.append(m(torch.tensor([toks[-1]]), torch.tensor([pos]), kv_len=pos + 1))
    eng.close()
    return toks, torch.cat(logits).double()


def _llama_logits(path, tokens: list[int]) -> np.ndarray:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=2, logits_all=True,
                          verbose=False)
    llm.eval(tokens)
    scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float64)
    llm.close()
    return scores


@pytest.mark.parametrize("activations", ["int8", "exact"])
@pytest.mark.parametrize("ttype", ["F16", "Q2_0", "TQ2_0", "TQ1_0"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_cpu_engine_matches_llamacpp(model_data, tmp_path, config: str, ttype: str, activations: str) -> None:
    if not cpu_ternary_available():
        pytest.fail("the C CPU kernel did not build: the int8 path cannot be compared")
    path = write_gguf(model_data[config], tmp_path / f"{config}-{ttype}.gguf", ttype)
    ours_toks, ours = _ours_greedy(path, activations)
    seq = PROMPT + ours_toks[:-1]  # positions whose logits chose ours_toks
    assert ours.shape == (len(seq), 300)
    theirs = torch.from_numpy(_llama_logits(path, seq))
    assert theirs.shape == ours.shape

    ls_ours, ls_theirs = torch.log_softmax(ours, -1), torch.log_softmax(theirs, -1)
    scale = max(1.0, float(ours.std(-1).max()))
    err = float((ls_ours - ls_theirs).abs().max()) / scale
    tol = TOLERANCE[ttype] if activations == "exact" else INT8_TOLERANCE  # F16 too: our side rounds to 8 bits
    assert err <= tol, f"{config}/{ttype}/{activations}: normalized log-softmax error {err:.4g}"

    gen = slice(len(PROMPT) - 1, None)
    top2 = ls_ours[gen].topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    their_toks = theirs[gen].argmax(-1).tolist()
    assert len(their_toks) == STEPS
    tie_bound = 2 * tol * scale
    flips = [i for i in range(STEPS) if their_toks[i] != ours_toks[i]]
    unexplained = [i for i in flips if float(margin[i]) >= tie_bound]
    assert not unexplained, f"{config}/{ttype}: greedy tokens differ at steps {unexplained} (not near-ties)"
    assert len(flips) <= 2, f"{config}/{ttype}: {len(flips)} near-tie flips in {STEPS} steps"
