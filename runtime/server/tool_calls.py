"""Qwen3's tool calls in generated text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The chat template tells the model to answer that way; the APIs want structured calls instead. The
parser works on the streamed answer text: it holds back text that could be the start of a
``<tool_call>`` tag, returns ordinary text at once and each call once its closing tag arrived. A
block whose body is not a JSON object with a ``name`` stays text (the model's words are never lost).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


def parse_call(body: str) -> ToolCall | None:
    """The call in one block's body, or ``None`` when it is not ``{"name": str, "arguments": object}``."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
        return None
    args = doc.get("arguments", doc.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(doc["name"], args)


class ToolCallParser:
    """Feed answer text; get ``("text", str)`` and ``("tool", ToolCall)`` items in order."""

    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False

    def feed(self, text: str) -> list[tuple[str, Any]]:
        self._buffer += text
        out: list[tuple[str, Any]] = []
        while True:
            if self._inside:
                end = self._buffer.find(CLOSE)
                if end < 0:
                    return out
                body = self._buffer[:end]
                self._buffer = self._buffer[end + len(CLOSE):]
                self._inside = False
                call = parse_call(body)
                out.append(("tool", call) if call is not None else ("text", OPEN + body + CLOSE))
                continue
            start = self._buffer.find(OPEN)
            if start >= 0:
                if start:
                    out.append(("text", self._buffer[:start]))
                self._buffer = self._buffer[start + len(OPEN):]
                self._inside = True
                continue
            hold = next((k for k in range(min(len(OPEN) - 1, len(self._buffer)), 0, -1)
                         if self._buffer.endswith(OPEN[:k])), 0)
            emit = self._buffer[:len(self._buffer) - hold]
            self._buffer = self._buffer[len(self._buffer) - hold:]
            if emit:
                out.append(("text", emit))
            return out

    def flush(self) -> list[tuple[str, Any]]:
        """At the end: an unclosed block is text again."""
        rest = (OPEN if self._inside else "") + self._buffer
        self._buffer, self._inside = "", False
        return [("text", rest)] if rest else []


def split_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(text outside the calls, the calls) of a whole answer."""
    parser = ToolCallParser()
    items = parser.feed(text) + parser.flush()
    content = "".join(v for kind, v in items if kind == "text")
    return content, [v for kind, v in items if kind == "tool"]
