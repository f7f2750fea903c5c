"""``ternary export --format hf``: the folder loads in plain transformers (no remote code) and runs
like our engine -- a tiny Qwen3 (YaRN) and a tiny Bonsai 2 style Qwen3.5 hybrid whose stored
weights are Hadamard-rotated -- plus GGUF input, sharding, refusals, cancel and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open

from runtime.cli import main
from runtime.engine import Engine
from runtime.errors import CancelledError, ModelFormatError
from runtime.formats.arch import NORM, get_arch
from runtime.formats.export_hf import export_hf
from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor, TokenizerData
from runtime.formats.ternary_file import write_model
from runtime.generation import CancelToken, GenerationSettings
from runtime.model.config import HadamardConfig
from tests import model_factory as mf
from tests.hybrid.hybrid_helpers import build_tiny, hf_torch_path

PROMPTS = ["The quick brown fox", "你好，世界！", "def main():\n    return"]
STEPS = 12


@pytest.fixture(autouse=True)
def exact_cpu_activations(monkeypatch):
    """Parity on exact fp32 activations (the CPU kernel's int8 activations are a speed option)."""
    monkeypatch.setenv("TERNARY_CPU_ACTIVATIONS", "exact")


@pytest.fixture(scope="module")
def qwen3_ternary(tmp_path_factory, model_data) -> Path:
    """The formats fixture's tiny YaRN Qwen3 as a .ternary file."""
    return write_model(model_data, tmp_path_factory.mktemp("x") / "tiny-qwen3.ternary")


def _tokenizer_data() -> TokenizerData:
    return TokenizerData(mf.tiny_tokenizer().to_str(), None, [mf.TOKEN_IDS["<|im_end|>"]],
                         mf.TOKEN_IDS["<|endoftext|>"], False, mf.QWEN3_CHAT_TEMPLATE)


def rotated_hybrid(grouped: bool, gguf_convention: bool = False) -> ModelData:
    """A tiny Qwen3.5 whose stored ternary matrices are read as rotated (Bonsai 2 layout):
    the engine applies ``R`` / ``R^T`` at run time, the export must fold it back.
    ``gguf_convention``: norms stored as ``1 + w`` and ``linear_attn.A = -exp(A_log)``, as a
    Bonsai 2 GGUF is read (the export must turn both back)."""
    _, data = build_tiny("gqa_2x", seed=3, vocab_size=300)
    if gguf_convention:
        norms = {t.name for t in get_arch("qwen35").tensor_list(data.config) if t.kind == NORM}
        tensors = {}
        for n, t in data.tensors.items():
            if n in norms:
                t = DenseTensor(t.data + 1.0)
            elif n.endswith("linear_attn.A_log"):
                n, t = n[:-4], DenseTensor(-torch.exp(t.data))
            tensors[n] = t
        data.tensors, data.config.norm_weight_offset = tensors, 0.0
    keep = ("in_proj_a.weight", "in_proj_b.weight", "embed_tokens.weight")
    folded = [n for n, t in data.tensors.items() if isinstance(t, TernaryTensor) and not n.endswith(keep)]
    widths = sorted({data.tensors[n].shape[1] for n in folded} | {data.config.hidden_size})
    g = torch.Generator().manual_seed(1)
    signs = {w: (torch.randint(0, 2, (w,), generator=g) * 2 - 1).tolist() for w in widths}
    data.config.hadamard = HadamardConfig(block_size=16, sign_widths=widths, weight_names=folded,
                                          inverse_weight_names=["model.embed_tokens.weight"],
                                          gdn_v_grouped=grouped, signs=signs)
    data.tokenizer = _tokenizer_data()
    data.name = "tiny-bonsai-2"
    return data


def _hf_argmax(model, ids: list[int], generated: list[int]) -> list[int]:
    """transformers' greedy choice after each prefix of ``ids + generated`` (one teacher-forced
    forward): equal to ``generated`` exactly when its own greedy decoding gives the same tokens."""
    seq = torch.tensor([ids + generated[:-1]])
    with torch.no_grad(), hf_torch_path(model):
        logits = model(seq).logits[0, len(ids) - 1:]
    return logits.argmax(-1).tolist()


def _compare(engine: Engine, folder: Path, tol: float) -> None:
    """Greedy tokens equal for every prompt; log-probs of a random sequence within ``tol``."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    settings = GenerationSettings(temperature=0.0, max_new_tokens=STEPS, ignore_eos=True)
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_special_tokens=False)
        assert ids == engine.tokenizer.encode(prompt)
        done = list(engine.generate_tokens(ids, settings))[-1]
        assert len(done.stats.token_ids) == STEPS
        assert _hf_argmax(model, ids, done.stats.token_ids) == done.stats.token_ids, prompt
    msgs = [{"role": "user", "content": "Hello"}]
    thinking = engine.default_settings().enable_thinking  # a template variable, sent per request
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                   enable_thinking=thinking) == engine.render_prompt(msgs)
    seq = torch.randint(0, 300, (24,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), hf_torch_path(model):
        ref = model(seq[None]).logits[0].float().log_softmax(-1)
        ours = engine.model(seq, torch.arange(len(seq)), kv_len=len(seq)).log_softmax(-1)
    assert (ref - ours).abs().max().item() <= tol


def test_export_qwen3_loads_in_transformers_and_matches_engine(qwen3_ternary, tmp_path):
    out = tmp_path / "hf"
    res = export_hf(qwen3_ternary, out, dtype="fp16")
    assert res.architecture == "Qwen3ForCausalLM" and res.shards == 1 and not res.rotation_folded
    # t * s with s an fp16 scale is exact in fp16: only the fp32 norm vectors round
    assert 0.0 < res.max_rounding_error < 2.0 ** -11 and res.worst_tensor.endswith("norm.weight")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
    assert cfg["tie_word_embeddings"] is False and cfg["model_type"] == "qwen3"
    gen = json.loads((out / "generation_config.json").read_text())
    assert (gen["temperature"], gen["top_p"], gen["top_k"], gen["do_sample"]) == (0.5, 0.85, 20, True)
    assert sorted(p.name for p in out.iterdir()) == ["chat_template.jinja", "config.json", "generation_config.json",
                                                     "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    engine = Engine.load(qwen3_ternary, device="cpu", context_length=128, kv_dtype=torch.float32)
    _compare(engine, out, 5e-3)  # the fp32 norm vectors rounded to fp16 (2^-11): ~1.6e-3 here


@pytest.mark.parametrize("grouped,gguf_convention", [(True, False), (False, True)],
                         ids=["v-grouped", "v-tiled-gguf-conventions"])
def test_export_rotated_qwen35_folds_the_rotation_back(tmp_path, grouped, gguf_convention):
    data = rotated_hybrid(grouped, gguf_convention)
    src = write_model(data, tmp_path / "tiny-bonsai-2.ternary")
    out = tmp_path / "hf"
    res = export_hf(src, out, dtype="fp32")
    assert res.architecture == "Qwen3_5ForCausalLM" and res.rotation_folded
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["layer_types"] == data.config.layer_types
    assert "hadamard" not in json.dumps(cfg)  # a plain checkpoint: nothing left to rotate
    with safe_open(out / "model.safetensors", "pt") as f:
        assert "model.layers.0.linear_attn.A_log" in f.keys()  # noqa: SIM118
        assert f.get_tensor("model.norm.weight").abs().max() < 0.5  # zero-centred, as transformers adds 1
    engine = Engine.load(src, device="cpu", context_length=64, kv_dtype=torch.float32, backend="reference")
    _compare(engine, out, 1e-3)


def test_export_bf16_reports_its_rounding_error(tmp_path):
    """bf16 cannot hold the un-rotated sums (nor fp16 scales) exactly: the error is measured, and
    each weight is within bf16's half-ulp of the exact fp32 export."""
    src = write_model(rotated_hybrid(True), tmp_path / "tiny-bonsai-2.ternary")
    exact, bf16 = export_hf(src, tmp_path / "f32", dtype="fp32"), export_hf(src, tmp_path / "bf16")
    assert exact.max_rounding_error == 0.0 and 0.0 < bf16.max_rounding_error < 2.0 ** -7
    with safe_open(tmp_path / "f32" / "model.safetensors", "pt") as a, \
            safe_open(tmp_path / "bf16" / "model.safetensors", "pt") as b:
        for name in a.keys():  # noqa: SIM118 - safe_open has no iterator
            x, y = a.get_tensor(name), b.get_tensor(name)
            assert y.dtype == torch.bfloat16 and torch.equal(y, x.to(torch.bfloat16)), name


def test_export_every_input_format_gives_the_same_weights(tmp_path, model_data, qwen3_ternary, hf_folder):
    gguf = mf.write_gguf(model_data, tmp_path / "tiny-PQ2_0.gguf", "PQ2_0")
    for src, name in ((gguf, "from-gguf"), (qwen3_ternary, "from-ternary"), (hf_folder, "from-hf")):
        export_hf(src, tmp_path / name, dtype="fp16")
    ref = _named_tensors(tmp_path / "from-ternary" / "model.safetensors")
    for name in ("from-gguf", "from-hf"):  # same names, dtypes and values (file order may differ)
        got = _named_tensors(tmp_path / name / "model.safetensors")
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), name
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "from-gguf")  # built from GGUF metadata
    ref = mf.tiny_tokenizer()
    for text in PROMPTS + ["<|im_start|>user\nhi<|im_end|>"]:
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text).ids


def test_export_refuses_a_non_empty_output_and_force_replaces_it(tmp_path, qwen3_ternary):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ModelFormatError, match="not empty"):
        export_hf(qwen3_ternary, out)
    assert (out / "keep.txt").read_text() == "mine"
    export_hf(qwen3_ternary, out, force=True)
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    with pytest.raises(ModelFormatError, match="inside the source"):
        export_hf(out, out / "again", force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temporary or backup folders left


def test_export_cancel_leaves_nothing(tmp_path, qwen3_ternary):
    cancel, seen = CancelToken(), []

    def progress(done: int, total: int, name: str) -> None:
        seen.append(name)
        if len(seen) == 3:
            cancel.cancel()

    with pytest.raises(CancelledError):
        export_hf(qwen3_ternary, tmp_path / "hf", progress=progress, cancel=cancel, max_shard_bytes=200_000)
    assert list(tmp_path.iterdir()) == []


def test_cli_export_sharded_end_to_end(tmp_path, qwen3_ternary, capsys):
    out = tmp_path / "hf"
    assert main(["export", str(qwen3_ternary), "--format", "hf", str(out), "--max-shard-size", "300KB"]) == 0
    cap = capsys.readouterr()
    assert "exporting [" in cap.err and "100.0%" in cap.err and "Qwen3ForCausalLM" in cap.out
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((out / s).is_file() for s in shards)
    assert index["metadata"]["total_size"] == sum(
        t.numel() * 2 for s in shards for t in _tensors(out / s))
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert main(["export", str(qwen3_ternary), str(out), "--quiet"]) == 1
    assert "not empty" in capsys.readouterr().err


def _named_tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def _tensors(path: Path) -> list[torch.Tensor]:
    return list(_named_tensors(path).values())


def test_export_llama_gguf_gives_back_the_original_checkpoint(tmp_path):
    """A Llama 3 GGUF (llama.cpp's interleaved q/k rows, llama3 RoPE, tied head) exports as a
    ``LlamaForCausalLM`` whose logits equal the original transformers model's."""
    from tests.engine.test_engine_llama import tiny_llama

    hf = tiny_llama(seed=5, tie_word_embeddings=True)
    data = mf.hf_model_to_model_data(hf, mf.tiny_tokenizer(), group_size=128)
    res = export_hf(mf.write_gguf(data, tmp_path / "llama.gguf", "Q2_0"), tmp_path / "hf", dtype="fp32")
    assert res.architecture == "LlamaForCausalLM" and res.max_rounding_error == 0.0
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    assert model.config.rope_parameters["rope_type"] == "llama3" and model.config.tie_word_embeddings
    ids = torch.randint(0, 300, (1, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, hf(ids).logits)
