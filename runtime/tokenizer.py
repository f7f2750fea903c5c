"""Tokenizer (Hugging Face ``tokenizers``) plus the streaming pieces generation needs.

* :class:`Tokenizer` is built from :class:`TokenizerData` (a ``tokenizer.json`` document; GGUF
  metadata is converted to one by the formats layer), so one code path serves every file type.
* :class:`StreamDecoder` turns a growing token list into text pieces that never end in half a
  UTF-8 character: byte-level BPE splits multi-byte characters (CJK, emoji) across tokens, and a
  naive per-token decode would print replacement characters.
* :class:`ChannelSplitter` routes text between the "thinking" and "answer" channels on the
  ``<think>`` / ``</think>`` tokens, deciding by token id, never by matching text.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass

from tokenizers import Tokenizer as _HFTokenizer

from runtime.errors import ModelFormatError
from runtime.formats.config_schema import check_token_id, check_token_ids, check_tokenizer_json
from runtime.formats.model_data import TokenizerData

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
REPLACEMENT_CHAR = "\ufffd"


@functools.lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map: how byte-level BPE (Qwen, Llama 3) writes each byte in
    its vocabulary. :func:`byte_level_decoder` is the reverse."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


@functools.lru_cache(maxsize=1)
def byte_level_decoder() -> dict[str, int]:
    """The printable character of GPT-2's byte-level alphabet -> the byte it stands for."""
    return {c: b for b, c in byte_level_alphabet().items()}


class Tokenizer:
    """Encode/decode plus the special ids the engine needs (EOS set, think markers)."""

    def __init__(self, data: TokenizerData, source: str = "the model") -> None:
        if not isinstance(data.tokenizer_json, str):
            raise ModelFormatError(f"{source}: the tokenizer is not a tokenizer.json document")
        try:
            self._tok = _HFTokenizer.from_str(data.tokenizer_json)
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise ModelFormatError(f"{source}: the tokenizer could not be built: {exc}") from None
        self.data = data
        self.bos_token_id = data.bos_token_id
        self.eos_token_ids = set(data.eos_token_ids)
        self.pad_token_id = data.pad_token_id
        self.add_bos_token = data.add_bos_token
        self.think_open_id = self._tok.token_to_id(THINK_OPEN)
        self.think_close_id = self._tok.token_to_id(THINK_CLOSE)
        self._bytes_cache: dict[int, bytes] = {}  # token_bytes, per id
        if not self.eos_token_ids:
            for name in ("<|im_end|>", "<|endoftext|>"):
                tid = self._tok.token_to_id(name)
                if tid is not None:
                    self.eos_token_ids.add(tid)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``. Rendered chat templates use ``add_special_tokens=False`` (as HF).

        With ``add_special_tokens`` the tokenizer's post-processor runs and, if the model asks for
        a BOS token that the post-processor did not add, it is prepended.
        """
        ids = self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        if (add_special_tokens and self.add_bos_token and self.bos_token_id is not None
                and (not ids or ids[0] != self.bos_token_id)):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (API logprobs report them; may be part of a UTF-8 character):
        added/special tokens as their text, byte-level BPE pieces through GPT-2's alphabet,
        SentencePiece byte tokens (``<0x0A>``) as that byte and ``\u2581`` as a space. Cached per id."""
        out = self._bytes_cache.get(token_id)
        if out is None:
            out = self._bytes_cache[token_id] = self._token_bytes(token_id)
        return out

    def _token_bytes(self, token_id: int) -> bytes:
        piece = self.id_to_token(token_id)
        if piece is None:
            return b""
        if token_id in self.added_token_ids:
            return piece.encode("utf-8")
        table = byte_level_decoder()
        if self.byte_level and all(c in table for c in piece):
            return bytes(table[c] for c in piece)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("\u2581", " ").encode("utf-8")

    @functools.cached_property
    def added_token_ids(self) -> frozenset[int]:
        """Ids of the tokenizer.json's added (special and user) tokens: their text is not byte-encoded."""
        doc = json.loads(self.data.tokenizer_json)
        return frozenset(int(t["id"]) for t in doc.get("added_tokens") or []
                         if isinstance(t, dict) and isinstance(t.get("id"), int))

    @functools.cached_property
    def byte_level(self) -> bool:
        """Whether the decoder is GPT-2 style byte-level (Qwen, Llama 3), searched through Sequence decoders."""
        def has(part: object) -> bool:
            if not isinstance(part, dict):
                return False
            if part.get("type") == "ByteLevel":
                return True
            return any(has(p) for p in part.get("decoders") or part.get("pretokenizers") or [])
        return has(json.loads(self.data.tokenizer_json).get("decoder"))

    def special_tokens_map(self) -> dict[str, str]:
        """``bos_token``/``eos_token``/``pad_token`` strings, as HF passes them to chat templates."""
        out: dict[str, str] = {}
        for key, tid in (("bos_token", self.bos_token_id), ("pad_token", self.pad_token_id)):
            tok = self.id_to_token(tid) if tid is not None else None
            if tok is not None:
                out[key] = tok
        if self.data.eos_token_ids:
            tok = self.id_to_token(self.data.eos_token_ids[0])
            if tok is not None:
                out["eos_token"] = tok
        return out


def check_tokenizer_ids(data: TokenizerData, vocab_size: int, source: str) -> None:
    """BOS/EOS/PAD ids inside the model's vocabulary (an id past it would index past the embedding)."""
    for field, v in (("bos_token_id", data.bos_token_id), ("pad_token_id", data.pad_token_id)):
        if v is not None:
            check_token_id(v, vocab_size, source, field)
    if not isinstance(data.eos_token_ids, list):
        raise ModelFormatError(f"{source}: eos_token_ids must be a list of token ids")
    check_token_ids(data.eos_token_ids, vocab_size, source, "eos_token_ids")
    if not isinstance(data.add_bos_token, bool):
        raise ModelFormatError(f"{source}: add_bos_token must be true or false")
    if data.chat_template is not None and not isinstance(data.chat_template, str):
        raise ModelFormatError(f"{source}: chat_template must be text")


def check_tokenizer(data: TokenizerData, vocab_size: int, source: str) -> Tokenizer:
    """The full check of a tokenizer before it is embedded in a file: its outline, its special ids,
    building it (the only real test of a tokenizer.json) and every token id it can produce fitting
    the model's ``vocab_size`` embedding rows."""
    doc = check_tokenizer_json(data.tokenizer_json, source)
    check_tokenizer_ids(data, vocab_size, source)
    tok = Tokenizer(data, source)
    ids = list(tok._tok.get_vocab(with_added_tokens=True).values())
    ids += [a["id"] for a in doc.get("added_tokens", [])]  # as declared (the library may renumber)
    vocab = doc["model"].get("vocab")
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    top = max(ids, default=-1)
    if top >= vocab_size:
        raise ModelFormatError(f"{source}: the tokenizer has token ids up to {top} but the model has only "
                               f"{vocab_size} embedding rows")
    return tok


class StreamDecoder:
    """Incremental detokenizer with the prefix/read offset trick (as in TGI and vLLM).

    Each step decodes a short window ``tokens[prefix:]`` and emits only what it adds beyond
    ``tokens[prefix:read]``; if the window ends in U+FFFD (an incomplete UTF-8 sequence), nothing
    is emitted until a later token completes the character.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def add(self, token_id: int) -> str:
        self.tokens.append(token_id)
        prefix_text = self.tokenizer.decode(self.tokens[self.prefix_offset:self.read_offset])
        new_text = self.tokenizer.decode(self.tokens[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT_CHAR):
            piece = new_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.tokens)
            return piece
        return ""

    def flush(self) -> str:
        """Whatever is still held back (at the end of generation: genuinely invalid bytes)."""
        prefix_text = self.tokenizer.decode(self.tokens[self.prefix_offset:self.read_offset])
        new_text = self.tokenizer.decode(self.tokens[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.tokens)
        return new_text[len(prefix_text):]


@dataclass
class ChannelPiece:
    text: str
    channel: str  # "answer" | "thinking"


class ChannelSplitter:
    """Route generated tokens to the thinking or answer channel and decode each channel's text.

    ``<think>`` opens the thinking channel and ``</think>`` closes it; the markers themselves are
    not shown. Leading whitespace at the start of each segment (Qwen writes ``<think>\\n`` and
    ``</think>\\n\\n``) is dropped. ``start_in_thinking`` is for templates whose generation prompt
    already ends with an open ``<think>``.
    """

    def __init__(self, tokenizer: Tokenizer, start_in_thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.channel = "thinking" if start_in_thinking else "answer"
        self._decoder = StreamDecoder(tokenizer)
        self._at_segment_start = True

    def _emit(self, text: str) -> list[ChannelPiece]:
        if self._at_segment_start:
            text = text.lstrip()
            if not text:
                return []
            self._at_segment_start = False
        return [ChannelPiece(text, self.channel)] if text else []

    def _switch(self, channel: str) -> list[ChannelPiece]:
        out = self._emit(self._decoder.flush())
        self.channel = channel
        self._decoder = StreamDecoder(self.tokenizer)
        self._at_segment_start = True
        return out

    def add(self, token_id: int) -> list[ChannelPiece]:
        if token_id == self.tokenizer.think_open_id and self.tokenizer.think_open_id is not None:
            return self._switch("thinking")
        if token_id == self.tokenizer.think_close_id and self.tokenizer.think_close_id is not None:
            return self._switch("answer")
        return self._emit(self._decoder.add(token_id))

    def flush(self) -> list[ChannelPiece]:
        return self._emit(self._decoder.flush())


def prompt_opens_thinking(tokenizer: Tokenizer, prompt_ids: list[int]) -> bool:
    """True if the prompt's last think marker is an unclosed ``<think>`` (generation starts thinking)."""
    open_id, close_id = tokenizer.think_open_id, tokenizer.think_close_id
    if open_id is None:
        return False
    for tid in reversed(prompt_ids):
        if tid == open_id:
            return True
        if tid == close_id:
            return False
    return False
