"""llama.cpp (llama-cpp-python, the ``llamacpp`` extra) loads the GGUF files we write for its
mainline types, tokenizes exactly like our tokenizer, and gives the transformers log-probs of the
same weights (loosely for quantized types: llama.cpp quantizes activations to 8 bits there)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model_factory import write_gguf

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is the optional 'llamacpp' extra")

pytestmark = pytest.mark.llamacpp

TEXT = "Hello 你好 😀 <|im_start|>user\nwhat?<|im_end|>"
# max |log-prob difference| vs transformers fp32 (activation quantization in llama.cpp's kernels)
TOLERANCE = {"F32": 5e-3, "F16": 1e-2, "BF16": 5e-2, "Q2_0": 0.15, "TQ1_0": 0.15, "TQ2_0": 0.15}


@pytest.mark.parametrize("ttype", list(TOLERANCE))
def test_llama_cpp_reads_our_gguf(tmp_path, ttype, hf_model, model_data, tokenizer):
    path = write_gguf(model_data, tmp_path / f"tiny-{ttype}.gguf", ttype)
    llm = llama_cpp.Llama(str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2)
    ids = tokenizer.encode(TEXT).ids
    assert llm.tokenize(TEXT.encode(), add_bos=False, special=True) == ids
    llm.eval(ids)
    logits = np.array(llm.scores[:len(ids)], dtype=np.float64)
    ours = logits - logits.max(-1, keepdims=True)
    ours -= np.log(np.exp(ours).sum(-1, keepdims=True))
    with torch.no_grad():
        ref = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0].double(), -1).numpy()
    assert np.abs(ours - ref).max() <= TOLERANCE[ttype]
