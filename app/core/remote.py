"""Chatting with a model served elsewhere: any OpenAI-compatible endpoint (another Ternary Chat,
llama-server, vLLM, SGLang, Ollama).

Why an engine-shaped adapter (:class:`RemoteEngine`): the app's worker, history saver, Stop,
Regenerate and gauges already speak ``Engine.generate``'s events, so a remote model that yields the
same :class:`~runtime.generation.TextEvent` / :class:`~runtime.generation.DoneEvent` needs no second
chat path. Qt-free: the HTTP and SSE handling is tested against a loopback server.

A remote model is addressed in the app by a reference string ``remote:<name>#<model id>`` (see
:func:`remote_ref`); the remote's base URL lives in the settings, its key in the keyring
(:mod:`app.core.secrets`).

Answers from documents and summaries fit text into the model's context by the model's own token
count, so :class:`RemoteEngine` learns the remote's context length (``/v1/models``, else
llama-server's ``/props``) and counts tokens through the remote's tokenizer: vLLM's and Ternary
Chat's ``POST /tokenize``, else llama-server's ``/apply-template`` + ``/tokenize``, else an upper
bound from the UTF-8 bytes (see :func:`byte_upper_bound`).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

from runtime.errors import TernaryError
from runtime.generation import CancelToken, DoneEvent, GenerationStats, TextEvent
from runtime.hub.tokens import Secret, redact

log = logging.getLogger(__name__)

REF_PREFIX = "remote:"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # longest silence between two stream chunks (a big prompt's prefill on a slow remote)


# How RemoteEngine.count_tokens counts (RemoteEngine.info["token_counting"])
COUNT_EXACT = "exact"
COUNT_UPPER_BOUND = "upper bound (bytes)"
# An upper bound's allowance for chat markup: per message (role tokens, start/end markers) and once per prompt
# (the generation prompt, empty thinking tags, a default system prompt some templates add: Qwen2.5's, Llama 3.1's)
BOUND_PER_MESSAGE = 8
BOUND_PER_PROMPT = 64
BOUND_PER_TEXT = 2  # the special tokens (BOS/EOS) a plain text may get: they have no bytes of their own
COUNT_PIECE_CHARS = 200_000  # a longer text is counted in pieces (cut after a line break): the body limit
_ABSENT = (404, 405, 501)  # "no such endpoint"
_COUNT_CACHE = 2048


class RemoteError(TernaryError):
    """A remote endpoint could not be used; the message says what happened and what to check.
    ``status``: the HTTP status when the server answered with an error, else None."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _Absent(Exception):
    """Internal: the remote has no such endpoint (or answers it in another format)."""


def byte_upper_bound(messages_or_text: Any) -> int:
    """An upper bound of the tokens of a text or a chat prompt, without the model's tokenizer.

    Every BPE token (byte-level BPE, SentencePiece with byte fallback) covers at least one byte of
    UTF-8 text, so a text has at most as many tokens as bytes, plus the special tokens added around it
    (:data:`BOUND_PER_TEXT`: BOS, SentencePiece's leading space). Messages add :data:`BOUND_PER_MESSAGE`
    per message for the chat markup and :data:`BOUND_PER_PROMPT` once for what the template adds (the
    one part that is an allowance, not a proof: a template with a longer built-in system prompt could
    exceed it). Real counts are usually 3-4x lower for English, so text fitted by this bound fits, in
    fewer passages or more parts than the exact count would allow.
    """
    if isinstance(messages_or_text, str):
        return len(messages_or_text.encode("utf-8")) + BOUND_PER_TEXT
    total = BOUND_PER_PROMPT
    for m in messages_or_text:
        total += BOUND_PER_MESSAGE + len(str(m.get("role", "")).encode("utf-8"))
        total += len(str(m.get("content") or "").encode("utf-8"))
    return total


def _positive_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def context_of_entry(entry: dict[str, Any]) -> int:
    """A ``/v1/models`` entry's context length: ``meta.context_length`` (Ternary Chat), ``max_model_len``
    (vLLM), ``context_length`` / ``context_window`` (others); 0 when it has none."""
    meta = entry.get("meta")
    candidates = [meta.get("context_length") if isinstance(meta, dict) else None,
                  entry.get("max_model_len"), entry.get("context_length"), entry.get("context_window")]
    for value in candidates:
        if _positive_int(value):
            return int(value)
    return 0


def _pieces(text: str, size: int | None = None) -> list[str]:
    """``text`` in consecutive pieces of at most ``size`` (:data:`COUNT_PIECE_CHARS`) characters, each cut after
    a line break where there is one (a token rarely spans a line break, so the counts add up)."""
    size = size or COUNT_PIECE_CHARS
    out, start = [], 0
    while len(text) - start > size:
        cut = text.rfind("\n", start, start + size)
        end = cut + 1 if cut > start else start + size
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


class RemoteInfo(dict):
    """The remote model's info: a dict (the worker's ``as_dict``) that also reads as attributes, like the
    engine's ``ModelInfo`` (the summarizer reads ``engine.info.context_length``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class RemoteRef:
    name: str
    model: str


def remote_ref(name: str, model: str) -> str:
    """The string the model picker and ``last_model`` keep for a remote model."""
    return f"{REF_PREFIX}{name}#{model}"


def parse_remote_ref(ref: str) -> RemoteRef | None:
    """``remote:<name>#<model>`` -> RemoteRef; None for a local model path."""
    if not ref.startswith(REF_PREFIX) or "#" not in ref:
        return None
    name, _, model = ref[len(REF_PREFIX):].partition("#")
    return RemoteRef(name, model) if name and model else None


def normalize_base_url(url: str) -> str:
    """``http://host:port`` or ``…/v1`` -> the URL the ``/v1/...`` paths are appended to. Raises ValueError."""
    url = url.strip().rstrip("/")
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError("The address must start with http:// or https:// (e.g. http://192.168.1.20:8731).")
    if url.lower().endswith("/v1"):
        url = url[:-3]
    if len(url.split("://", 1)[1]) == 0:
        raise ValueError("The address has no host name.")
    return url


def sampling_params(settings: Any) -> dict[str, Any]:
    """The OpenAI chat-completions parameters for the app's ``GenerationSettings`` (``None`` = remote's default).

    ``top_k``, ``min_p`` and ``repetition_penalty`` are not OpenAI fields but llama-server, vLLM,
    SGLang and Ternary Chat accept them as extras; servers that do not know them ignore them.
    """
    if settings is None:
        return {}
    out: dict[str, Any] = {}
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed", "top_k", "min_p",
                 "repetition_penalty"):
        value = getattr(settings, name)
        if value is not None:
            out[name] = value
    if settings.max_new_tokens:
        out["max_tokens"] = int(settings.max_new_tokens)
    if settings.stop:
        out["stop"] = list(settings.stop)
    if settings.enable_thinking is not None:  # Qwen3 templates on vLLM / SGLang / llama-server
        out["chat_template_kwargs"] = {"enable_thinking": bool(settings.enable_thinking)}
    if settings.reasoning_effort:
        out["reasoning_effort"] = settings.reasoning_effort
    return out


def _error_detail(response: requests.Response) -> str:
    """The server's own error message (OpenAI ``{"error": {"message"}}``, or plain text), shortened."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(err)[:300]
    return str(body)[:300]


def _lines(response: requests.Response) -> Iterator[bytes]:
    """The body's lines as they arrive. Why not ``iter_lines``: it reads fixed 512-byte blocks, so a
    short SSE event waits for later ones (the first token would show late, Stop would lose text)."""
    raw = response.raw
    buffer = b""
    while True:
        data = raw.read1(65536)
        if not data:
            break
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.rstrip(b"\r")
    if buffer:
        yield buffer


def _shutdown(response: requests.Response) -> None:
    """Unblock a read that waits on a silent server: shut the socket down (close() alone does not wake it)."""
    try:
        sock = response.raw._fp.fp.raw._sock  # http.client response -> buffered reader -> SocketIO -> socket
        sock.shutdown(socket.SHUT_RDWR)
    except (AttributeError, OSError):
        pass
    response.close()


class RemoteClient:
    """HTTP calls to one OpenAI-compatible endpoint. ``api_key`` is sent as a Bearer header, never logged."""

    def __init__(self, base_url: str, api_key: str | None = None, read_timeout: float = READ_TIMEOUT_S) -> None:
        self.base_url = normalize_base_url(base_url)
        self._key = api_key or None
        if self._key:
            Secret(self._key)  # registered with the redaction of logs and messages
        self.read_timeout = read_timeout
        self._session = requests.Session()
        self._session.trust_env = False  # a proxy from the environment must not see the key or the chat

    def __repr__(self) -> str:
        return f"RemoteClient({self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.base_url + path
        try:
            response = self._session.request(method, url, headers=self._headers(),
                                             timeout=(CONNECT_TIMEOUT_S, self.read_timeout), **kwargs)
        except requests.exceptions.ConnectionError as exc:
            if isinstance(exc, requests.exceptions.ConnectTimeout):
                raise RemoteError(f"{self.base_url} did not answer within {CONNECT_TIMEOUT_S:g} s: check the "
                                  "address and that the server is running.") from None
            raise RemoteError(f"Could not connect to {self.base_url}: is the server running and the address "
                              "right?") from None
        except requests.exceptions.Timeout:
            raise RemoteError(f"{self.base_url} stopped answering (no data for {self.read_timeout:g} s).") from None
        except requests.exceptions.RequestException as exc:
            raise RemoteError(f"Request to {self.base_url} failed: {type(exc).__name__}.") from None
        if response.status_code >= 400:
            detail = redact(_error_detail(response))  # a server that echoes the request must not show the key
            response.close()
            code = response.status_code
            if code in (401, 403):
                raise RemoteError(f"{self.base_url} refused the API key (HTTP {code}): set the right key for this "
                                  f"remote. Server said: {detail}", code)
            if code == 404:
                raise RemoteError(f"{self.base_url}{path} was not found (HTTP 404): the address may not be an "
                                  f"OpenAI-compatible server, or the model is not served there. Server said: {detail}",
                                  code)
            if code in (429, 503):
                raise RemoteError(f"{self.base_url} is busy (HTTP {code}); try again in a moment. Server said: {detail}",
                                  code)
            raise RemoteError(f"{self.base_url} answered HTTP {code}: {detail}", code)
        return response

    def get_json(self, path: str) -> Any:
        """``GET path`` -> its JSON body. Raises :class:`RemoteError` (also for a body that is not JSON)."""
        return self._json(self._request("GET", path), path)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """``POST path`` with a JSON body -> the answer's JSON body."""
        return self._json(self._request("POST", path, json=body), path)

    def _json(self, response: requests.Response, path: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise RemoteError(f"{self.base_url}{path} did not answer with JSON.") from None
        finally:
            response.close()

    def model_entries(self) -> list[dict[str, Any]]:
        """The entries of ``GET /v1/models`` (each with an ``id``; vLLM's carry ``max_model_len``, Ternary
        Chat's ``meta.context_length``), in the server's order."""
        body = self.get_json("/v1/models")
        try:
            data = body.get("data")
            entries = [dict(m, id=str(m["id"])) for m in data]
        except (AttributeError, KeyError, TypeError, ValueError):
            raise RemoteError(f"{self.base_url}/v1/models did not return an OpenAI model list.") from None
        return entries

    def list_models(self) -> list[str]:
        """The ids of ``GET /v1/models``, in the server's order."""
        return [m["id"] for m in self.model_entries()]

    def stream_chat(self, model: str, messages: list[dict[str, str]], params: dict[str, Any],
                    cancel: CancelToken | None = None) -> Iterator[dict[str, Any]]:
        """POST ``/v1/chat/completions`` with ``stream=true``; yields each SSE chunk's JSON object.

        Stop: a watcher closes the connection as soon as ``cancel`` is set, so a stalled server
        cannot keep the chat waiting; the iterator then just ends. A stream that ends without
        ``[DONE]`` (the server died mid-answer) raises :class:`RemoteError`.
        """
        body = {"model": model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, **params}
        response = self._request("POST", "/v1/chat/completions", json=body, stream=True)
        done = threading.Event()

        def watch(cancel: CancelToken) -> None:
            while not done.is_set():
                if cancel.wait(0.05):
                    _shutdown(response)
                    return

        if cancel is not None:
            threading.Thread(target=watch, args=(cancel,), name="remote-stop", daemon=True).start()
        finished = False
        try:
            for raw in _lines(response):
                if cancel is not None and cancel.cancelled:
                    return
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue  # comments (": keep-alive"), event names, blank separators
                payload = line[5:].strip()
                if payload == "[DONE]":
                    finished = True
                    return
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise RemoteError(f"{self.base_url} sent a stream chunk that is not JSON.") from None
                if isinstance(chunk, dict) and "error" in chunk:
                    err = chunk["error"]
                    raise RemoteError(f"{self.base_url} stopped with an error: "
                                      f"{err.get('message') if isinstance(err, dict) else err}")
                yield chunk
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, AttributeError, ValueError,
                OSError) as exc:
            if cancel is not None and cancel.cancelled:
                return  # our own close() ended the read
            if isinstance(exc, requests.exceptions.Timeout | urllib3.exceptions.ReadTimeoutError):
                raise RemoteError(f"{self.base_url} stopped answering in the middle of the answer (no data for "
                                  f"{self.read_timeout:g} s); what arrived is kept.") from None
            if isinstance(exc, requests.exceptions.ConnectionError | urllib3.exceptions.ProtocolError):
                raise RemoteError(f"The connection to {self.base_url} was lost in the middle of the answer "
                                  f"({type(exc).__name__}); what arrived is kept.") from None
            raise RemoteError(f"Reading the answer from {self.base_url} failed: {type(exc).__name__}.") from None
        finally:
            done.set()
            response.close()
        if not finished and not (cancel is not None and cancel.cancelled):
            raise RemoteError(f"{self.base_url} ended the stream in the middle of the answer; what arrived is kept.")

    def close(self) -> None:
        self._session.close()


class RemoteEngine:
    """One model of a remote server, shaped like :class:`runtime.engine.Engine` for the app's worker."""

    remote = True

    def __init__(self, name: str, base_url: str, model: str, api_key: str | None = None,
                 read_timeout: float = READ_TIMEOUT_S) -> None:
        self.name = name
        self.model = model
        self.client = RemoteClient(base_url, api_key, read_timeout=read_timeout)
        # context_length 0 = not reported (learned by check()); token_counting is set once a way to count worked
        self.info = RemoteInfo(name=model, device=self.client.base_url, backend="remote", remote=True,
                               remote_name=name, context_length=0)
        self._methods = ["tokenize", "llama", "bytes"]  # ways to count still possible, the first one in use
        self._counts: dict[Any, int] = {}

    def check(self) -> None:
        """Fail early (at "load") when the server is unreachable, refuses the key or lacks the model; learn the
        context length and how tokens can be counted (neither fails the load: chatting needs neither)."""
        entries = self.client.model_entries()
        models = [m["id"] for m in entries]
        if self.model not in models:
            raise RemoteError(f"{self.client.base_url} does not serve {self.model!r}; it serves: "
                              f"{', '.join(models[:10]) or 'nothing'}.")
        entry = entries[models.index(self.model)]
        self.info["context_length"] = context_of_entry(entry) or self._props_context()
        try:  # finds the way to count now (messages: the template endpoint too), so the app can say how it counts
            self.count_tokens([{"role": "user", "content": "Hello"}])
        except RemoteError as exc:
            log.info("%s: token counting not decided yet: %s", self.client.base_url, exc)

    def _props_context(self) -> int:
        """llama-server's context per request: ``GET /props`` -> ``default_generation_settings.n_ctx``; else 0."""
        try:
            props = self.client.get_json("/props")
        except RemoteError:
            return 0
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        return _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else 0

    def require_context(self) -> int:
        """The context length, for fitting documents; raises :class:`RemoteError` when the remote does not report it."""
        ctx = int(self.info.get("context_length") or 0)
        if ctx < 1:
            raise RemoteError(f"{self.name} does not report its context length; questions about documents and "
                              "summaries need it to fit the text. Serve the model with Ternary Chat, vLLM or "
                              "llama-server (they report it), or use a local model.")
        return ctx

    def default_settings(self) -> dict[str, Any]:
        return {}  # the remote decides its own defaults

    @property
    def token_counting(self) -> str | None:
        """:data:`COUNT_EXACT`, :data:`COUNT_UPPER_BOUND`, or None before the first count."""
        return self.info.get("token_counting")

    def count_tokens(self, messages_or_text: Any, settings: Any = None) -> int:
        """Prompt tokens of ``messages`` (after the remote's chat template, generation prompt included, as a chat
        request renders them) or of a text, by the remote's own tokenizer: ``POST /tokenize`` (vLLM, Ternary Chat),
        else llama-server's ``/apply-template`` + ``/tokenize``, else :func:`byte_upper_bound`. The first way that
        works is kept for this engine (``info["token_counting"]`` says whether it is exact). A text longer than
        :data:`COUNT_PIECE_CHARS` is counted in pieces. Raises :class:`RemoteError` when the remote fails."""
        is_text = isinstance(messages_or_text, str)
        if is_text:
            key: Any = ("text", messages_or_text)
        else:
            messages_or_text = [{"role": m["role"], "content": m.get("content") or ""} for m in messages_or_text]
            key = ("chat", json.dumps(messages_or_text, ensure_ascii=False),
                   json.dumps(self._template_fields(settings), sort_keys=True))
        if key in self._counts:
            return self._counts[key]
        if is_text and len(messages_or_text) > COUNT_PIECE_CHARS and self._methods[0] != "bytes":
            n = sum(self.count_tokens(piece) for piece in _pieces(messages_or_text))
        else:
            n = self._count(messages_or_text, settings)
        if len(self._counts) >= _COUNT_CACHE:
            self._counts.clear()
        self._counts[key] = n
        return n

    def _count(self, what: Any, settings: Any) -> int:
        while True:
            method = self._methods[0]
            try:
                if method == "tokenize":
                    n = self._count_tokenize(what, settings)
                elif method == "llama":
                    n = self._count_llama(what, settings)
                else:
                    n = byte_upper_bound(what)
            except _Absent:
                self._methods.pop(0)  # never tried again for this engine
                continue
            how = COUNT_UPPER_BOUND if method == "bytes" else COUNT_EXACT
            if self.info.get("token_counting") != how:  # once exact, it changes only if a later endpoint is missing
                self.info["token_counting"] = how
                log.info("%s counts tokens by %s (%s)", self.client.base_url, method, how)
            return n

    @staticmethod
    def _template_fields(settings: Any) -> dict[str, Any]:
        """What of the settings reaches the chat template (sent with a count as :func:`sampling_params` sends it)."""
        out: dict[str, Any] = {}
        if settings is not None and getattr(settings, "enable_thinking", None) is not None:
            out["chat_template_kwargs"] = {"enable_thinking": bool(settings.enable_thinking)}
        if settings is not None and getattr(settings, "reasoning_effort", None):
            out["reasoning_effort"] = settings.reasoning_effort
        return out

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self.client.post_json(path, body)
        except RemoteError as exc:
            if exc.status in _ABSENT:
                raise _Absent from None
            raise

    def _count_tokenize(self, what: Any, settings: Any) -> int:
        """vLLM's (and ``ternary serve``'s) ``POST /tokenize`` -> ``count``."""
        body: dict[str, Any] = {"model": self.model}
        if isinstance(what, str):
            body["prompt"] = what
        else:
            body.update(messages=what, add_generation_prompt=True, **self._template_fields(settings))
        answer = self._post("/tokenize", body)
        count = answer.get("count") if isinstance(answer, dict) else None
        if isinstance(count, bool) or not isinstance(count, int):
            raise _Absent  # e.g. llama-server: its /tokenize wants "content" and answers {"tokens": []}
        return count

    def _count_llama(self, what: Any, settings: Any) -> int:
        """llama-server: ``POST /apply-template`` renders the messages, ``POST /tokenize`` counts the text."""
        text = what
        if not isinstance(what, str):
            rendered = self._post("/apply-template", {"messages": what, **self._template_fields(settings)})
            text = rendered.get("prompt") if isinstance(rendered, dict) else None
            if not isinstance(text, str):
                raise _Absent
        answer = self._post("/tokenize", {"content": text, "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise _Absent
        return len(tokens)

    def memory_stats(self) -> dict[str, Any]:
        return {"remote": True}

    def generate(self, messages: list[dict[str, str]], settings: Any = None, cancel: CancelToken | None = None,
                 started_at: float = 0.0) -> Iterator[TextEvent | DoneEvent]:
        """Stream one reply as the engine would: text and thinking events, then a DoneEvent with the
        times measured here (first token, decode tok/s from the remote's usage or the chunks counted)."""
        t0 = started_at or time.perf_counter()
        text: list[str] = []
        thinking: list[str] = []
        t_first = 0.0
        chunks = 0
        usage: dict[str, Any] = {}
        finish = "stop"
        stats = GenerationStats(device="remote")
        try:
            for chunk in self.client.stream_chat(self.model, list(messages), sampling_params(settings), cancel):
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    for key, channel, sink in (("reasoning_content", "thinking", thinking),
                                               ("reasoning", "thinking", thinking), ("content", "answer", text)):
                        piece = delta.get(key)
                        if isinstance(piece, str) and piece:
                            if not t_first:
                                t_first = time.perf_counter()
                            chunks += 1
                            sink.append(piece)
                            yield TextEvent(piece, channel)  # type: ignore[arg-type]
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
        finally:
            now = time.perf_counter()
            stats.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            stats.generated_tokens = int(usage.get("completion_tokens") or chunks)
            stats.ttft_s = (t_first - t0) if t_first else 0.0
            stats.total_s = now - t0
            if t_first and now > t_first and stats.generated_tokens > 1:
                stats.decode_tok_s = (stats.generated_tokens - 1) / (now - t_first)
        if cancel is not None and cancel.cancelled:
            finish = "cancelled"
        stats.finish_reason = finish if finish in ("stop", "length", "cancelled") else "stop"  # type: ignore[assignment]
        yield DoneEvent(stats, "".join(text), "".join(thinking))

    def close(self) -> None:
        self.client.close()
