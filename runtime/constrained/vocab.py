"""A tokenizer's vocabulary as byte strings, indexed for fast constraint masks.

Built once per tokenizer (cached by a weak reference to it) because it costs about a second for a
151k vocabulary, while a constraint is made per request:

* ``token_bytes``: each token's bytes, decoded the way the ByteLevel decoder does; ``None`` for added
  and special tokens, which a JSON constraint never allows (EOS is handled apart).
* ``plain_valid[u]``: tokens made only of plain string bytes (no quote, backslash or control byte)
  that are valid UTF-8 continuing from DFA state ``u``: the whole answer inside a free string.
* ``ByteIndex`` over the other tokens' *rests* (from the first quote/backslash on) and over all
  tokens: entries sorted by bytes, so a trie node is a range ``[lo, hi)`` and its children are found
  by bisection on demand (no million-node trie in memory).
"""

from __future__ import annotations

import bisect
import threading
import weakref

import numpy as np

from runtime.constrained.errors import SchemaError
from runtime.constrained.json_matcher import BACKSLASH, QUOTE, utf8_run
from runtime.tokenizer import byte_level_decoder


def vocabulary_bytes(tokenizer) -> list[bytes | None]:
    """Bytes of every token id (``None``: added/special token or an id with no token)."""
    if not tokenizer.byte_level:
        raise SchemaError("constrained decoding needs a byte-level BPE tokenizer (Qwen, Llama 3, GPT-2 style)")
    added = tokenizer.added_token_ids
    table = byte_level_decoder()
    out: list[bytes | None] = []
    for i in range(tokenizer.vocab_size):
        tok = tokenizer.id_to_token(i)
        if tok is None or i in added:
            out.append(None)
            continue
        try:
            out.append(bytes(table[c] for c in tok))
        except KeyError:
            out.append(None)  # not a ByteLevel-mapped string: never emitted by the constraint
    return out


def _specials(data: bytes) -> tuple[int, int, int]:
    """(first special byte position, last special position, last quote/backslash position); -1 if none."""
    first = last = last_qb = -1
    for i, b in enumerate(data):
        if b < 0x20 or b == QUOTE or b == BACKSLASH:
            if first < 0:
                first = i
            last = i
            if b >= 0x20:
                last_qb = i
    return first, last, last_qb


class TrieNode:
    """A node of the implicit trie: entries ``[lo, hi)`` share the first ``depth`` bytes."""

    __slots__ = ("lo", "hi", "depth", "n_end", "_children", "_max_qb")

    def __init__(self, lo: int, hi: int, depth: int) -> None:
        self.lo, self.hi, self.depth = lo, hi, depth
        self.n_end = -1
        self._children: list[tuple[int, TrieNode]] | None = None
        self._max_qb: int | None = None


class ByteIndex:
    """Byte strings sorted, with per-entry facts the mask walk uses vectorized."""

    def __init__(self, entries: list[bytes]) -> None:
        order = sorted(range(len(entries)), key=entries.__getitem__)
        self.order = np.asarray(order, dtype=np.int64)
        self.data = [entries[i] for i in order]
        n = len(self.data)
        last_special = np.full(n, -1, dtype=np.int32)
        last_qb = np.full(n, -1, dtype=np.int32)
        tail_ok = np.zeros(n, dtype=bool)
        for i, d in enumerate(self.data):
            _first, last, qb = _specials(d)
            last_special[i], last_qb[i] = last, qb
            tail_ok[i] = utf8_run(0, d[last + 1:]) >= 0
        self.last_special, self.last_qb, self.tail_ok = last_special, last_qb, tail_ok
        self.root = TrieNode(0, n, 0)
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.data)

    def children(self, node: TrieNode) -> list[tuple[int, TrieNode]]:
        kids = node._children
        if kids is None:
            data, d = self.data, node.depth
            i, hi = node.lo, node.hi
            while i < hi and len(data[i]) == d:
                i += 1
            node.n_end = i - node.lo
            kids = []
            while i < hi:
                b = data[i][d]
                j = hi if b == 255 else bisect.bisect_left(data, data[i][:d] + bytes((b + 1,)), i, hi)
                kids.append((b, TrieNode(i, j, d + 1)))
                i = j
            node._children = kids
        return kids

    def max_qb(self, node: TrieNode) -> int:
        m = node._max_qb
        if m is None:
            m = int(self.last_qb[node.lo:node.hi].max()) if node.hi > node.lo else -1
            node._max_qb = m
        return m


class VocabIndex:
    """Everything about one tokenizer's vocabulary that masks need (see module docstring)."""

    def __init__(self, tokenizer) -> None:
        self.token_bytes = vocabulary_bytes(tokenizer)
        self.eos_ids = sorted(tokenizer.eos_token_ids)
        n = len(self.token_bytes)
        self.n_tokens = n
        plain_valid = np.zeros((8, n), dtype=bool)
        special_ids: list[int] = []
        prefixes: list[bytes] = []
        rests: list[bytes] = []
        all_ids: list[int] = []
        all_bytes: list[bytes] = []
        for tid, data in enumerate(self.token_bytes):
            if not data:
                continue
            all_ids.append(tid)
            all_bytes.append(data)
            first, _last, _qb = _specials(data)
            if first < 0:
                for u in range(8):
                    plain_valid[u, tid] = utf8_run(u, data) >= 0 if u else _valid0(data)
            elif data[first] >= 0x20:  # first special is a quote or backslash: may continue a string
                special_ids.append(tid)
                prefixes.append(data[:first])
                rests.append(data[first:])
        self.plain_valid = plain_valid
        self.special_ids = np.asarray(special_ids, dtype=np.int64)
        self.special_prefixes = prefixes
        # for keys whose text decides the value schema: which special tokens may close a given key text
        self.specials_by_prefix: dict[bytes, list[int]] = {}
        for j, (p, r) in enumerate(zip(prefixes, rests, strict=True)):
            if r[0] == QUOTE:
                self.specials_by_prefix.setdefault(p, []).append(j)
        self.escape_then_quote = [j for j, r in enumerate(rests) if r[0] == BACKSLASH and QUOTE in r[1:]]
        # pre_ok[u, j]: special token j's plain prefix is valid UTF-8 from u and ends between characters
        self.pre_ok = np.array([[utf8_run(u, p) == 0 for p in prefixes] for u in range(8)], dtype=bool).reshape(
            8, len(prefixes))
        unique = sorted(set(rests))
        self.rest_index = ByteIndex(unique)
        pos = {r: i for i, r in enumerate(self.rest_index.data)}
        self.special_rest = np.asarray([pos[r] for r in rests], dtype=np.int64)
        self.main_index = ByteIndex(all_bytes)
        self.main_ids = np.asarray(all_ids, dtype=np.int64)[self.main_index.order]
        self.grammars: dict[str, object] = {}
        self.lock = threading.Lock()


def _valid0(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return utf8_run(0, data) >= 0


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def vocab_index(tokenizer) -> VocabIndex:
    """The (cached) index of ``tokenizer``'s vocabulary."""
    with _CACHE_LOCK:
        index = _CACHE.get(tokenizer)
        if index is None:
            index = VocabIndex(tokenizer)
            _CACHE[tokenizer] = index
        return index
