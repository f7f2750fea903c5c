"""What every endpoint shares: the API key check, bounded body reading, the model name, errors in
the caller's API format, and reading one job's events (cancelling it when the client leaves)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from runtime.generation import DoneEvent, NoticeEvent, TextEvent, TokenEvent
from runtime.server.config import ServerConfig
from runtime.server.errors import APIError, anthropic_error_body, openai_error_body
from runtime.server.scheduler import END, Job, JobFailed, Scheduler

log = logging.getLogger("ternary.serve")
DISCONNECT_POLL_S = 0.25

Handler = Callable[["Gateway", Request], Awaitable[Response]]


@dataclass
class Collected:
    """A whole generation, for the non-streaming responses."""

    answer: str = ""
    thinking: str = ""
    tokens: list[TokenEvent] = field(default_factory=list)
    done: DoneEvent | None = None


class Gateway:
    def __init__(self, access: Any, config: ServerConfig, scheduler: Scheduler) -> None:
        self.access = access
        self.config = config
        self.scheduler = scheduler
        self.created = int(time.time())

    @property
    def model_id(self) -> str:
        return self.config.model_id or self.access.model_id

    # -- request checks
    def check_key(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("x-api-key") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode(), key.encode()):
            raise APIError(401, "invalid or missing API key (send it as 'Authorization: Bearer KEY' or 'x-api-key')",
                           code="invalid_api_key")

    async def read_json(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"the request body is {declared} bytes; this server accepts at most {limit}")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(413, f"the request body is larger than {limit} bytes, the most this server accepts")
                chunks.append(chunk)
        except ClientDisconnect:
            raise APIError(400, "the client disconnected while sending the request") from None
        try:
            body = json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError) as exc:
            raise APIError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise APIError(400, "the request body must be a JSON object")
        return body

    def check_model(self, name: Any) -> None:
        if name is None:
            raise APIError(400, "model is required", param="model")
        if name != self.model_id:
            raise APIError(404, f"the model '{name}' does not exist here; this server serves '{self.model_id}'",
                           param="model", code="model_not_found")

    # -- jobs
    def submit(self, run: Callable[..., Any]) -> Job:
        return self.scheduler.submit(run, asyncio.get_running_loop())

    async def events(self, job: Job, request: Request | None = None) -> AsyncIterator[Any]:
        """A job's events. With ``request`` (non-streaming) the client is polled for a disconnect;
        a streaming response is cancelled by Starlette itself. Either way the job is cancelled."""
        finished = False
        try:
            while True:
                if request is None:
                    item = await job.events.get()
                else:
                    try:
                        item = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                        continue
                if item is END:
                    finished = True
                    return
                if isinstance(item, JobFailed):
                    finished = True
                    err = as_api_error(item.error)
                    err.counted = True  # the scheduler counted this failure
                    raise err
                if isinstance(item, NoticeEvent):
                    log.info("engine: %s", item.message)
                    continue
                yield item
        finally:
            if not finished:
                self.scheduler.cancel(job)

    async def collect(self, job: Job, request: Request) -> Collected:
        out = Collected()
        answer: list[str] = []
        thinking: list[str] = []
        async for ev in self.events(job, request):
            if isinstance(ev, TextEvent):
                (thinking if ev.channel == "thinking" else answer).append(ev.text)
            elif isinstance(ev, DoneEvent):
                out.done = ev
            elif isinstance(ev, TokenEvent):
                out.tokens.append(ev)
        if out.done is None:
            raise APIError(499, "the client closed the request")
        out.answer, out.thinking = "".join(answer), "".join(thinking)
        return out


def as_api_error(exc: BaseException) -> APIError:
    if isinstance(exc, APIError):
        return exc
    log.error("generation failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}")


def error_response(err: APIError, anthropic: bool) -> JSONResponse:
    body = anthropic_error_body(err) if anthropic else openai_error_body(err)
    return JSONResponse(body, status_code=err.status, headers=err.headers())


def endpoint(gw: Gateway, handler: Handler, *, anthropic: bool = False,
             public: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint: key check, 503 while stopping, every failure in the API's error format."""

    async def run(request: Request) -> Response:
        try:
            if not public:
                gw.check_key(request)
            if gw.scheduler.stopping:
                raise APIError(503, "the server is stopping", retry_after=5)
            return await handler(gw, request)
        except APIError as err:
            if err.status >= 500 and not err.counted:
                gw.scheduler.record_failure()
            return error_response(err, anthropic)
        except Exception as exc:  # noqa: BLE001 - a request never takes the server down
            gw.scheduler.record_failure()
            return error_response(as_api_error(exc), anthropic)

    return run
