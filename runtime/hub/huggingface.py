"""Hugging Face: resolve a repo file to a :class:`RemoteFile` (URL, size, sha256) before downloading.

Why ``huggingface_hub`` only for metadata: its ``model_info``/``get_paths_info`` give the commit and
the LFS sha256 + size, with the Hub's error headers mapped to precise exceptions; its own
downloader, however, deletes partial files and has no cancel (see :mod:`runtime.hub.download`).
We pass ``endpoint=`` and ``token=`` on every call (``HF_ENDPOINT`` is read only at import, and
``login()`` would write a plaintext token file), and ``token=False`` when we have none, so the
library never picks up a token file behind the user's back.

Auth forwarding follows huggingface_hub 2.x (``utils/_http.py``, ``_HUB_ORIGINS``): the token goes
to the configured endpoint's origin and the official Hub origins (huggingface.co, hf.co) only;
a redirect to a CDN on another host is fetched without it (the CDN URL is pre-signed).
"""

from __future__ import annotations

from runtime.hub.download import RemoteFile, url_host, url_origin
from runtime.hub.errors import (
    OFFLINE,
    AuthenticationError,
    GatedRepoError,
    HubError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    network_reason,
)
from runtime.hub.settings import DEFAULT_HF_ENDPOINT
from runtime.hub.tokens import Secret

OFFICIAL_ORIGINS = (DEFAULT_HF_ENDPOINT, "https://hf.co")


def _network_error_types() -> tuple[type[BaseException], ...]:
    """Connection-level exception classes of whichever HTTP stack this huggingface_hub uses."""
    import requests

    types: list[type[BaseException]] = [requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                                        ConnectionError, TimeoutError]
    try:
        from huggingface_hub.utils import httpx  # httpx (1.x) or httpx2 (2.x), exported for this purpose

        types.append(httpx.TransportError)
    except Exception:
        pass
    return tuple(types)


def _translate(exc: BaseException, what: str, has_token: bool, host: str | None = None) -> HubError:
    """Map a huggingface_hub / transport exception to a user-facing HubError (``host``: the endpoint's)."""
    from huggingface_hub import errors as hf_errors

    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    facts = {"host": host, "status": status if isinstance(status, int) else None}

    if isinstance(exc, hf_errors.GatedRepoError):
        return GatedRepoError(f"{what}: this repo is gated; open it on the Hugging Face website, accept the licence, "
                              + ("and check that your token belongs to that account"
                                 if has_token else "then add a token (ternary token set hf)"), **facts)
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return NotFoundError(f"{what}: revision not found on Hugging Face", **facts)
    # RemoteEntryNotFoundError is 1.x+; 0.x raises EntryNotFoundError for the same 404
    if isinstance(exc, getattr(hf_errors, "RemoteEntryNotFoundError", hf_errors.EntryNotFoundError)):
        return NotFoundError(f"{what}: file not found in the repo on Hugging Face", **facts)
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return NotFoundError(f"{what}: repository not found on Hugging Face"
                             + ("" if has_token else " (if it is private, add a token: ternary token set hf)"), **facts)
    if isinstance(exc, hf_errors.HfHubHTTPError):
        if status == 401:
            return AuthenticationError(f"{what}: Hugging Face rejected the token (401 invalid credentials); "
                                       "set a new one with: ternary token set hf", **facts)
        if status == 403:
            return PermissionDeniedError(f"{what}: access denied by Hugging Face (403); the token may lack read "
                                         "permission", **facts)
        if status == 429:
            from runtime.hub.download import parse_retry_after

            retry = parse_retry_after(response.headers.get("Retry-After")) if response is not None else None
            return RateLimitedError(f"{what}: rate-limited by Hugging Face (429)"
                                    + (f"; try again in {retry:.0f} s" if retry is not None else ""), retry, host=host)
        if status is not None and status >= 500:
            return ServerError(f"{what}: Hugging Face server error ({status})", **facts)
        return ServerError(f"{what}: Hugging Face request failed ({status})", **facts)
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return NetworkError(f"{what}: HF_HUB_OFFLINE is set; unset it to download", host=host, reason=OFFLINE)
    if isinstance(exc, _network_error_types()):
        return NetworkError(f"{what}: cannot reach Hugging Face at {host or 'its endpoint'} (offline, DNS or proxy "
                            "problem)", host=host, reason=network_reason(exc))
    return ServerError(f"{what}: unexpected Hugging Face response ({type(exc).__name__})", **facts)


class HuggingFaceHub:
    source = "hf"

    def __init__(self, endpoint: str = DEFAULT_HF_ENDPOINT, token: Secret | None = None, timeout_s: float = 15.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def auth_origins(self) -> frozenset[tuple[str, str, int]]:
        return frozenset(url_origin(u) for u in (self.endpoint, *OFFICIAL_ORIGINS))

    def resolve(self, repo: str, filename: str, revision: str = "main") -> RemoteFile:
        """Commit, size and LFS sha256 of ``repo/filename`` (raises HubError subclasses)."""
        from huggingface_hub import HfApi, hf_hub_url

        what = f"{repo}/{filename}"
        token: str | bool = self.token.reveal() if self.token is not None else False
        api = HfApi(endpoint=self.endpoint, token=token)
        try:
            info = api.model_info(repo, revision=revision, token=token, timeout=self.timeout_s)
            commit = info.sha or revision
            entries = api.get_paths_info(repo, [filename], revision=commit, token=token)
        except Exception as exc:  # noqa: BLE001 - translated into a precise HubError
            raise _translate(exc, what, self.token is not None, url_host(self.endpoint)) from None
        entry = next((e for e in entries if getattr(e, "path", None) == filename and hasattr(e, "size")), None)
        if entry is None:
            raise NotFoundError(f"{what}: file not found in the repo on Hugging Face (revision {commit[:12]})")
        lfs = getattr(entry, "lfs", None)
        sha256 = lfs.sha256.lower() if lfs is not None and getattr(lfs, "sha256", None) else None
        size = int(lfs.size) if lfs is not None and getattr(lfs, "size", None) is not None else int(entry.size)
        url = hf_hub_url(repo, filename, revision=commit, endpoint=self.endpoint)
        return RemoteFile(source="hf", repo=repo, filename=filename, revision=commit, url=url, size=size,
                          sha256=sha256, etag=sha256 or getattr(entry, "blob_id", None), token=self.token,
                          auth_origins=self.auth_origins())
