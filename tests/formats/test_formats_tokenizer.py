"""A tokenizer rebuilt from GGUF ``tokenizer.ggml.*`` metadata behaves exactly like the
``tokenizer.json`` it came from (Chinese, emoji, special and added tokens, decode with and without
special tokens), and the chat template and special ids survive GGUF and .ternary."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from runtime.formats.gguf import read_gguf
from runtime.formats.ternary_file import read_ternary, write_model
from tests.model_factory import QWEN3_CHAT_TEMPLATE, TOKEN_IDS, write_gguf

TEXTS = [
    "Hello, world! How are you today?",
    "你好，世界！今天天气很好。我们在测试中文分词。",
    "こんにちは 안녕하세요 Здравствуйте مرحبا",
    "Emoji: 😀 🎉🚀 👍🏽 ❤️ 👨‍👩‍👧‍👦",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning here\n</think>\n\nanswer<|endoftext|>",
    "   leading spaces, trailing   \n\n\n\ttabs\r\nand CRLF",
    "I'm sure they'll've DONE it, didn't we? 3.14159 + 2026-12-02 = 12345678",
    "Combining: e\u0301 vs \u00e9, ﬁ ligature, Ⅻ, ①",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, model_data, tokenizer):
    p = write_gguf(model_data, tmp_path_factory.mktemp("tok") / "tok.gguf", "TQ2_0")
    md = read_gguf(p)
    return tokenizer, Tokenizer.from_str(md.tokenizer.tokenizer_json), md


def test_gguf_tokenizer_encodes_and_decodes_identically(pair):
    ref, mine, _md = pair
    assert mine.get_vocab() == ref.get_vocab()
    for text in TEXTS:
        a, b = ref.encode(text), mine.encode(text)
        assert a.ids == b.ids, text
        assert a.tokens == b.tokens, text
        assert ref.decode(a.ids) == mine.decode(b.ids), text
        assert ref.decode(a.ids, skip_special_tokens=False) == mine.decode(b.ids, skip_special_tokens=False)
    # every single id decodes the same (byte-level pieces, including partial UTF-8)
    for i in range(ref.get_vocab_size()):
        assert ref.decode([i], skip_special_tokens=False) == mine.decode([i], skip_special_tokens=False), i
        assert ref.id_to_token(i) == mine.id_to_token(i), i


def test_special_and_added_tokens(pair):
    ref, mine, md = pair
    enc = mine.encode("<|im_start|><think></think><|im_end|>")
    assert enc.ids == [TOKEN_IDS["<|im_start|>"], TOKEN_IDS["<think>"], TOKEN_IDS["</think>"], TOKEN_IDS["<|im_end|>"]]
    # special tokens are skipped on request, the non-special <think> is kept, as in the original
    assert mine.decode(enc.ids, skip_special_tokens=True) == ref.decode(enc.ids, skip_special_tokens=True) == "<think></think>"
    tok = md.tokenizer
    assert tok.eos_token_ids == [TOKEN_IDS["<|im_end|>"]]
    assert tok.pad_token_id == TOKEN_IDS["<|endoftext|>"]
    assert tok.bos_token_id is None and tok.add_bos_token is False
    assert tok.chat_template == QWEN3_CHAT_TEMPLATE


def test_matches_transformers_tokenizer(pair, hf_folder):
    from transformers import AutoTokenizer

    _ref, mine, _md = pair
    hf = AutoTokenizer.from_pretrained(hf_folder)
    for text in TEXTS:
        assert hf(text, add_special_tokens=True)["input_ids"] == mine.encode(text).ids, text


def test_tokenizer_survives_ternary_file(pair, tmp_path):
    _ref, mine, md = pair
    back = read_ternary(write_model(md, tmp_path / "tok.ternary"))
    assert back.tokenizer == md.tokenizer
    again = Tokenizer.from_str(back.tokenizer.tokenizer_json)
    for text in TEXTS:
        assert again.encode(text).ids == mine.encode(text).ids


def test_unused_padding_rows_are_written_for_llama_cpp(tmp_path, model_data):
    """The embedding has 300 rows, the tokenizer 295 entries: GGUF gets 5 [PAD] UNUSED tokens."""
    from runtime.formats.gguf import GGUFFile

    f = GGUFFile(write_gguf(model_data, tmp_path / "pad.gguf", "PQ2_0"))
    try:
        toks = f.metadata["tokenizer.ggml.tokens"]
        types = f.metadata["tokenizer.ggml.token_type"].tolist()
        assert len(toks) == 300 and toks[295:] == [f"[PAD{i}]" for i in range(295, 300)]
        assert types[295:] == [5] * 5
        assert types[TOKEN_IDS["<|im_end|>"]] == 3 and types[TOKEN_IDS["<think>"]] == 4
        assert f.metadata["tokenizer.ggml.pre"] == "qwen2"
    finally:
        f.close()


def test_plain_gpt2_pretokenizer_uses_llama_cpp_name_and_reads_both() -> None:
    """llama.cpp knows the plain GPT-2 pre-tokenizer as "gpt-2" and refuses "gpt2"; we write its name."""
    import json

    from tokenizers import models, pre_tokenizers

    from runtime.formats.gguf_tokenizer import gguf_tokenizer_metadata, tokenizer_from_gguf
    from runtime.formats.model_data import TokenizerData

    tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    meta = gguf_tokenizer_metadata(TokenizerData(tokenizer_json=tok.to_str()), 3)
    assert meta["tokenizer.ggml.pre"][1] == "gpt-2"
    plain = {k: v[1] for k, v in meta.items()}
    for name in ("gpt-2", "gpt2"):
        back = tokenizer_from_gguf({**plain, "tokenizer.ggml.pre": name})
        assert json.loads(back.tokenizer_json)["pre_tokenizer"]["type"] == "ByteLevel"
