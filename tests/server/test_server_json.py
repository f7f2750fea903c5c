"""``response_format``: json_schema and json_object through constrained decoding (runtime.constrained)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.server.conftest import MODEL_ID

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]},
                                           "n": {"type": "integer"}},
          "required": ["ok", "color", "n"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe the sky as JSON."}]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_output_validates(openai_client, seed):
    r = openai_client.chat.completions.create(
        model=MODEL_ID, messages=ASK, max_tokens=80, temperature=1.0, seed=seed,
        response_format={"type": "json_schema", "json_schema": {"name": "sky", "schema": SCHEMA}})
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop", text
    jsonschema.validate(json.loads(text), SCHEMA)


def test_json_object_output_is_an_object(openai_client):
    r = openai_client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=120, temperature=0,
                                              response_format={"type": "json_object"}, stream=True)
    chunks = list(r)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    if finish == ["stop"]:
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: still the start of an object, never anything else
        assert finish == ["length"] and text.lstrip().startswith("{")


def test_unsupported_schema_is_400(openai_client):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(
            model=MODEL_ID, messages=ASK, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "patternProperties": {"^a": {"type": "string"}}}}})
    assert "response_format" in str(e.value)
