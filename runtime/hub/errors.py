"""Hub errors: one class per thing a user can act on, each with a one-line message that says what to do.

Why separate classes: the GUI and CLI react differently (offer a token dialog for
:class:`AuthenticationError`, a licence link for :class:`GatedRepoError`, a countdown for
:class:`RateLimitedError`, fall back to the other hub for :class:`NetworkError`/:class:`NotFoundError`).
Messages never contain a token: they pass through :func:`runtime.hub.tokens.redact`.
"""

from __future__ import annotations

from runtime.errors import CancelledError, TernaryError


def _clean(message: str) -> str:
    from runtime.hub.tokens import redact

    return redact(message)


class HubError(TernaryError):
    """Base class of every error raised by :mod:`runtime.hub`."""

    def __init__(self, message: str) -> None:
        super().__init__(_clean(message))


class NetworkError(HubError):
    """Offline, DNS failure, connection refused/reset, or timeouts after all retries."""


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

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerError(HubError):
    """The hub kept answering 5xx (or something unexpected) after all retries."""


class DiskFullError(HubError):
    """Not enough free space before starting, or ENOSPC while writing."""


class VerificationError(HubError):
    """A downloaded or local file failed size, sha256 or magic-byte checks (it is quarantined)."""

    def __init__(self, message: str, quarantined_to: str | None = None) -> None:
        super().__init__(message)
        self.quarantined_to = quarantined_to


class HubPinMismatchError(HubError):
    """The hub's metadata (sha256/size) disagrees with the catalog's pin: refuse to download."""


class DownloadInProgressError(HubError):
    """The same file is already being downloaded (by this or another process)."""


class DownloadCancelledError(CancelledError, HubError):
    """The user cancelled; the partial file is kept so the next attempt resumes."""


class TokenStorageError(HubError):
    """The OS keyring refused to store/read/delete a token (locked, no backend)."""
