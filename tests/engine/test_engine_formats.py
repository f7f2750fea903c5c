"""End to end from every source format: files written by the test factory, read by the real
readers, run by the engine, compared with transformers on the same weights."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.formats.convert import convert
from runtime.generation import GenerationSettings
from tests import model_factory as mf
from tests.engine.conftest import hf_greedy

PROMPT = "Hello, world! 你好 😀 The quick brown fox"
GGUF_TYPES = ["Q2_0", "Q2_0_LEGACY", "PQ2_0", "PTQ1_0", "TQ1_0", "TQ2_0", "F16"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One group-256 model (so it is exactly ternary at 64, 128 and 256), YaRN on, untied."""
    tmp = tmp_path_factory.mktemp("engine-formats")
    cfg = mf.tiny_qwen3_config(yarn=(4.0, 128), num_key_value_heads=1)
    model = mf.make_ternary_hf_model(cfg, seed=11, group_size=256)
    tok = mf.tiny_tokenizer()
    folder = mf.write_hf_folder(model, tok, tmp / "hf")
    data = mf.hf_model_to_model_data(model, tok, group_size=128)
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
    return {"tmp": tmp, "model": model, "folder": folder, "data": data, "ids": ids, "logprobs": logprobs,
            "greedy": hf_greedy(model, ids, 32)}


def _path_for(reference, fmt: str):
    tmp = reference["tmp"]
    if fmt == "hf":
        return reference["folder"]
    if fmt == "ternary-from-hf":
        out = tmp / "from-hf.ternary"
        if not out.exists():
            convert(reference["folder"], out, hash_source=False)
        return out
    if fmt == "ternary-from-gguf-tq1":
        out = tmp / "from-tq1.ternary"
        if not out.exists():
            convert(_path_for(reference, "gguf:TQ1_0"), out, hash_source=False)
        return out
    ttype = fmt.split(":", 1)[1]
    out = tmp / f"model-{ttype}.gguf"
    if not out.exists():
        mf.write_gguf(reference["data"], out, ttype)
    return out


FORMATS = ["hf", *[f"gguf:{t}" for t in GGUF_TYPES], "ternary-from-hf", "ternary-from-gguf-tq1"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_engine_from_file_matches_transformers(reference, fmt):
    engine = Engine.load(_path_for(reference, fmt), device="cpu", context_length=128)
    ids = reference["ids"]
    assert engine.tokenizer.encode(PROMPT, add_special_tokens=True) == ids
    with torch.inference_mode():
        out = engine.model(torch.tensor(ids), torch.arange(len(ids)), kv_len=len(ids))
    diff = (torch.log_softmax(out, -1) - reference["logprobs"]).abs().max().item()
    assert diff <= 1e-3
    engine.reset()
    done = list(engine.generate(PROMPT, GenerationSettings(temperature=0.0, max_new_tokens=32, ignore_eos=True)))[-1]
    assert done.stats.token_ids == reference["greedy"]
    d = engine.default_settings()
    assert (d.temperature, d.top_p, d.top_k) == (0.5, 0.85, 20)
