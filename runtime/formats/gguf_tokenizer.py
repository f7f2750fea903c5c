"""GGUF ``tokenizer.ggml.*`` metadata <-> Hugging Face ``tokenizer.json`` documents.

Why: a user who downloads only a ``.gguf`` must be able to chat, and the engine builds every
tokenizer one way (``tokenizers.Tokenizer.from_str``). So the GGUF vocabulary is rebuilt as the
``tokenizer.json`` it was converted from: byte-level BPE, the pre-tokenizer named by
``tokenizer.ggml.pre``, NORMAL tokens in the model vocab, CONTROL (3) tokens as special added
tokens and USER_DEFINED (4) tokens as non-special added tokens, UNUSED (5) padding entries
dropped. (llama.cpp's converter also marks ``<|...|>``-looking tokens CONTROL, so such a token
comes back ``special``: encoding is unchanged, only ``skip_special_tokens`` treats it differently.)
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import ModelFormatError, UnsupportedModelError
from runtime.formats.model_data import TokenizerData

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _split_then_bytelevel(regex: str) -> dict[str, Any]:
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        dict(_BYTE_LEVEL),
    ]}


# tokenizer.ggml.pre -> (normalizer, pre_tokenizer, ignore_merges). Other modules may add entries
# (e.g. the Qwen3.5 vocabulary) before reading.
PRE_TOKENIZERS: dict[str, tuple[dict[str, Any] | None, dict[str, Any], bool]] = {
    "qwen2": ({"type": "NFC"}, _split_then_bytelevel(QWEN2_REGEX), False),
    "llama-bpe": (None, _split_then_bytelevel(LLAMA3_REGEX), True),
    # llama.cpp's name for the plain GPT-2 pre-tokenizer is "gpt-2" (what we write); "gpt2" is read too.
    "gpt-2": (None, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}, False),
    "gpt2": (None, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}, False),
    "default": (None, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}, False),
}


def tokenizer_from_gguf(meta: dict[str, Any], source: str = "GGUF tokenizer") -> TokenizerData:
    """Build :class:`TokenizerData` (incl. a ``tokenizer.json`` document) from GGUF metadata.

    Every key is type-checked (:class:`runtime.formats.config_schema.Fields`), naming ``source``."""
    from runtime.formats.config_schema import Fields

    f = Fields(meta, source)
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise UnsupportedModelError(f"{source}: GGUF tokenizer model {model!r} is not supported "
                                    "(only byte-level BPE 'gpt2')")
    pre = f.str("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(f"{source}: GGUF pre-tokenizer {pre!r} is not supported "
                                    f"(known: {', '.join(PRE_TOKENIZERS)})")
    tokens = f.str_list("tokenizer.ggml.tokens", max_len=1 << 24)
    if not tokens:
        raise ModelFormatError(f"{source}: tokenizer.ggml.tokens is empty")
    n = len(tokens)
    types = f.int_list("tokenizer.ggml.token_type", [NORMAL] * n, lo=0, hi=255)
    if len(types) != n:
        raise ModelFormatError(f"{source}: tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
    merges = f.str_list("tokenizer.ggml.merges", [], max_len=1 << 24)
    pairs = []
    for m in merges:
        if " " not in m:
            raise ModelFormatError(f"{source}: tokenizer.ggml.merges has a malformed merge {m[:40]!r}")
        a, b = m.split(" ", 1)
        pairs.append([a, b])

    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []
    for i, (tok, ty) in enumerate(zip(tokens, types, strict=True)):
        if ty in (CONTROL, USER_DEFINED):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == CONTROL})
        elif ty == UNUSED:
            continue
        elif ty in (NORMAL, UNKNOWN):
            if tok in vocab:
                raise ModelFormatError(f"{source}: tokenizer.ggml.tokens lists token {tok[:40]!r} twice")
            vocab[tok] = i
        else:
            raise UnsupportedModelError(f"{source}: token type {ty} (id {i}) is not supported for BPE")
    normalizer, pre_tok, ignore_merges = PRE_TOKENIZERS[pre]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tok,
        "post_processor": dict(_BYTE_LEVEL),
        "decoder": dict(_BYTE_LEVEL),
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": pairs,
        },
    }

    def tid(key: str) -> int | None:
        return f.int(key, None, lo=0, hi=n - 1)

    eos = [t for t in (tid("tokenizer.ggml.eos_token_id"), tid("tokenizer.ggml.eot_token_id"),
                       tid("tokenizer.ggml.eom_token_id")) if t is not None]
    template = meta.get("tokenizer.chat_template")
    return TokenizerData(
        tokenizer_json=json.dumps(doc, ensure_ascii=False),
        bos_token_id=tid("tokenizer.ggml.bos_token_id"),
        eos_token_ids=list(dict.fromkeys(eos)),
        pad_token_id=tid("tokenizer.ggml.padding_token_id"),
        add_bos_token=f.bool("tokenizer.ggml.add_bos_token", False),
        chat_template=template if isinstance(template, str) else None,
    )


def _detect_pre(doc: dict[str, Any]) -> str:
    pre = doc.get("pre_tokenizer") or {}
    for name, (_norm, pt, _ig) in PRE_TOKENIZERS.items():
        if name in ("default", "gpt2"):
            continue
        if json.dumps(pt, sort_keys=True) == json.dumps(pre, sort_keys=True):
            return name
    text = json.dumps(pre)
    if QWEN2_REGEX.replace("\\", "\\\\") in text:
        return "qwen2"
    raise ValueError("cannot name this tokenizer's pre-tokenizer for GGUF (expected the Qwen2/Llama-3/GPT-2 one)")


def gguf_tokenizer_metadata(tok: TokenizerData, n_vocab: int) -> dict[str, tuple[str, Any]]:
    """``tokenizer.ggml.*`` entries (``(gguf type, value)``) for a vocabulary of ``n_vocab`` rows.

    Ids the tokenizer does not use become ``[PAD<id>]`` UNUSED entries, as llama.cpp's converter
    does, so the token count matches the embedding rows.
    """
    doc = json.loads(tok.tokenizer_json)
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError("only byte-level BPE tokenizers can be written to GGUF here")
    tokens: list[str | None] = [None] * n_vocab
    types = [UNUSED] * n_vocab
    for t, i in model["vocab"].items():
        if i >= n_vocab:
            raise ValueError(f"token id {i} does not fit {n_vocab} embedding rows")
        tokens[i], types[i] = t, NORMAL
    for a in doc.get("added_tokens", []):
        i = int(a["id"])
        if i >= n_vocab:
            raise ValueError(f"added token id {i} does not fit {n_vocab} embedding rows")
        tokens[i], types[i] = a["content"], CONTROL if a.get("special") else USER_DEFINED
    final = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    meta: dict[str, tuple[str, Any]] = {
        "tokenizer.ggml.model": ("str", "gpt2"),
        "tokenizer.ggml.pre": ("str", _detect_pre(doc)),
        "tokenizer.ggml.tokens": ("arr_str", final),
        "tokenizer.ggml.token_type": ("arr_i32", types),
        "tokenizer.ggml.merges": ("arr_str", merges),
        "tokenizer.ggml.add_bos_token": ("bool", bool(tok.add_bos_token)),
    }
    if tok.bos_token_id is not None:
        meta["tokenizer.ggml.bos_token_id"] = ("u32", tok.bos_token_id)
    if tok.eos_token_ids:
        meta["tokenizer.ggml.eos_token_id"] = ("u32", tok.eos_token_ids[0])
    if tok.pad_token_id is not None:
        meta["tokenizer.ggml.padding_token_id"] = ("u32", tok.pad_token_id)
    if tok.chat_template:
        meta["tokenizer.chat_template"] = ("str", tok.chat_template)
    return meta
