"""Tiny random *exactly ternary* Qwen3 models for tests, in every file format we read.

Shared by the formats and engine tests (helpers may only APPEND functions here). API:

* ``tiny_qwen3_config(**overrides) -> transformers.Qwen3Config`` -- vocab 300 (not a multiple of
  128), hidden 256, FFN 512, 2 layers, 4 heads / 2 KV heads, head_dim 64, untied, no YaRN.
  Convenience overrides: ``yarn=(factor, original_ctx)``, ``tie=True``; anything else is passed to
  ``Qwen3Config`` (e.g. ``head_dim=128``, ``num_key_value_heads=4``).
* ``make_ternary_hf_model(cfg, seed=0, group_size=128, dtype=torch.float32) -> Qwen3ForCausalLM``
  whose embedding, projections and lm_head are exactly ``t * s`` per ``group_size`` group along the
  input dim (``s`` exact in fp16 and bf16, one all-zero group per tensor); norms are random near 1.
  A model made with group 256 is also exactly ternary at 128 and 64 (so it fits every GGUF type).
* ``tiny_tokenizer() -> tokenizers.Tokenizer``: real byte-level BPE with the Qwen2 pre-tokenizer
  (NFC + Qwen2 split regex + ByteLevel), trained on a small text with CJK and emoji; added tokens
  ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (special) and ``<think>``, ``</think>``.
  Ids: ``TOKEN_IDS`` below (vocab ``TINY_VOCAB_SIZE`` = 295 entries, fits ``vocab_size`` 300).
* ``QWEN3_CHAT_TEMPLATE``: Qwen3-style ChatML template with ``enable_thinking`` handling.
* ``write_hf_folder(model, tokenizer, path, *, max_shard_size=None) -> Path``: ``save_pretrained``
  (safetensors; sharded when ``max_shard_size`` is given, e.g. ``"200KB"``) plus tokenizer.json,
  tokenizer_config.json, chat_template.jinja and generation_config.json (temp 0.5, top-p 0.85, top-k 20).
* ``hf_model_to_model_data(model, tokenizer, group_size=128) -> ModelData`` (in memory, strict
  ternary recovery exactly like the HF folder reader).
* ``write_gguf(model_data, path, ttype) -> Path`` with ``ttype`` one of ``GGUF_TTYPES``:
  "Q2_0" (g64, type 42), "Q2_0_LEGACY" (g128 under 42), "PQ2_0", "PTQ1_0", "TQ1_0", "TQ2_0",
  "F32", "F16", "BF16", "Q8_0", "Q4_0" (the last two are lossy for ternary weights).
* ``tiny_model_files(tmp_path, ...)`` convenience: (cfg, hf_model, tokenizer, hf_folder) in one call.
* ``random_ternary(rows, cols, group_size, generator, scale)``: one exactly-ternary float32 matrix.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch

TINY_VOCAB_SIZE = 295  # BPE vocab (290) + 5 added tokens
BPE_VOCAB_SIZE = 290

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL_ADDED = ["<think>", "</think>"]
TOKEN_IDS = {tok: BPE_VOCAB_SIZE + i for i, tok in enumerate(SPECIAL_TOKENS + NON_SPECIAL_ADDED)}

GGUF_TTYPES = ["Q2_0", "Q2_0_LEGACY", "PQ2_0", "PTQ1_0", "TQ1_0", "TQ2_0", "F32", "F16", "BF16", "Q8_0", "Q4_0"]
LOSSLESS_GGUF_TTYPES = ["Q2_0", "Q2_0_LEGACY", "PQ2_0", "PTQ1_0", "TQ1_0", "TQ2_0", "F32", "F16", "BF16"]

QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. Ternary weights are -1, 0 or +1 times a scale.
Hello, world! How are you today? I'm fine, thanks; we'll see what they've done.
你好，世界！今天天气很好。我们在测试中文分词和三值模型。
こんにちは世界。 안녕하세요 세계.
Emoji: 😀 🎉 🚀 👍🏽 ❤️ and numbers 0123456789 3.14159 2026-12-02.
def main():\n    return [x * 2 for x in range(10)]\n
<p>Tags & symbols: $100 #1 @user ~/path "quotes" 'single'</p>
"""

QWEN3_CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

GENERATION_DEFAULTS = {"temperature": 0.5, "top_p": 0.85, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}


def tiny_qwen3_config(**overrides: Any):
    """A small Qwen3Config; ``yarn=(factor, orig_ctx)`` and ``tie=True`` are shortcuts."""
    from transformers import Qwen3Config

    yarn = overrides.pop("yarn", None)
    tie = overrides.pop("tie", None)
    theta = overrides.pop("rope_theta", 10000.0)
    kw: dict[str, Any] = dict(
        vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=TOKEN_IDS["<|endoftext|>"], eos_token_id=TOKEN_IDS["<|im_end|>"],
        pad_token_id=TOKEN_IDS["<|endoftext|>"],
    )
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if yarn:
        factor, orig = yarn
        rope = {"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": int(orig),
                "rope_theta": theta}
    kw["rope_parameters"] = rope
    if tie is not None:
        kw["tie_word_embeddings"] = bool(tie)
    kw.update(overrides)
    return Qwen3Config(**kw)


def _is_ternary_param(name: str, p: torch.Tensor) -> bool:
    return p.ndim == 2 and "norm" not in name


def random_ternary(rows: int, cols: int, group_size: int, gen: torch.Generator, scale: float,
                   zero_group: bool = True) -> torch.Tensor:
    """A float32 ``[rows, cols]`` matrix that is exactly ``t * s`` per group (s fp16-exact)."""
    groups = cols // group_size
    t = torch.randint(-1, 2, (rows, groups, group_size), generator=gen).to(torch.float32)
    s = (torch.rand(rows, groups, 1, generator=gen) + 0.5) * scale
    # bf16-exact values are also fp16-exact in this range: every float storage type is lossless
    s = s.to(torch.bfloat16).to(torch.float32)
    # make sure every group really reaches +-s (a group of all zeros would get s = 0 anyway)
    t[..., 0] = torch.where(torch.rand(rows, groups, generator=gen) < 0.5, 1.0, -1.0)
    w = t * s
    if zero_group and rows * groups > 1:
        r = int(torch.randint(0, rows, (1,), generator=gen))
        g = int(torch.randint(0, groups, (1,), generator=gen))
        w[r, g] = 0.0
    return w.reshape(rows, cols)


def make_ternary_hf_model(cfg, seed: int = 0, group_size: int = 128, dtype: torch.dtype = torch.float32):
    """A ``Qwen3ForCausalLM`` whose ternary-class weights are exactly ternary per group."""
    from transformers import Qwen3ForCausalLM

    def matrix(name: str, p: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
        if not _is_ternary_param(name, p):
            return None
        rows, cols = p.shape
        return random_ternary(rows, cols, group_size, gen, 1.0 if "embed" in name else 1.0 / cols ** 0.5)

    return _random_qwen3(lambda: Qwen3ForCausalLM(cfg), seed, matrix).to(dtype)


def _random_qwen3(make, seed: int, matrix):
    """``make()``'s model (built after seeding) with every parameter filled once (tied ones once):
    ``matrix(name, p, gen)`` gives a matrix's values, or None for "not a matrix of this kind", which
    gets random values near 1 (norms)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = make().eval()
    with torch.no_grad():
        seen: set[int] = set()
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            values = matrix(name, p, gen)
            p.copy_(values if values is not None else 1.0 + 0.2 * (torch.rand(p.shape, generator=gen) - 0.5))
    return model


def tiny_tokenizer():
    """A real byte-level BPE tokenizer shaped like Qwen2/Qwen3's (see module docstring)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    if tok.get_vocab_size() != BPE_VOCAB_SIZE:
        raise AssertionError(f"BPE trainer produced {tok.get_vocab_size()} tokens, expected {BPE_VOCAB_SIZE}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    for t, i in TOKEN_IDS.items():
        if tok.token_to_id(t) != i:
            raise AssertionError(f"{t} got id {tok.token_to_id(t)}, expected {i}")
    return tok


def _hf_tokenizer(tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None, chat_template=QWEN3_CHAT_TEMPLATE, model_max_length=512,
        add_bos_token=False, clean_up_tokenization_spaces=False,
    )


def write_hf_folder(model, tokenizer, path: str | Path, *, max_shard_size: str | int | None = None,
                    generation_defaults: dict[str, Any] | None = None) -> Path:
    """Save like PrismML's ``-unpacked`` repos: config, safetensors (maybe sharded), tokenizer files."""
    from transformers import GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    gd = dict(GENERATION_DEFAULTS if generation_defaults is None else generation_defaults)
    model.generation_config = GenerationConfig(
        do_sample=True, eos_token_id=[TOKEN_IDS["<|im_end|>"], TOKEN_IDS["<|endoftext|>"]],
        pad_token_id=TOKEN_IDS["<|endoftext|>"], **gd,
    )
    kw: dict[str, Any] = {"safe_serialization": True}
    if max_shard_size is not None:
        kw["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kw)
    _hf_tokenizer(tokenizer).save_pretrained(path)
    if not (path / "chat_template.jinja").exists():  # older transformers keep it in tokenizer_config
        (path / "chat_template.jinja").write_text(QWEN3_CHAT_TEMPLATE, encoding="utf-8")
    return path


def hf_model_to_model_data(model, tokenizer=None, group_size: int = 128):
    """Build a ModelData in memory from a transformers model (strict ternary recovery)."""
    from runtime.formats import hf

    config_dict = json.loads(model.config.to_json_string())
    state = {k: v.detach() for k, v in model.state_dict().items()}
    if config_dict.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    tok_json = tokenizer.to_str() if tokenizer is not None else None
    return hf.model_data_from_state_dict(
        config_dict, state, group_size=group_size, tokenizer_json=tok_json,
        tokenizer_config={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False},
        chat_template=QWEN3_CHAT_TEMPLATE, generation_config=dict(GENERATION_DEFAULTS,
                                                                  eos_token_id=[TOKEN_IDS["<|im_end|>"]]),
    )


def write_gguf(model_data, path: str | Path, ttype: str) -> Path:
    """Write ``model_data`` as a GGUF v3 file with ternary tensors in ``ttype`` (see GGUF_TTYPES)."""
    from runtime.formats.gguf_writer import write_gguf as _write

    _write(model_data, Path(path), ttype)
    return Path(path)


def tiny_model_files(tmp_path: str | Path, *, seed: int = 0, group_size: int = 128,
                     max_shard_size: str | int | None = None, **cfg_overrides: Any):
    """(cfg, hf_model, tokenizer, hf_folder_path) for the common test set-up."""
    cfg = tiny_qwen3_config(**cfg_overrides)
    model = make_ternary_hf_model(cfg, seed=seed, group_size=group_size)
    tok = tiny_tokenizer()
    folder = write_hf_folder(model, tok, Path(tmp_path) / "hf", max_shard_size=max_shard_size)
    return cfg, model, tok, folder


def tiny_hybrid_synthetic_config(hidden: int = 256, intermediate: int = 384, heads: tuple[int, int] = (4, 2),
                                 linear_heads: tuple[int, int] = (2, 6), max_positions: int = 64):
    """``synthetic_config("bonsai-27b")`` shrunk to a toy: the 27B's first four layers' pattern (both
    layer kinds) and features, 300-token vocabulary; ``heads`` = (query, KV) heads of 64 dims,
    ``linear_heads`` = DeltaNet (key, value) heads of 32 dims."""
    from runtime.synthetic import synthetic_config

    cfg = synthetic_config("bonsai-27b")
    cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers = 300, hidden, intermediate, 4
    cfg.layer_types = cfg.layer_types[:4]
    (cfg.num_heads, cfg.num_kv_heads), cfg.head_dim = heads, 64
    cfg.linear_num_key_heads, cfg.linear_num_value_heads = linear_heads
    cfg.linear_key_head_dim = cfg.linear_value_head_dim = 32
    cfg.max_position_embeddings = max_positions
    return cfg


@contextlib.contextmanager
def row_layout(monkeypatch: Any, module: Any, fuse_rows: bool = True):
    """Models built inside the block get ``fuse_rows`` (the row-fused q|k|v and gate|up matrices the CUDA build
    uses; the CPU build keeps them apart), so CPU tests reach the GPU decode steps' layouts. ``module``:
    ``runtime.model.qwen3`` or ``runtime.model.qwen35`` (the module whose ``linear_factory`` builds them)."""
    orig = module.linear_factory

    def factory(*args: Any, **kwargs: Any) -> Any:
        make = orig(*args, **kwargs)
        make.fuse_rows = fuse_rows
        return make

    with monkeypatch.context() as mp:
        mp.setattr(module, "linear_factory", factory)
        yield


# ---- embedding models (shaped like Qwen3-Embedding) -------------------------------------------

EMBEDDING_POOLING_CONFIG = {"word_embedding_dimension": 256, "pooling_mode_cls_token": False,
                            "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                            "pooling_mode_lasttoken": True, "include_prompt": True}


def embedding_tokenizer():
    """``tiny_tokenizer()`` whose post-processor appends ``<|endoftext|>`` to every input, as
    Qwen3-Embedding's ``tokenizer.json`` does (so transformers' tokenizer adds it by itself)."""
    from tokenizers import processors

    tok = tiny_tokenizer()
    eot = "<|endoftext|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        processors.TemplateProcessing(single=f"$A:0 {eot}:0", pair=f"$A:0 {eot}:0 $B:1 {eot}:1",
                                      special_tokens=[(eot, TOKEN_IDS[eot])]),
    ])
    return tok


def make_dense_hf_model(cfg, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A ``Qwen3ForCausalLM`` with random DENSE weights (nothing ternary about them): matrices
    ``N(0, 1/cols)`` (embedding ``N(0, 1)``), norms random near 1."""
    from transformers import Qwen3ForCausalLM

    def matrix(name: str, p: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
        if p.ndim != 2:
            return None
        return torch.randn(p.shape, generator=gen) * (1.0 if "embed" in name else 1.0 / p.shape[1] ** 0.5)

    return _random_qwen3(lambda: Qwen3ForCausalLM(cfg), seed, matrix).to(dtype)


def write_embedding_hf_folder(model, tokenizer, path: str | Path, *, pooling: dict[str, Any] | None = None,
                              dtype: torch.dtype | None = None) -> Path:
    """Save like ``Qwen/Qwen3-Embedding-0.6B``: the bare base model (tensor names WITHOUT the
    ``model.`` prefix, no lm_head), tokenizer files without a chat template (left padding), and a
    sentence-transformers ``1_Pooling/config.json`` (``pooling`` replaces the last-token one).
    ``dtype`` stores the weights in that dtype (e.g. ``torch.bfloat16`` like the real repo)."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    base = model.model
    if dtype is not None:
        import copy

        base = copy.deepcopy(base).to(dtype)
    base.save_pretrained(path, safe_serialization=True)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        unk_token=None, model_max_length=32768, padding_side="left", clean_up_tokenization_spaces=False,
    ).save_pretrained(path)
    for extra in ("chat_template.jinja",):
        (path / extra).unlink(missing_ok=True)
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling or EMBEDDING_POOLING_CONFIG),
                                                      encoding="utf-8")
    return path


def dense_model_data(model, tokenizer=None):
    """ModelData of a transformers model with every float weight kept dense (no ternary recovery)."""
    from runtime.formats import hf

    config_dict = json.loads(model.config.to_json_string())
    state = {k: v.detach() for k, v in model.state_dict().items()}
    return hf.model_data_from_state_dict(
        config_dict, state, keep_dense=True, tokenizer_json=tokenizer.to_str() if tokenizer is not None else None,
        tokenizer_config={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False},
    )
