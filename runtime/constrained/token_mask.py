"""Token masks from matcher states, and the JSON TokenConstraint the engine drives.

A token is allowed iff the matcher survives all of its bytes. Masks are computed by walking the
sorted-vocabulary trie with the matcher state (pruned at the first rejected byte), with two shortcuts
that keep a 151k vocabulary fast in Python:

* at the top of a free string, ``plain_valid[utf8 state]`` (precomputed) covers every token with no
  quote/backslash/control byte, and only the distinct *rests* of the others (from their first quote or
  backslash on) are walked;
* inside the walk, wherever the matcher is in plain string content, all entries of the current trie
  node whose remaining bytes are plain are added with one vectorized numpy operation, and only
  children leading to a later quote/backslash are descended into.

Masks are cached per matcher stack in the grammar (shared by every request with the same schema),
so repeated states (each character of a long string) cost one lookup.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

import numpy as np
import torch

from runtime.constrained.errors import ConstraintError
from runtime.constrained.json_matcher import (
    STR,
    Stack,
    accepting,
    finished,
    initial_stack,
    plain_string,
    run,
    step,
)
from runtime.constrained.schema import Node, compile_schema, json_text
from runtime.constrained.vocab import ByteIndex, TrieNode, VocabIndex, vocab_index

MASK_CACHE_SIZE = 2048   # packed masks: ~19 KB each for a 151k vocabulary
GRAMMAR_CACHE_SIZE = 32
BACKSLASH_BYTE = 0x5C


def _walk(index: ByteIndex, node: TrieNode, stack: Stack, out: np.ndarray) -> None:
    """Mark in ``out`` (over ``index``'s sorted entries) every entry below ``node`` the matcher accepts."""
    d = node.depth
    kids = index.children(node)
    if plain_string(stack) and d > 0:
        lo, hi = node.lo, node.hi
        out[lo:hi] |= (index.last_special[lo:hi] < d) & index.tail_ok[lo:hi]
        for b, child in kids:
            if index.max_qb(child) >= d:
                for s in step(stack, b):
                    _walk(index, child, s, out)
        return
    if node.n_end and d > 0:
        out[node.lo:node.lo + node.n_end] = True
    for b, child in kids:
        for s in step(stack, b):
            _walk(index, child, s, out)


class Grammar:
    """A compiled schema over one vocabulary, with its mask cache."""

    def __init__(self, vocab: VocabIndex, root: Node) -> None:
        self.vocab = vocab
        self.root = root
        self._cache: OrderedDict[Stack, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def stack_mask(self, stack: Stack) -> np.ndarray:
        """Bool [n_tokens] of tokens allowed after ``stack`` (EOS not included)."""
        with self._lock:
            packed = self._cache.get(stack)
            if packed is not None:
                self._cache.move_to_end(stack)
        if packed is not None:
            return np.unpackbits(packed, count=self.vocab.n_tokens).view(bool)
        mask = self._compute(stack)
        with self._lock:
            self._cache[stack] = np.packbits(mask)
            while len(self._cache) > MASK_CACHE_SIZE:
                self._cache.popitem(last=False)
        return mask

    def _add_rests(self, base: Stack, mask: np.ndarray, u: int) -> None:
        """Add the tokens with a quote/backslash whose plain prefix fits UTF-8 state ``u`` and whose
        rest ``base`` (a string at a character boundary) accepts."""
        v = self.vocab
        rest_ok = np.zeros(len(v.rest_index), dtype=bool)
        _walk(v.rest_index, v.rest_index.root, base, rest_ok)
        ok = rest_ok[v.special_rest] & v.pre_ok[u]
        mask[v.special_ids[ok]] = True

    def _collected_key_mask(self, stack: Stack, mask: np.ndarray, u: int, key: bytes) -> np.ndarray:
        """A key of an object with listed and extra properties: which schema follows the closing quote
        depends on the key's text. Walk the rests as for an extra key, then step exactly the few tokens
        whose closing quote would finish a listed name (or that close after an escape)."""
        v = self.vocab
        if BACKSLASH_BYTE in key:  # escaped key text: rare, check every candidate exactly
            candidates = np.flatnonzero(v.pre_ok[u]).tolist()
        else:
            # as for an extra key (a mask that is cached: it does not depend on the text so far)
            mask |= self.stack_mask(stack[:-1] + ((STR, 0, u, True),))
            shape = stack[-2][1]
            candidates = list(v.escape_then_quote)
            for name in shape.props:
                raw = json_text(name)[1:-1]
                if raw.startswith(key):
                    candidates += v.specials_by_prefix.get(raw[len(key):], [])
        for j in candidates:
            if v.pre_ok[u, j]:
                tid = int(v.special_ids[j])
                mask[tid] = bool(run(stack, v.token_bytes[tid]))
        return mask

    def _compute(self, stack: Stack) -> np.ndarray:
        v = self.vocab
        if plain_string(stack):
            u = stack[-1][2]
            mask = v.plain_valid[u].copy()
            key = stack[-1][3]
            if key.__class__ is bytes:
                return self._collected_key_mask(stack, mask, u, key)
            self._add_rests(stack[:-1] + ((STR, 0, 0, key),), mask, u)
            return mask
        out = np.zeros(len(v.main_index), dtype=bool)
        _walk(v.main_index, v.main_index.root, stack, out)
        mask = np.zeros(v.n_tokens, dtype=bool)
        mask[v.main_ids[out]] = True
        return mask


def grammar_for(vocab: VocabIndex, schema: dict | None) -> Grammar:
    """The cached grammar of ``schema`` over ``vocab`` (compiled on first use)."""
    key = json.dumps(schema, sort_keys=True)
    with vocab.lock:
        g = vocab.grammars.get(key)
        if g is not None:
            return g  # type: ignore[return-value]
    g = Grammar(vocab, compile_schema(schema))
    with vocab.lock:
        vocab.grammars[key] = g
        while len(vocab.grammars) > GRAMMAR_CACHE_SIZE:
            vocab.grammars.pop(next(iter(vocab.grammars)))
    return g


class JsonConstraint:
    """The TokenConstraint for one request: the matcher's live stacks plus the shared grammar."""

    def __init__(self, grammar: Grammar, vocab_size: int) -> None:
        self.grammar = grammar
        self.vocab_size = vocab_size
        self._stacks: list[Stack] = [initial_stack(grammar.root)]
        self._ended = False
        self._eos = [i for i in grammar.vocab.eos_ids if i < vocab_size]
        self._text = bytearray()

    @property
    def text(self) -> bytes:
        """The bytes accepted so far (for diagnostics and tests)."""
        return bytes(self._text)

    def is_complete(self) -> bool:
        """The text so far is a complete JSON value of the schema (EOS may come now)."""
        return any(accepting(s) for s in self._stacks)

    def allowed_tokens(self) -> torch.Tensor:
        # numpy all the way, then one zero-copy view: torch's threaded fills stall on a busy CPU
        n = self.grammar.vocab.n_tokens
        mask = np.zeros(self.vocab_size, dtype=bool)
        if not self._ended:
            m = self.grammar.stack_mask(self._stacks[0])
            for s in self._stacks[1:]:
                m = m | self.grammar.stack_mask(s)
            k = min(n, self.vocab_size)
            mask[:k] = m[:k]
            if self._eos and self.is_complete():
                mask[self._eos] = True
        return torch.from_numpy(mask)

    def advance(self, token_id: int) -> None:
        if self._ended:
            raise ConstraintError(f"token {token_id} after the constrained output ended")
        if token_id in self._eos:
            if not self.is_complete():
                raise ConstraintError("end of text before the JSON value is complete")
            self._ended = True
            return
        data = self.grammar.vocab.token_bytes[token_id] if 0 <= token_id < self.grammar.vocab.n_tokens else None
        if not data or token_id >= self.vocab_size:
            raise ConstraintError(f"token {token_id} is not allowed by the JSON constraint")
        nxt: list[Stack] = []
        for s in self._stacks:
            for t in run(s, data):
                if t not in nxt:
                    nxt.append(t)
        if not nxt:
            raise ConstraintError(f"token {token_id} ({data!r}) is not allowed after {bytes(self._text[-40:])!r}")
        self._stacks = nxt
        self._text += data

    def is_finished(self) -> bool:
        return self._ended or all(finished(s) for s in self._stacks)


def json_constraint(tokenizer, vocab_size: int, schema: dict | None = None) -> JsonConstraint:
    """A constraint to one JSON object (``schema=None``) or one instance of ``schema``."""
    vocab = vocab_index(tokenizer)
    return JsonConstraint(grammar_for(vocab, schema), vocab_size)
