"""A byte-level pushdown matcher for JSON text that follows a compiled schema.

Why bytes: byte-level BPE tokens are byte strings that may split a UTF-8 character, so the matcher
consumes one byte at a time and tracks UTF-8 validity inside strings itself.

A matcher state is a *stack*: a tuple of immutable frames (tuples), top last. Stepping never mutates,
so a token trie can branch from one state cheaply and states can key a mask cache. ``step`` returns a
list of successor stacks (empty = byte rejected; several only where anyOf alternatives are still open).

Frames (first item is the tag):
  (ROOT, node, phase, ws)                   phase START, IN_VALUE, DONE
  (OBJ, shape, phase, seen, ws, key)        phases below; ``key`` is the property being read
  (ARR, shape, phase, count, ws)
  (STR, esc, utf8, key)                     esc: 0 plain, 1 after backslash, 2+n: n hex digits to go;
                                            key: None (a value), True (a key, any name), bytes (a key
                                            whose raw text is collected because listed names and extra
                                            names are both allowed)
  (NUM, integer_only, phase, count)
  (LIT, trie_node)                          enum/const/true/false/null and listed keys

Whitespace: at most ``MAX_WS`` bytes of space/newline/tab in each gap between tokens of JSON, none
before the top value or after it, so the model can neither loop in whitespace nor pad the end.
Numbers: at most ``MAX_INT_DIGITS`` integer digits, ``MAX_FRAC_DIGITS`` fraction digits and
``MAX_EXP_DIGITS`` exponent digits, so a number always ends.
"""

from __future__ import annotations

import json

from runtime.constrained.schema import (
    NULL,
    TRUE_FALSE,
    LiteralNode,
    Node,
    ObjectShape,
    TypedNode,
    UnionNode,
    resolve,
)

ROOT, OBJ, ARR, STR, NUM, LIT = range(6)
START, IN_VALUE, DONE = 0, 6, 7
# object phases: 0 after '{', 1 after ',', 2 in key, 3 after key, 4 after ':', 5 after value, 6 in value
# array phases: 0 after '[', 1 after ',', 5 after value, 6 in value

MAX_WS = 20
MAX_INT_DIGITS = 16
MAX_FRAC_DIGITS = 16
MAX_EXP_DIGITS = 3

WS_BYTES = frozenset(b" \n\t")
QUOTE, BACKSLASH = 0x22, 0x5C
ESCAPES = frozenset(b'"\\/bfnrt')
HEX = frozenset(b"0123456789abcdefABCDEF")
NUM_ENDABLE = frozenset({1, 2, 4, 7})

Stack = tuple


def _utf8_table() -> list[list[int]]:
    """UTF-8 DFA: state 0 = between characters; 1..7 = inside a character (see ``_first``)."""
    t = [[-1] * 256 for _ in range(8)]
    for b in range(0x20, 0x80):
        t[0][b] = 0
    for b in range(0, 0x20):
        t[0][b] = 0  # control bytes are valid UTF-8; the JSON rules reject them separately
    for b in range(0xC2, 0xE0):
        t[0][b] = 1
    t[0][0xE0] = 3
    for b in [*range(0xE1, 0xED), 0xEE, 0xEF]:
        t[0][b] = 2
    t[0][0xED] = 4
    t[0][0xF0] = 6
    for b in range(0xF1, 0xF4):
        t[0][b] = 5
    t[0][0xF4] = 7
    for b in range(0x80, 0xC0):
        t[1][b] = 0
        t[2][b] = 1
        t[5][b] = 2
    for b in range(0xA0, 0xC0):
        t[3][b] = 1
    for b in range(0x80, 0xA0):
        t[4][b] = 1
    for b in range(0x90, 0xC0):
        t[6][b] = 2
    for b in range(0x80, 0x90):
        t[7][b] = 2
    return t


UTF8 = _utf8_table()


def utf8_run(state: int, data: bytes) -> int:
    """The UTF-8 DFA state after ``data`` from ``state``; -1 if invalid."""
    for b in data:
        state = UTF8[state][b]
        if state < 0:
            return -1
    return state


def initial_stack(root: Node) -> Stack:
    return ((ROOT, root, START, 0),)


def _done(stack: Stack, info: object = None) -> Stack | None:
    """Pop the finished top frame and tell its parent (a key's name, or a value's end)."""
    stack = stack[:-1]
    p = stack[-1]
    tag = p[0]
    if tag == OBJ:
        shape, phase, seen = p[1], p[2], p[3]
        if phase == 2:  # a key ended
            if info is not None:
                if info in seen:
                    return None
                seen = seen | {info}
            return stack[:-1] + ((OBJ, shape, 3, seen, 0, info),)
        return stack[:-1] + ((OBJ, shape, 5, seen, 0, None),)
    if tag == ARR:
        return stack[:-1] + ((ARR, p[1], 5, p[3] + 1, 0),)
    return stack[:-1] + ((ROOT, p[1], DONE, 0),)


def _key_name(shape: ObjectShape, raw: bytes) -> str | None:
    """A collected key's name if it is a listed property, else None (an additional property)."""
    name = json.loads(b'"' + raw + b'"')
    return name if name in shape.props else None


def _lit(base: Stack, child) -> list[Stack]:
    if child.terminal and not child.children:
        s = _done(base + ((LIT, child),), child.value)
        return [s] if s is not None else []
    return [base + ((LIT, child),)]


def start_value(base: Stack, node: Node, b: int) -> list[Stack]:
    """Stacks after ``b`` opens a value of ``node`` above ``base`` (whose top is already IN_VALUE)."""
    node = resolve(node)
    if isinstance(node, TypedNode):
        types = node.types
        if b == 0x7B:
            return [base + ((OBJ, node.obj, 0, frozenset(), 0, None),)] if node.obj is not None else []
        if b == 0x5B:
            return [base + ((ARR, node.arr, 0, 0, 0),)] if node.arr is not None else []
        if b == QUOTE:
            return [base + ((STR, 0, 0, None),)] if "string" in types else []
        if 0x30 <= b <= 0x39 or b == 0x2D:
            if not (node.number or node.integer):
                return []
            if b == 0x2D:
                return [base + ((NUM, node.integer, 0, 0),)]
            return [base + ((NUM, node.integer, 1 if b == 0x30 else 2, 1),)]
        if b in (0x74, 0x66):
            return _lit(base, TRUE_FALSE.children[b]) if "boolean" in types else []
        if b == 0x6E:
            return _lit(base, NULL.children[b]) if "null" in types else []
        return []
    if isinstance(node, LiteralNode):
        child = node.trie.children.get(b)
        return _lit(base, child) if child is not None else []
    if isinstance(node, UnionNode):
        out: list[Stack] = []
        for alt in node.alternatives:
            for s in start_value(base, alt, b):
                if s not in out:
                    out.append(s)
        return out
    raise TypeError(f"unknown schema node {node!r}")


def step(stack: Stack, b: int) -> list[Stack]:
    """Successor stacks after byte ``b`` (empty: ``b`` is not allowed here)."""
    top = stack[-1]
    tag = top[0]
    if tag == STR:
        esc, key = top[1], top[3]
        if esc == 0:
            if b == QUOTE:
                if top[2]:
                    return []
                if key is None or key is True:
                    s = _done(stack)
                else:
                    s = _done(stack, _key_name(stack[-2][1], key))
                return [s] if s is not None else []
            if b < 0x20:
                return []
            if b == BACKSLASH:
                if top[2]:
                    return []
                return [stack[:-1] + ((STR, 1, 0, key + b"\\" if key.__class__ is bytes else key),)]
            u = UTF8[top[2]][b]
            if u < 0:
                return []
            return [stack[:-1] + ((STR, 0, u, key + bytes((b,)) if key.__class__ is bytes else key),)]
        if esc == 1:
            if b in ESCAPES:
                nesc = 0
            elif b == 0x75:
                nesc = 6
            else:
                return []
        elif b in HEX:
            nesc = 0 if esc == 2 + 1 else esc - 1
        else:
            return []
        return [stack[:-1] + ((STR, nesc, 0, key + bytes((b,)) if key.__class__ is bytes else key),)]

    if tag == OBJ:
        _, shape, phase, seen, ws, key = top
        if b in WS_BYTES:
            if ws >= MAX_WS or phase == 2 or phase == 6:
                return []
            return [stack[:-1] + ((OBJ, shape, phase, seen, ws + 1, key),)]
        if phase == 0 or phase == 1:
            if b == QUOTE and shape.can_add_key(seen):
                base = stack[:-1] + ((OBJ, shape, 2, seen, 0, None),)
                mode = shape.key_mode
                if mode == 0:
                    return [base + ((LIT, shape.key_trie(seen)),)]
                return [base + ((STR, 0, 0, True if mode == 1 else b""),)]
            if b == 0x7D and phase == 0 and shape.required <= seen:
                s = _done(stack)
                return [s] if s is not None else []
            return []
        if phase == 3:
            return [stack[:-1] + ((OBJ, shape, 4, seen, 0, key),)] if b == 0x3A else []
        if phase == 4:
            node = shape.props[key] if key is not None else shape.additional
            return start_value(stack[:-1] + ((OBJ, shape, 6, seen, 0, None),), node, b)
        if phase == 5:
            if b == 0x2C and shape.can_add_key(seen):
                return [stack[:-1] + ((OBJ, shape, 1, seen, 0, None),)]
            if b == 0x7D and shape.required <= seen:
                s = _done(stack)
                return [s] if s is not None else []
        return []

    if tag == ARR:
        _, shape, phase, count, ws = top
        if b in WS_BYTES:
            if ws >= MAX_WS or phase == 6:
                return []
            return [stack[:-1] + ((ARR, shape, phase, count, ws + 1),)]
        if phase == 5:
            if b == 0x2C and shape.item(count) is not None:
                return [stack[:-1] + ((ARR, shape, 1, count, 0),)]
            if b == 0x5D and count >= shape.min_items:
                s = _done(stack)
                return [s] if s is not None else []
            return []
        if phase == 0 and b == 0x5D:
            if count >= shape.min_items:
                s = _done(stack)
                return [s] if s is not None else []
            return []
        if phase == 0 or phase == 1:
            node = shape.item(count)
            if node is None:
                return []
            return start_value(stack[:-1] + ((ARR, shape, 6, count, 0),), node, b)
        return []

    if tag == NUM:
        _, integer, phase, count = top
        digit = 0x30 <= b <= 0x39
        nxt = -1
        if phase == 0:
            if digit:
                nxt, count = (1 if b == 0x30 else 2), 1
        elif phase == 1 or phase == 2:
            if digit and phase == 2 and count < MAX_INT_DIGITS:
                nxt, count = 2, count + 1
            elif b == 0x2E and not integer:
                nxt, count = 3, 0
            elif (b == 0x65 or b == 0x45) and not integer:
                nxt, count = 5, 0
        elif phase == 3:
            if digit:
                nxt, count = 4, 1
        elif phase == 4:
            if digit and count < MAX_FRAC_DIGITS:
                nxt, count = 4, count + 1
            elif b == 0x65 or b == 0x45:
                nxt, count = 5, 0
        elif phase == 5:
            if b == 0x2B or b == 0x2D:
                nxt = 6
            elif digit:
                nxt, count = 7, 1
        elif phase == 6:
            if digit:
                nxt, count = 7, 1
        elif phase == 7:
            if digit and count < MAX_EXP_DIGITS:
                nxt, count = 7, count + 1
        if nxt >= 0:
            return [stack[:-1] + ((NUM, integer, nxt, count),)]
        if phase in NUM_ENDABLE:
            s = _done(stack)
            return step(s, b) if s is not None else []
        return []

    if tag == LIT:
        node = top[1]
        child = node.children.get(b)
        if child is not None:
            return _lit(stack[:-1], child)
        if node.terminal:
            s = _done(stack, node.value)
            return step(s, b) if s is not None else []
        return []

    # ROOT
    if top[2] == START:
        return start_value(((ROOT, top[1], IN_VALUE, 0),), top[1], b)
    return []


def run(stack: Stack, data: bytes) -> list[Stack]:
    """All stacks after ``data`` (empty: rejected)."""
    stacks = [stack]
    for b in data:
        nxt: list[Stack] = []
        for s in stacks:
            for t in step(s, b):
                if t not in nxt:
                    nxt.append(t)
        if not nxt:
            return []
        stacks = nxt
    return stacks


def accepting(stack: Stack) -> bool:
    """The text so far is one complete JSON value (a trailing number or literal may still grow)."""
    while True:
        top = stack[-1]
        tag = top[0]
        if tag == ROOT:
            return top[2] == DONE
        if (tag == NUM and top[2] in NUM_ENDABLE) or (tag == LIT and top[1].terminal):
            s = _done(stack, top[1].value if tag == LIT else None)
            if s is None:
                return False
            stack = s
            continue
        return False


def finished(stack: Stack) -> bool:
    """Complete and nothing may follow."""
    top = stack[-1]
    return top[0] == ROOT and top[2] == DONE


def plain_string(stack: Stack) -> bool:
    """Inside a string, not in an escape: any plain content byte keeps the string open."""
    top = stack[-1]
    return top[0] == STR and top[1] == 0
