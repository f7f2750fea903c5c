"""Tokenizer, streaming detokenizer (UTF-8 safety) and the thinking/answer channel split."""

from __future__ import annotations

import pytest

from runtime.tokenizer import (
    REPLACEMENT_CHAR,
    ChannelSplitter,
    StreamDecoder,
    Tokenizer,
    prompt_opens_thinking,
)
from tests import model_factory as mf
from tests.engine.conftest import tokenizer_data

TEXTS = [
    "你好，世界！今天天气很好。",
    "Emoji: 😀 🎉 🚀 👍🏽 ❤️ done",
    "mixed 中文 and emoji 🎉 with こんにちは and 안녕하세요",
    "plain ascii text, numbers 3.14159",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(tokenizer_data())


def test_tokenizer_matches_hf_tokenizers_library(tok):
    ref = mf.tiny_tokenizer()
    for text in TEXTS:
        assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
        assert tok.decode(tok.encode(text)) == text
    assert tok.think_open_id == mf.TOKEN_IDS["<think>"]
    assert tok.think_close_id == mf.TOKEN_IDS["</think>"]
    assert mf.TOKEN_IDS["<|im_end|>"] in tok.eos_token_ids


@pytest.mark.parametrize("text", TEXTS)
def test_stream_decoder_never_emits_half_a_character(tok, text):
    ids = tok.encode(text)
    naive = [tok.decode([i]) for i in ids]
    if text.isascii():
        assert REPLACEMENT_CHAR not in "".join(naive)
    else:  # the test is meaningful: single tokens really split characters
        assert any(REPLACEMENT_CHAR in p for p in naive)
    dec = StreamDecoder(tok)
    pieces = [dec.add(i) for i in ids]
    pieces.append(dec.flush())
    assert all(REPLACEMENT_CHAR not in p for p in pieces)
    assert "".join(pieces) == text


def test_stream_decoder_flushes_genuinely_invalid_bytes(tok):
    lead_byte_only = tok.encode("你")[:1]  # first byte of a 3-byte character, never completed
    dec = StreamDecoder(tok)
    assert dec.add(lead_byte_only[0]) == ""
    assert dec.flush() == REPLACEMENT_CHAR


def test_channel_splitter_routes_thinking_and_answer(tok):
    think_o, think_c = tok.think_open_id, tok.think_close_id
    ids = [think_o, *tok.encode("\n我在想 🤔 hmm\n"), think_c, *tok.encode("\n\nAnswer: 😀 yes")]
    sp = ChannelSplitter(tok)
    pieces = [p for i in ids for p in sp.add(i)] + sp.flush()
    thinking = "".join(p.text for p in pieces if p.channel == "thinking")
    answer = "".join(p.text for p in pieces if p.channel == "answer")
    assert thinking == "我在想 🤔 hmm\n"
    assert answer == "Answer: 😀 yes"
    assert all(REPLACEMENT_CHAR not in p.text for p in pieces)
    assert "<think>" not in thinking + answer


def test_prompt_opens_thinking(tok):
    o, c = tok.think_open_id, tok.think_close_id
    assert prompt_opens_thinking(tok, [1, 2, o, 5])
    assert not prompt_opens_thinking(tok, [1, o, 3, c, 4])
    assert not prompt_opens_thinking(tok, [1, 2, 3])
