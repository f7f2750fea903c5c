"""The byte matcher and the schema compiler: accepted/rejected texts per keyword, SchemaError."""

from __future__ import annotations

import json

import jsonschema
import pytest

from runtime.constrained import SchemaError
from runtime.constrained.json_matcher import MAX_WS, accepting, finished, initial_stack, run
from runtime.constrained.schema import compile_schema


def complete(schema: dict | None, text: str) -> bool:
    """``text`` is accepted as a whole, complete value."""
    stacks = run(initial_stack(compile_schema(schema)), text.encode())
    return any(accepting(s) for s in stacks)


def prefix_ok(schema: dict | None, text: str) -> bool:
    return bool(run(initial_stack(compile_schema(schema)), text.encode()))


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}

CASES = [
    (None, '{}', True), (None, '{"a": [1, 2.5e-3, "x", null, true, {"b": {}}]}', True), (None, '[]', False),
    (None, '"x"', False), (None, '{"a":1,}', False), (None, '{"a" 1}', False), (None, '{"a":01}', False),
    (None, '{"a":"\\u00e9\\n"}', True), (None, '{"a":"\\x"}', False), (None, '{"a":"tab\there"}', False),
    (None, '{"a":"é中😀"}', True), (None, ' {}', False), (None, '{}\n', False),
    (PERSON, '{"name":"Ann","age":3}', True), (PERSON, '{"age":3,"name":"Ann"}', True),
    (PERSON, '{"age":3}', False), (PERSON, '{"name":"A","name":"B"}', False),
    (PERSON, '{"name":"A","x":1}', False), (PERSON, '{"name":"A","age":1.5}', False),
    (PERSON, '{"name":"A","age":-0}', True), (PERSON, '{"name":"A","age":"3"}', False),
    ({"type": "string"}, '"hi"', True), ({"type": "number"}, '-1.5E+10', True),
    ({"type": "number"}, '1.', False), ({"type": "integer"}, '12', True), ({"type": "boolean"}, 'false', True),
    ({"type": "null"}, 'null', True), ({"type": ["string", "null"]}, 'null', True),
    ({"type": "string", "nullable": True}, 'null', False), ({"type": ["string", "null"]}, '1', False),
    ({"enum": ["red", 2, None]}, '"red"', True), ({"enum": ["red", 2, None]}, '"blue"', False),
    ({"enum": [1, 10]}, '1', True), ({"enum": [1, 10]}, '10', True), ({"enum": [1, 10]}, '11', False),
    ({"const": {"a": [1]}}, '{"a":[1]}', True), ({"const": "x"}, '"y"', False),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, '[1,2]', True),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, '[]', False),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, '[1,2,3]', False),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, '["a",1]', True),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, '["a",1,2]',
     False),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "null"}}, '["a",null,null]', True),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, '"a"', True),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 'true', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     '{"a":1,"b":"x"}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     '{"b":1}', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     '{"a":"x"}', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
     '{"a":1,"a":2}', False),
    ({"type": "object", "additionalProperties": False}, '{}', True),
    ({"type": "object", "additionalProperties": False}, '{"a":1}', False),
    ({"$defs": {"p": {"type": "integer"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}},
     '{"x":5}', True),
    ({"definitions": {"p": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/definitions/p"}},
     '[1,"a"]', False),
    ({"$defs": {"t": {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
      "$ref": "#/$defs/t"}, '{"k":[{"k":[]},{}]}', True),
]


@pytest.mark.parametrize("schema,text,ok", CASES)
def test_accepts_and_rejects(schema, text, ok):
    assert complete(schema, text) is ok
    if ok:  # what we accept also validates (the schema=None case: any object)
        jsonschema.validate(json.loads(text), schema if schema is not None else {"type": "object"})


def test_prefixes_stay_alive_and_finished_only_at_the_end():
    text = '{"name":"Ann","age":30}'
    start = initial_stack(compile_schema(PERSON))
    for i in range(1, len(text) + 1):
        stacks = run(start, text[:i].encode())
        assert stacks, text[:i]
        assert any(finished(s) for s in stacks) is (i == len(text))


def test_required_key_blocks_closing_brace_and_used_keys_cannot_repeat():
    assert not prefix_ok(PERSON, '{}')
    assert not prefix_ok(PERSON, '{"age":1}')
    assert not prefix_ok(PERSON, '{"name":"a","name')


def test_whitespace_is_bounded():
    assert complete(None, "{" + " " * MAX_WS + "}")
    assert not prefix_ok(None, "{" + " " * (MAX_WS + 1))
    assert complete(None, '{\n  "a" : [ 1 ,\n 2 ]\n}')


def test_numbers_are_bounded():
    assert not prefix_ok({"type": "integer"}, "1" * 40)
    assert not prefix_ok({"type": "number"}, "1e1234")


def test_utf8_inside_strings_must_be_valid():
    start = initial_stack(compile_schema({"type": "string"}))
    assert run(start, b'"\xe4\xb8')          # an incomplete character may continue
    assert not run(start, b'"\xe4\xb8"')     # ... but not end the string
    assert not run(start, b'"\xc0\xaf')      # overlong
    assert not run(start, b'"\xed\xa0\x80')  # UTF-16 surrogate
    assert not run(start, b'"\x80')          # stray continuation byte


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "string", "pattern": "^a$"}, "pattern"),
    ({"type": "integer", "minimum": 0}, "minimum"),
    ({"allOf": [{"type": "string"}]}, "allOf"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "patternProperties": {"a": {}}}, "patternProperties"),
    ({"properties": {"a": {"type": "integer", "multipleOf": 2}}}, "multipleOf"),
])
def test_unsupported_keywords_raise_schema_error_naming_them(schema, keyword):
    with pytest.raises(SchemaError, match=keyword):
        compile_schema(schema)


@pytest.mark.parametrize("schema,needle", [
    ({"$ref": "https://example.com/s.json"}, "local"),
    ({"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False}, "required"),
    ({"type": "array", "maxItems": 1, "minItems": 2}, "minItems"),
    ({"type": "strng"}, "unknown type"),
    ({"enum": []}, "enum"),
    ({"type": "integer", "enum": ["a"]}, "enum"),
])
def test_unsatisfiable_or_malformed_schemas_raise(schema, needle):
    with pytest.raises(SchemaError, match=needle):
        compile_schema(schema)
