"""Hub errors: one class per thing a user can act on, each with a one-line message that says what to do.

Why separate classes: the GUI and CLI react differently (offer a token dialog for
:class:`AuthenticationError`, a licence link for :class:`GatedRepoError`, a countdown for
:class:`RateLimitedError`, fall back to the other hub for :class:`NetworkError`/:class:`NotFoundError`).
Messages never contain a token: they pass through :func:`runtime.hub.tokens.redact`.

Each error also carries the facts behind its message (``host``, HTTP ``status``, ``kept_bytes``
of a resumable partial, a network ``reason``), so :func:`explain_failure` can tell a user what
happened in their words ("could not reach huggingface.co") instead of a transport's class name
(``ConnectError``), and a GUI can phrase and translate it.
"""

from __future__ import annotations

import errno
import http
import socket
from dataclasses import dataclass, field, replace

from runtime.devices import format_bytes
from runtime.errors import CancelledError, TernaryError
from runtime.hub.tokens import redact


def _clean(message: str) -> str:
    return redact(message)


class HubError(TernaryError):
    """Base class of every error raised by :mod:`runtime.hub`.

    ``attempts`` is set when every hub of an "auto" download failed: (hub name, its error) each.
    """

    def __init__(self, message: str, *, host: str | None = None, status: int | None = None,
                 kept_bytes: int | None = None, reason: str | None = None) -> None:
        super().__init__(_clean(message))
        self.host = host
        self.status = status
        self.kept_bytes = kept_bytes
        self.reason = reason
        self.attempts: list[tuple[str, HubError]] = []

    def details(self) -> dict[str, object]:
        """The facts to carry over when the error is re-raised with a new message."""
        return {"host": self.host, "status": self.status, "kept_bytes": self.kept_bytes, "reason": self.reason}


class NetworkError(HubError):
    """Offline, DNS failure, connection refused/reset, or timeouts after all retries.

    ``reason`` is one of :data:`NETWORK_REASONS`.
    """


class NotFoundError(HubError):
    """The repository, revision or file does not exist on that hub (404)."""


class AuthenticationError(HubError):
    """The hub rejected the token (401) or the repo is private and no token was given."""


class GatedRepoError(HubError):
    """The repo needs its licence accepted on the website (and a token for that account)."""


class PermissionDeniedError(HubError):
    """403 for a reason other than gating (token lacks read scope, repo disabled)."""


class RateLimitedError(HubError):
    """429 Too Many Requests; ``retry_after`` is the server's Retry-After in seconds when given."""

    def __init__(self, message: str, retry_after: float | None = None, **details: object) -> None:
        super().__init__(message, status=429, **details)  # type: ignore[arg-type]
        self.retry_after = retry_after


class ServerError(HubError):
    """The hub kept answering 5xx (or something unexpected) after all retries."""


class DiskFullError(HubError):
    """Not enough free space before starting, or ENOSPC while writing."""


class VerificationError(HubError):
    """A downloaded or local file failed size, sha256 or magic-byte checks (it is quarantined)."""

    def __init__(self, message: str, quarantined_to: str | None = None, **details: object) -> None:
        super().__init__(message, **details)  # type: ignore[arg-type]
        self.quarantined_to = quarantined_to


class HubPinMismatchError(HubError):
    """The hub's metadata (sha256/size) disagrees with the catalog's pin: refuse to download."""


class DownloadInProgressError(HubError):
    """The same file is already being downloaded (by this or another process)."""


class DownloadCancelledError(CancelledError, HubError):
    """The user cancelled; the partial file is kept so the next attempt resumes."""


# ------------------------------------------------------------------------------------------------
# What went wrong, in the user's words
# ------------------------------------------------------------------------------------------------

UNREACHABLE = "unreachable"  # DNS failure, connection refused, connect timeout: nothing got through
DROPPED = "dropped"  # the connection broke during the transfer
STALLED = "stalled"  # connected, then no data for too long
NO_ANSWER = "no_answer"  # the hub's metadata request got no answer in time
OFFLINE = "offline"  # downloads are switched off (HF_HUB_OFFLINE)
NETWORK_REASONS = (UNREACHABLE, DROPPED, STALLED, NO_ANSWER, OFFLINE)

# kinds of DownloadFailure beyond the network reasons
REFUSED = "refused"  # 401/403/gated: the server said no
NOT_FOUND = "not_found"
RATE_LIMITED = "rate_limited"
SERVER = "server"  # 5xx or a broken answer
DISK_FULL = "disk_full"
VERIFICATION = "verification"
OTHER = "other"


@dataclass(frozen=True)
class DownloadFailure:
    """One failure, classified: ``kind`` says what happened, the rest are the facts to say it with.

    ``detail`` is the hub error's own message for kinds whose wording is already the user's
    (disk full, verification); ``text()`` is the English sentence (CLI, logs); the GUI phrases
    each kind through its translation table instead.
    """

    kind: str
    host: str = ""
    status: int | None = None
    kept_bytes: int = 0
    retry_after: float | None = None
    detail: str = ""
    hub: str = ""  # "Hugging Face" / "ModelScope" when several hubs were tried
    also: tuple[DownloadFailure, ...] = field(default=())

    @property
    def status_text(self) -> str:
        """``403 Forbidden``: the code with its standard phrase."""
        if self.status is None:
            return ""
        try:
            return f"{self.status} {http.HTTPStatus(self.status).phrase}"
        except ValueError:
            return str(self.status)

    @property
    def resumable(self) -> bool:
        return self.kept_bytes > 0

    def text(self) -> str:
        """The failure as one English sentence, every hub included."""
        own = _sentence(self)
        if self.hub:
            own = f"{self.hub}: {own}"
        return " ".join([own] + [f.text() for f in self.also])


def _sentence(f: DownloadFailure) -> str:
    host = f.host or "the download server"
    resume = f"; {format_bytes(f.kept_bytes)} kept, Retry resumes" if f.resumable else ""
    if f.kind == UNREACHABLE:
        return f"could not reach {host} (no network or blocked){resume}."
    if f.kind == DROPPED:
        if f.resumable:
            return f"the connection to {host} dropped after {format_bytes(f.kept_bytes)}; Retry resumes."
        return f"the connection to {host} dropped before any data arrived; Retry starts again."
    if f.kind == STALLED:
        return f"the download from {host} stopped sending data{resume}."
    if f.kind == NO_ANSWER:
        return f"{host} did not answer (network or proxy problem){resume}."
    if f.kind == OFFLINE:
        return "downloads are switched off on this computer (HF_HUB_OFFLINE is set)."
    if f.kind == REFUSED:
        why = {401: "the access token is missing, wrong or expired",
               403: "the model may need its licence accepted on the website, or the token lacks read permission"
               }.get(f.status or 0, "access denied")
        return f"the server refused: {f.status_text or 'access denied'} ({why})."
    if f.kind == NOT_FOUND:
        return f"{host} does not have this file ({f.status_text or 'not found'}); try a mirror."
    if f.kind == RATE_LIMITED:
        wait = f"; try again in {f.retry_after:.0f} s" if f.retry_after is not None else "; try again later"
        return f"{host} is limiting downloads ({f.status_text or '429'}){wait}{resume}."
    if f.kind == SERVER:
        return f"{host} had a problem ({f.status_text or 'an unexpected answer'}); try again later or use a mirror" \
               f"{resume}."
    return f.detail.rstrip(".") + "." if f.detail else "an unexpected problem."


def network_reason(exc: BaseException) -> str:
    """Classify a transport exception (requests, httpx, urllib3, socket) without naming its class to the user.

    Why by class names along the MRO: requests, urllib3, httpx and huggingface_hub's wrappers each
    have their own hierarchy; all name connect failures ``Connect*``/``NameResolution*``/refused,
    and read stalls ``ReadTimeout``.
    """
    names = {c.__name__ for c in type(exc).__mro__}
    text = str(exc).lower()
    if names & {"ConnectTimeout", "ConnectError", "NewConnectionError", "NameResolutionError", "ProxyError",
                "ConnectionRefusedError", "gaierror", "SSLError", "OfflineModeIsEnabled"}:
        return OFFLINE if "OfflineModeIsEnabled" in names else UNREACHABLE
    if isinstance(exc, socket.gaierror) or (isinstance(exc, OSError) and exc.errno in (
            errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)):
        return UNREACHABLE
    if any(k in text for k in ("name or service not known", "nodename nor servname", "getaddrinfo",
                               "connection refused", "failed to establish a new connection",
                               "temporary failure in name resolution", "network is unreachable")):
        return UNREACHABLE
    if names & {"ReadTimeout", "ReadTimeoutError", "TimeoutError", "timeout", "PoolTimeout", "WriteTimeout"}:
        return STALLED
    return DROPPED


def _host_of(exc: BaseException) -> str:
    host = getattr(exc, "host", None)
    if isinstance(host, str) and host:
        return host
    try:  # httpx raises RuntimeError when the exception has no request attached
        url = getattr(getattr(exc, "request", None), "url", None)
    except RuntimeError:
        url = None
    if url is not None:
        from urllib.parse import urlsplit

        return urlsplit(str(url)).hostname or ""
    return ""


def explain_failure(exc: BaseException) -> DownloadFailure:
    """Map any exception a download can end with to a :class:`DownloadFailure` (kind + facts).

    Hub errors carry their facts; a raw transport exception that escaped (httpx ``ConnectError``,
    requests ``ConnectionError``, a socket error) is classified by :func:`network_reason`.
    """
    if isinstance(exc, HubError) and exc.attempts:
        parts = [_explain_one(e, hub) for hub, e in exc.attempts]
        return replace(parts[0], also=tuple(parts[1:]))
    return _explain_one(exc, "")


def _explain_one(exc: BaseException, hub: str) -> DownloadFailure:
    message = str(exc).strip()
    if isinstance(exc, HubError):
        common = {"host": exc.host or "", "status": exc.status, "kept_bytes": exc.kept_bytes or 0, "hub": hub}
        if isinstance(exc, NetworkError):
            return DownloadFailure(exc.reason if exc.reason in NETWORK_REASONS else UNREACHABLE, **common)
        if isinstance(exc, (AuthenticationError, GatedRepoError, PermissionDeniedError)):
            return DownloadFailure(REFUSED, **common)
        if isinstance(exc, NotFoundError):
            return DownloadFailure(NOT_FOUND, detail=message, **common)
        if isinstance(exc, RateLimitedError):
            return DownloadFailure(RATE_LIMITED, retry_after=exc.retry_after, **common)
        if isinstance(exc, ServerError):
            return DownloadFailure(SERVER, **common)
        if isinstance(exc, DiskFullError):
            return DownloadFailure(DISK_FULL, detail=message, **common)
        if isinstance(exc, (VerificationError, HubPinMismatchError)):
            return DownloadFailure(VERIFICATION, detail=message, **common)
        return DownloadFailure(OTHER, detail=message, **common)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int) and status >= 400:
        return DownloadFailure(status_kind(status), host=_host_of(exc), status=status, hub=hub)
    if isinstance(exc, (ConnectionError, TimeoutError, socket.error)) or _is_transport_error(exc):
        return DownloadFailure(network_reason(exc), host=_host_of(exc), hub=hub)
    if isinstance(exc, TernaryError):
        return DownloadFailure(OTHER, detail=message, hub=hub)
    return DownloadFailure(OTHER, detail=message.splitlines()[0] if message else "", hub=hub)


def status_kind(status: int) -> str:
    """The failure kind of an HTTP error status."""
    if status in (401, 403, 407, 451):
        return REFUSED
    if status in (404, 410):
        return NOT_FOUND
    if status == 429:
        return RATE_LIMITED
    return SERVER


def _is_transport_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"RequestException", "TransportError", "HTTPError", "ProtocolError", "HTTPException"})
