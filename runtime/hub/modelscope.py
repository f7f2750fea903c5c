"""ModelScope: resolve a repo file to a :class:`RemoteFile` through ModelScope's plain HTTP API.

Why not the official client: ``modelscope`` pulls a large dependency tree, and even the lean
``modelscope-hub`` adds ``cryptography``/``tqdm``/``filelock`` and persists credentials to
``~/.modelscope`` on ``login()``; it also has no public cancel. We need two GET endpoints, so we
call them with ``requests`` (environment proxies honoured) and reuse our own transfer engine:

* ``GET {endpoint}/api/v1/models/{owner}/{name}/repo/files?Revision=..&Recursive=True``
  -> ``{"Code", "Success", "Data": {"Files": [{"Path", "Name", "Type", "Size", "Sha256"}]}}``;
  ``Type == "tree"`` marks folders; ``Sha256`` may be missing for small non-LFS files.
* ``GET {endpoint}/api/v1/models/{owner}/{name}/repo?Revision=..&FilePath=..`` (redirects to a CDN,
  honours ``Range``).

Auth as the official client sends it: ``Authorization: Bearer`` plus the ``m_session_id`` cookie,
and only to the ModelScope endpoint's own origin (never to the CDN it redirects to).
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import requests

from runtime.hub.download import (
    USER_AGENT,
    RemoteFile,
    http_error_for,
    parse_retry_after,
    url_host,
    url_origin,
)
from runtime.hub.errors import (
    HubError,
    NetworkError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    network_reason,
)
from runtime.hub.settings import DEFAULT_MODELSCOPE_ENDPOINT
from runtime.hub.tokens import Secret


class ModelScopeHub:
    source = "modelscope"

    def __init__(self, endpoint: str = DEFAULT_MODELSCOPE_ENDPOINT, token: Secret | None = None,
                 timeout_s: float = 15.0, session: requests.Session | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.session = session or requests.Session()

    def _api(self, repo: str) -> str:
        owner, _, name = repo.partition("/")
        return f"{self.endpoint}/api/v1/models/{quote(owner, safe='')}/{quote(name, safe='')}"

    def download_url(self, repo: str, filename: str, revision: str) -> str:
        return f"{self._api(repo)}/repo?" + urlencode({"Revision": revision, "FilePath": filename})

    def _auth(self) -> dict[str, str]:
        if self.token is None:
            return {}
        return {"Authorization": f"Bearer {self.token.reveal()}", "Cookie": f"m_session_id={self.token.reveal()}"}

    def list_files(self, repo: str, revision: str = "master") -> list[dict]:
        """Every file entry of the repo (folders dropped)."""
        what = f"{repo} (ModelScope)"
        url = f"{self._api(repo)}/repo/files"
        host = url_host(self.endpoint)
        try:
            resp = self.session.get(url, params={"Revision": revision, "Recursive": "True"},
                                    headers={"User-Agent": USER_AGENT, **self._auth()}, timeout=self.timeout_s)
        except requests.exceptions.RequestException as exc:
            raise NetworkError(f"{what}: cannot reach ModelScope at {host} (offline, DNS or proxy problem)",
                               host=host, reason=network_reason(exc)) from None
        if resp.status_code == 429:
            retry = parse_retry_after(resp.headers.get("Retry-After"))
            raise RateLimitedError(f"{what}: rate-limited by ModelScope (429)"
                                   + (f"; try again in {retry:.0f} s" if retry is not None else ""), retry, host=host)
        if resp.status_code >= 500:
            raise ServerError(f"{what}: ModelScope server error ({resp.status_code})", host=host,
                              status=resp.status_code)
        if resp.status_code != 200:
            raise http_error_for(resp.status_code, resp, what)
        try:
            body = resp.json()
        except ValueError:
            raise ServerError(f"{what}: ModelScope answered with something that is not JSON", host=host) from None
        if not isinstance(body, dict) or not body.get("Success", body.get("Code") == 200):
            message = body.get("Message", "") if isinstance(body, dict) else ""
            code = body.get("Code") if isinstance(body, dict) else None
            if code in (404, 10010205001) or "not exist" in str(message).lower() or "not found" in str(message).lower():
                raise NotFoundError(f"{what}: repository not found on ModelScope", host=host)
            raise ServerError(f"{what}: ModelScope error {code}: {message}", host=host)
        files = (body.get("Data") or {}).get("Files") or []
        return [f for f in files if isinstance(f, dict) and f.get("Type") != "tree"]

    def resolve(self, repo: str, filename: str, revision: str = "master") -> RemoteFile:
        try:
            files = self.list_files(repo, revision)
        except HubError:
            raise
        entry = next((f for f in files if f.get("Path") == filename), None)
        if entry is None:
            raise NotFoundError(f"{repo}/{filename}: file not found in the repo on ModelScope",
                                host=url_host(self.endpoint))
        sha = entry.get("Sha256") or None
        size = entry.get("Size")
        return RemoteFile(source="modelscope", repo=repo, filename=filename, revision=revision,
                          url=self.download_url(repo, filename, revision), size=int(size) if size is not None else None,
                          sha256=sha.lower() if sha else None, etag=sha or entry.get("Revision"), token=self.token,
                          auth_origins=frozenset({url_origin(self.endpoint)}), send_session_cookie=True)
