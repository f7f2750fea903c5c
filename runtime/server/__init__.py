"""``ternary serve``: OpenAI- and Anthropic-compatible HTTP API over the one local engine.

Modules: ``config`` (limits, loopback rule), ``access`` (the engine lock shared with the app),
``scheduler`` (bounded queue, one generation at a time), ``prepare`` (request -> prompt tokens and
settings), ``openai_api`` / ``anthropic_api`` (the two protocols), ``tool_calls`` (Qwen3
``<tool_call>`` parsing), ``sse``, ``errors``, ``gateway`` (what endpoints share), ``app`` (routes),
``runner`` (uvicorn in a thread). See docs/server.md.
"""

from runtime.server.access import EngineAccess
from runtime.server.config import ServerConfig, ServerError
from runtime.server.runner import ServerHandle, start_server
from runtime.server.scheduler import ServerStats

__all__ = ["EngineAccess", "ServerConfig", "ServerError", "ServerHandle", "ServerStats", "start_server"]
