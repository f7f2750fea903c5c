"""Compile a JSON Schema into the small node graph the byte matcher walks.

Why a compiled graph: the matcher runs once per byte per candidate token, so it must not interpret
schema dictionaries there. Each node answers one question fast (which types, which keys, which
item schema at index i). ``$ref`` nodes resolve lazily, so recursive schemas compile to a cyclic graph.

Policy (documented in docs/constrained.md):
* ``additionalProperties`` absent means **false** when ``properties`` are listed (the output always
  validates, and the model cannot invent keys); absent without ``properties`` means any key.
* Properties may come in any order; each at most once; ``}`` only after every required one.
* ``enum``/``const`` values are matched as their compact JSON text (``json.dumps(separators=(",", ":"))``).
* Annotations (title, description, default, examples, OpenAPI's ``nullable``: JSON Schema validators
  ignore it, so we do too) are ignored; ``format``, ``minLength`` and
  ``maxLength`` are accepted but not enforced. Anything else that restricts values raises SchemaError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runtime.constrained.errors import SchemaError

ALL_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

IGNORED_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "format", "minLength", "maxLength", "$defs", "definitions",
    "contentMediaType", "contentEncoding", "nullable",
})
HANDLED_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "$ref", "uniqueItems",
})


class LiteralTrie:
    """A byte trie of the JSON texts a value (enum/const/true/false/null) or a key may take."""

    __slots__ = ("children", "terminal", "value")

    def __init__(self) -> None:
        self.children: dict[int, LiteralTrie] = {}
        self.terminal = False
        self.value: Any = None

    def add(self, data: bytes, value: Any) -> None:
        node = self
        for b in data:
            node = node.children.setdefault(b, LiteralTrie())
        node.terminal = True
        node.value = value


def literal_trie(texts: list[tuple[bytes, Any]]) -> LiteralTrie:
    root = LiteralTrie()
    for data, value in texts:
        root.add(data, value)
    return root


def json_text(value: Any) -> bytes:
    """The compact JSON text of ``value`` (what enum/const match)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


TRUE_FALSE = literal_trie([(b"true", True), (b"false", False)])
NULL = literal_trie([(b"null", None)])


class Node:
    """Base of compiled schema nodes; identity-hashed so matcher frames can hold them."""

    __slots__ = ()


class LiteralNode(Node):
    """One of a fixed set of JSON texts (enum, const)."""

    __slots__ = ("trie",)

    def __init__(self, trie: LiteralTrie) -> None:
        self.trie = trie


class UnionNode(Node):
    """anyOf / oneOf (enforced as anyOf) / a type list whose members need different shapes."""

    __slots__ = ("alternatives",)

    def __init__(self, alternatives: list[Node]) -> None:
        self.alternatives = alternatives


class RefNode(Node):
    """A ``$ref`` to a local definition, compiled on first use (so recursion terminates)."""

    __slots__ = ("compiler", "pointer", "_target")

    def __init__(self, compiler: SchemaCompiler, pointer: str) -> None:
        self.compiler = compiler
        self.pointer = pointer
        self._target: Node | None = None

    @property
    def target(self) -> Node:
        if self._target is None:
            self._target = self.compiler.compile_pointer(self.pointer)
        return self._target


@dataclass(eq=False)
class ObjectShape:
    props: dict[str, Node]
    required: frozenset[str]
    additional: Node | None                     # None: no keys beyond ``props``
    key_tries: dict[frozenset[str], LiteralTrie] = field(default_factory=dict)

    @property
    def key_mode(self) -> int:
        """0: listed keys only (literal trie); 1: any key, nothing listed; 2: both (the key is collected)."""
        if self.additional is None:
            return 0
        return 2 if self.props else 1

    def can_add_key(self, seen: frozenset[str]) -> bool:
        return self.additional is not None or len(seen) < len(self.props)

    def key_trie(self, seen: frozenset[str]) -> LiteralTrie:
        """Continuations after the opening quote: ``name"`` for every listed name not yet used."""
        trie = self.key_tries.get(seen)
        if trie is None:
            trie = literal_trie([(json_text(k)[1:], k) for k in self.props if k not in seen])
            self.key_tries[seen] = trie
        return trie


@dataclass(eq=False)
class ArrayShape:
    prefix: list[Node]
    items: Node | None                          # None: nothing after ``prefix``
    min_items: int
    max_items: int | None

    def item(self, index: int) -> Node | None:
        if self.max_items is not None and index >= self.max_items:
            return None
        return self.prefix[index] if index < len(self.prefix) else self.items


class TypedNode(Node):
    """A value of one of ``types``; ``obj``/``arr`` describe object and array values."""

    __slots__ = ("types", "obj", "arr", "number", "integer")

    def __init__(self, types: frozenset[str], obj: ObjectShape | None, arr: ArrayShape | None) -> None:
        self.types = types
        self.obj = obj
        self.arr = arr
        self.number = "number" in types
        self.integer = "integer" in types and not self.number


def resolve(node: Node) -> Node:
    while isinstance(node, RefNode):
        node = node.target
    return node


def any_node() -> TypedNode:
    """Any JSON value (schema ``{}`` / ``true``): objects with any keys, arrays of anything."""
    node = TypedNode(ALL_TYPES, None, None)
    node.obj = ObjectShape({}, frozenset(), node)
    node.arr = ArrayShape([], node, 0, None)
    return node


class SchemaCompiler:
    """Compiles one root schema; ``$ref`` targets are compiled once each, on demand."""

    def __init__(self, root: Any) -> None:
        if not isinstance(root, dict):
            raise SchemaError("the JSON schema must be an object")
        self.root = root
        self._by_pointer: dict[str, Node] = {}
        self._any = any_node()

    def compile_pointer(self, pointer: str) -> Node:
        node = self._by_pointer.get(pointer)
        if node is None:
            target: Any = self.root
            for part in pointer.lstrip("#").split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise SchemaError(f"$ref {pointer!r} does not point into this schema")
                target = target[part]
            node = self.compile(target, pointer)
            self._by_pointer[pointer] = node
        return node

    def compile(self, schema: Any, where: str = "#") -> Node:
        if schema is True or schema == {}:
            return self._any
        if schema is False:
            raise SchemaError(f"{where}: the schema `false` allows no value")
        if not isinstance(schema, dict):
            raise SchemaError(f"{where}: a schema must be an object or a boolean")
        unknown = sorted(set(schema) - IGNORED_KEYWORDS - HANDLED_KEYWORDS)
        if unknown:
            raise SchemaError(f"{where}: JSON Schema keyword {unknown[0]!r} is not supported by constrained "
                              f"decoding")
        if schema.get("uniqueItems") not in (None, False):
            raise SchemaError(f"{where}: JSON Schema keyword 'uniqueItems' is not supported by constrained decoding")
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise SchemaError(f"{where}: only local $ref ('#/$defs/...') is supported, not {ref!r}")
            if set(schema) - IGNORED_KEYWORDS - {"$ref"}:
                raise SchemaError(f"{where}: $ref beside other constraints is not supported")
            return self._ref(ref)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                alts = schema[key]
                if not isinstance(alts, list) or not alts:
                    raise SchemaError(f"{where}: {key} must be a non-empty list of schemas")
                rest = {k: v for k, v in schema.items() if k not in (key, *IGNORED_KEYWORDS)}
                if rest:
                    raise SchemaError(f"{where}: {key} beside {sorted(rest)[0]!r} is not supported")
                return UnionNode([self.compile(a, f"{where}/{key}/{i}") for i, a in enumerate(alts)])
        types = self._types(schema, where)
        if "const" in schema or "enum" in schema:
            return self._literals(schema, types, where)
        obj = self._object(schema, where) if "object" in types else None
        arr = self._array(schema, where) if "array" in types else None
        return TypedNode(types, obj, arr)

    def _ref(self, ref: str) -> Node:
        node = self._by_pointer.get(ref)
        return node if node is not None else RefNode(self, ref)

    def _types(self, schema: dict, where: str) -> frozenset[str]:
        t = schema.get("type")
        if t is None:
            types = set(ALL_TYPES)
        elif isinstance(t, str):
            types = {t}
        elif isinstance(t, list) and t and all(isinstance(x, str) for x in t):
            types = set(t)
        else:
            raise SchemaError(f"{where}: 'type' must be a type name or a non-empty list of them")
        bad = types - ALL_TYPES
        if bad:
            raise SchemaError(f"{where}: unknown type {sorted(bad)[0]!r}")
        return frozenset(types)

    def _literals(self, schema: dict, types: frozenset[str], where: str) -> LiteralNode:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise SchemaError(f"{where}: 'enum' must be a list")
        kept = [v for v in values if _json_type_ok(v, types)]
        if not kept:
            raise SchemaError(f"{where}: no value of 'enum'/'const' matches the schema's type")
        return LiteralNode(literal_trie([(json_text(v), v) for v in kept]))

    def _object(self, schema: dict, where: str) -> ObjectShape:
        props_in = schema.get("properties", {})
        if not isinstance(props_in, dict):
            raise SchemaError(f"{where}: 'properties' must be an object")
        props = {str(k): self.compile(v, f"{where}/properties/{k}") for k, v in props_in.items()}
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(f"{where}: 'required' must be a list of property names")
        add_in = schema.get("additionalProperties", None if props_in else True)
        additional = None if add_in in (None, False) else self.compile(add_in, f"{where}/additionalProperties")
        for name in required:
            if name not in props:
                if additional is None:
                    raise SchemaError(f"{where}: required property {name!r} is not allowed by the schema")
                props[name] = additional
        return ObjectShape(props, frozenset(required), additional)

    def _array(self, schema: dict, where: str) -> ArrayShape:
        prefix_in = schema.get("prefixItems", [])
        if not isinstance(prefix_in, list):
            raise SchemaError(f"{where}: 'prefixItems' must be a list of schemas")
        prefix = [self.compile(s, f"{where}/prefixItems/{i}") for i, s in enumerate(prefix_in)]
        items_in = schema.get("items", True)
        if isinstance(items_in, list):  # draft-04 tuple form
            prefix += [self.compile(s, f"{where}/items/{i}") for i, s in enumerate(items_in)]
            items_in = schema.get("additionalItems", True)
        items = None if items_in is False else self.compile(items_in, f"{where}/items")
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if not isinstance(lo, int) or lo < 0 or (hi is not None and (not isinstance(hi, int) or hi < 0)):
            raise SchemaError(f"{where}: minItems/maxItems must be non-negative integers")
        top = len(prefix) if items is None else None
        if hi is not None:
            top = hi if top is None else min(top, hi)
        if top is not None and lo > top:
            raise SchemaError(f"{where}: minItems {lo} cannot be met (at most {top} items are allowed)")
        return ArrayShape(prefix, items, lo, top)


def _json_type_ok(value: Any, types: frozenset[str]) -> bool:
    if value is None:
        return "null" in types
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool({"integer", "number"} & types)
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    if isinstance(value, str):
        return "string" in types
    if isinstance(value, list):
        return "array" in types
    return isinstance(value, dict) and "object" in types


def compile_schema(schema: dict | None) -> Node:
    """The root node: ``None`` means any JSON object (OpenAI ``json_object``)."""
    if schema is None:
        node = any_node()
        return TypedNode(frozenset({"object"}), node.obj, None)
    return SchemaCompiler(schema).compile(schema)
