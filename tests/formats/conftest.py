"""Shared fixtures for the formats tests: one tiny exactly-ternary Qwen3 (group 256, so it is
also exactly ternary at 128 and 64 and fits every GGUF type), its tokenizer and HF folders."""

from __future__ import annotations

import pytest

from tests.model_factory import (
    hf_model_to_model_data,
    make_ternary_hf_model,
    tiny_qwen3_config,
    tiny_tokenizer,
    write_hf_folder,
)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def hf_model():
    return make_ternary_hf_model(tiny_qwen3_config(yarn=(4.0, 128)), seed=1, group_size=256)


@pytest.fixture(scope="session")
def model_data(hf_model, tokenizer):
    """ModelData with group-128 t2 tensors recovered from the HF model."""
    return hf_model_to_model_data(hf_model, tokenizer, group_size=128)


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory, hf_model, tokenizer):
    return write_hf_folder(hf_model, tokenizer, tmp_path_factory.mktemp("hf") / "tiny-qwen3")


@pytest.fixture(scope="session")
def hf_folder_sharded(tmp_path_factory, hf_model, tokenizer):
    return write_hf_folder(hf_model, tokenizer, tmp_path_factory.mktemp("hfs") / "tiny-qwen3-sharded",
                           max_shard_size="200KB")
