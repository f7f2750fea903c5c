"""Server-sent events as both APIs frame them (``data:`` lines; Anthropic adds ``event:`` names)."""

from __future__ import annotations

import json
from typing import Any

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OPENAI_DONE = b"data: [DONE]\n\n"


def sse_event(data: dict[str, Any], event: str | None = None) -> bytes:
    """One event; JSON with non-ASCII kept (UTF-8 body)."""
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode("utf-8")
