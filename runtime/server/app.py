"""The ASGI application: routes, CORS, and JSON errors for unknown paths."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runtime.server import anthropic_api, openai_api
from runtime.server.errors import APIError
from runtime.server.gateway import Gateway, endpoint, error_response


async def health(gw: Gateway, request: Request) -> Response:
    """Public (no key): what a load balancer or the app polls. 503 while the model loads."""
    st = gw.scheduler.stats()
    loading = gw.access.engine is None
    body = {"status": "loading" if loading else "ok", "model": gw.model_id, "active": st.active, "queued": st.queued,
            "max_queue": gw.scheduler.max_queue, "parallel_requests": gw.scheduler.parallel,
            "scheduling": gw.scheduler.scheduling(), "requests_served": st.requests_served,
            "requests_cancelled": st.requests_cancelled, "requests_failed": st.requests_failed}
    return JSONResponse(body, status_code=503 if loading else 200)


def build_app(gw: Gateway) -> Starlette:
    routes = [
        Route("/health", endpoint(gw, health, public=True), methods=["GET"]),
        Route("/v1/models", endpoint(gw, openai_api.models), methods=["GET"]),
        Route("/v1/chat/completions", endpoint(gw, openai_api.chat_completions), methods=["POST"]),
        Route("/v1/completions", endpoint(gw, openai_api.completions), methods=["POST"]),
        Route("/v1/messages", endpoint(gw, anthropic_api.messages, anthropic=True), methods=["POST"]),
        Route("/tokenize", endpoint(gw, openai_api.tokenize), methods=["POST"]),
    ]
    middleware = []
    if gw.config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(gw.config.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["authorization", "content-type", "x-api-key",
                                                    "anthropic-version"]))

    async def http_error(request: Request, exc: Any) -> Response:
        status = getattr(exc, "status_code", 500)
        message = {404: f"no such endpoint: {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(status, str(exc))
        return error_response(APIError(status, message), request.url.path.startswith("/v1/messages"))

    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: http_error})
