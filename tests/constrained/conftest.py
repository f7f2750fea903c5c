"""Shared fixtures: the tiny byte-level BPE tokenizer of tests/model_factory.py as a runtime Tokenizer."""

from __future__ import annotations

import pytest

from runtime.formats.model_data import TokenizerData
from runtime.tokenizer import Tokenizer
from tests import model_factory as mf


@pytest.fixture(scope="session")
def tiny_tok() -> Tokenizer:
    data = TokenizerData(tokenizer_json=mf.tiny_tokenizer().to_str(),
                         eos_token_ids=[mf.TOKEN_IDS["<|im_end|>"], mf.TOKEN_IDS["<|endoftext|>"]])
    return Tokenizer(data)
