"""The token layer: masks equal a brute-force check of every token, random allowed tokens always end in
valid JSON, EOS only when complete, special and padding ids never, and the engine end to end."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.constrained import ConstraintError, SchemaError, json_constraint
from runtime.constrained.json_matcher import run
from runtime.constrained.vocab import vocab_index
from tests import model_factory as mf

PAD = 7  # the model has rows past the tokenizer's vocabulary
SCHEMAS = [
    None,
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                                      "kind": {"enum": ["a", "bb", 3, None]},
                                      "x": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False, "minItems": 2},
    {"$defs": {"t": {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#/$defs/t"},
                                                             "maxItems": 2}}}},
     "$ref": "#/$defs/t"},
]


def walk(tok, schema, seed: int, check_mask=None, limit: int = 400):
    """Sample allowed tokens (drifting towards closing ones) until the constraint ends; the text."""
    rng = random.Random(seed)
    c = json_constraint(tok, tok.vocab_size + PAD, schema)
    eos = sorted(tok.eos_token_ids)
    table = vocab_index(tok).token_bytes
    for n in range(limit):
        mask = c.allowed_tokens()
        if check_mask is not None:
            check_mask(c, mask)
        allowed = torch.nonzero(mask).flatten().tolist()
        assert allowed, c.text
        if any(e in allowed for e in eos) and n > 10:
            c.advance(eos[0])
            break
        if n > 15:
            for closers in ((b"}", b"]"), (b'"',)):
                closing = [t for t in allowed if t not in eos and any(x in table[t] for x in closers)]
                if closing and rng.random() < 0.7:
                    allowed = closing
                    break
        c.advance(rng.choice(allowed))
        if c.is_finished():
            break
    assert c.is_finished(), c.text
    return c.text


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31))
def test_random_allowed_tokens_yield_valid_instances(tiny_tok, schema, seed):
    value = json.loads(walk(tiny_tok, schema, seed).decode("utf-8"))
    jsonschema.validate(value, schema if schema is not None else {"type": "object"})


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_mask_equals_brute_force_over_the_vocabulary(tiny_tok, schema):
    """Every token: allowed by the mask iff the matcher survives its bytes (EOS iff complete)."""
    index = vocab_index(tiny_tok)

    def check(c, mask):
        assert mask.dtype == torch.bool and mask.shape == (tiny_tok.vocab_size + PAD,)
        assert not mask[tiny_tok.vocab_size:].any()  # padding rows
        for tid, data in enumerate(index.token_bytes):
            if tid in tiny_tok.eos_token_ids:
                assert bool(mask[tid]) == c.is_complete()
                continue
            expect = bool(data) and any(run(s, data) for s in c._stacks)
            assert bool(mask[tid]) == expect, (c.text, data)

    for seed in range(3):
        walk(tiny_tok, schema, seed, check_mask=check)


def test_special_and_added_tokens_are_never_allowed(tiny_tok):
    c = json_constraint(tiny_tok, tiny_tok.vocab_size, {"type": "object", "properties": {"a": {"type": "string"}}})
    for piece in (b'{', b'"a', b'":"'):
        for tid in tiny_tok.encode(piece.decode()):
            c.advance(tid)
    mask = c.allowed_tokens()
    assert mask.sum() > 50  # inside a free string
    for name, tid in mf.TOKEN_IDS.items():
        assert not mask[tid], name


def test_eos_and_advance_rules(tiny_tok):
    eos = mf.TOKEN_IDS["<|im_end|>"]
    c = json_constraint(tiny_tok, tiny_tok.vocab_size)
    assert not c.allowed_tokens()[eos]
    with pytest.raises(ConstraintError):
        c.advance(eos)
    with pytest.raises(ConstraintError):
        c.advance(tiny_tok.encode("x")[0])
    for tid in tiny_tok.encode("{}"):
        c.advance(tid)
    assert c.is_finished() and c.is_complete() and c.allowed_tokens()[eos]
    c = json_constraint(tiny_tok, tiny_tok.vocab_size, {"type": "integer"})
    c.advance(tiny_tok.encode("7")[0])
    assert c.allowed_tokens()[eos] and not c.is_finished()  # "7" may still grow
    c.advance(eos)
    assert c.is_finished() and not c.allowed_tokens().any()


def test_schema_error_surfaces_from_json_constraint(tiny_tok):
    with pytest.raises(SchemaError, match="pattern"):
        json_constraint(tiny_tok, tiny_tok.vocab_size, {"type": "string", "pattern": "a+"})


def test_index_is_cached_per_tokenizer(tiny_tok):
    assert vocab_index(tiny_tok) is vocab_index(tiny_tok)
    a = json_constraint(tiny_tok, 300, SCHEMAS[1])
    b = json_constraint(tiny_tok, 300, SCHEMAS[1])
    assert a.grammar is b.grammar and a is not b


def test_engine_sampled_output_always_validates():
    from runtime.engine import Engine
    from runtime.generation import DoneEvent, GenerationSettings
    from tests.engine.conftest import build_tiny

    engine = Engine.load(build_tiny(seed=1)[1], device="cpu", context_length=256)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
              "required": ["ok", "n"]}
    prompt = engine.tokenizer.encode("Answer in JSON:")
    for seed in range(4):
        c = json_constraint(engine.tokenizer, engine.model.vocab_size, schema)
        s = GenerationSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, max_new_tokens=120)
        done = [e for e in engine.generate_tokens(prompt, s, constraint=c) if isinstance(e, DoneEvent)][-1]
        jsonschema.validate(json.loads(done.text), schema)
