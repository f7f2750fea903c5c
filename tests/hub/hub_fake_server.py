"""A real HTTP server on 127.0.0.1 that speaks the parts of the Hugging Face and ModelScope APIs
that :mod:`runtime.hub` uses, plus a separate "CDN" server (another origin) the hubs redirect to.

Hugging Face: ``GET /api/models/{repo}/revision/{rev}``, ``POST /api/models/{repo}/paths-info/{rev}``,
``GET /{repo}/resolve/{rev}/{file}`` (302 to the CDN with X-Linked-Size / X-Linked-Etag / ETag /
X-Repo-Commit, or served directly for non-LFS files). ModelScope: ``GET
/api/v1/models/{repo}/repo/files`` and ``GET /api/v1/models/{repo}/repo?FilePath=`` (302 to CDN).
Auth is ``Authorization: Bearer``; error responses carry the Hub's ``X-Error-Code`` headers.
Misbehaviour knobs per file: drop the connection after N bytes, stall, ignore Range, serve other
bytes than the metadata promises, queue status codes (429/503) before succeeding.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from runtime.hub.download import RetryPolicy
from runtime.hub.paths import HubPaths
from runtime.hub.store import ModelStore

COMMIT = "c0ffee" * 6 + "beef"


@dataclass
class FakeFile:
    repo: str
    path: str
    content: bytes
    lfs: bool = True
    advertised_sha256: str | None = None  # what the metadata says (default: the real hash)
    advertised_size: int | None = None
    served: bytes | None = None  # what the CDN actually sends (default: content)
    drop_after: int | list[int] | None = None  # close the socket after this many body bytes (list: per response) ...
    drop_times: int = 0  # ... this many times
    stall_after: int | None = None  # send this many bytes, then stall (until the server stops)
    ignore_range: bool = False
    ignore_range_times: int = 0  # ignore Range on this many ranged requests, then honour it
    statuses: list[int] = field(default_factory=list)  # queued statuses for the CDN GET, popped one by one
    retry_after: str | None = None
    chunk_delay_s: float = 0.0

    @property
    def sha256(self) -> str:
        return self.advertised_sha256 or hashlib.sha256(self.content).hexdigest()

    @property
    def size(self) -> int:
        return self.advertised_size if self.advertised_size is not None else len(self.content)

    @property
    def body(self) -> bytes:
        return self.served if self.served is not None else self.content


@dataclass
class RepoState:
    private_token: str | None = None  # token needed to see it at all
    gated_token: str | None = None  # token of the account that accepted the licence
    valid_tokens: set[str] = field(default_factory=set)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _record(self, kind: str) -> None:
        with self.hub.lock:
            self.hub.requests.append({"server": kind, "method": self.command, "path": self.path,
                                      "headers": {k.lower(): v for k, v in self.headers.items()}})

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None = None, message: str | None = None,
               headers: dict | None = None) -> None:
        h = dict(headers or {})
        if code:
            h["X-Error-Code"] = code
        if message:
            h["X-Error-Message"] = message
        self._json(status, {"error": message or code or str(status)}, h)

    def _drain(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def _serve_bytes(self, f: FakeFile, extra_headers: dict | None = None) -> None:
        if f.statuses:
            with self.hub.lock:
                status = f.statuses.pop(0)
            h = {"Retry-After": f.retry_after} if f.retry_after is not None else {}
            self._error(status, headers=h)
            return
        body = f.body
        total = len(body)
        start = 0
        rng = self.headers.get("Range")
        status = 200
        ignore = f.ignore_range
        if rng and f.ignore_range_times > 0:
            with self.hub.lock:
                f.ignore_range_times -= 1
            ignore = True
        if rng and not ignore:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng)
            if m:
                start = int(m.group(1))
                if start >= total:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{total}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(total - start))
        self.send_header("ETag", f'"{f.sha256}"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        data = body[start:]
        limit = None
        with self.hub.lock:
            if f.drop_after is not None and f.drop_times > 0:
                f.drop_times -= 1
                limit = f.drop_after.pop(0) if isinstance(f.drop_after, list) else f.drop_after
        stall = f.stall_after
        sent = 0
        piece = 16 * 1024
        try:
            while sent < len(data):
                if limit is not None and sent >= limit:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if stall is not None and sent >= stall:
                    self.wfile.flush()
                    self.hub.stop_event.wait(60)
                    self.close_connection = True
                    return
                n = piece
                if limit is not None:
                    n = min(n, limit - sent)
                if stall is not None:
                    n = min(n, stall - sent)
                self.wfile.write(data[sent:sent + n])
                sent += n
                if f.chunk_delay_s:
                    self.wfile.flush()
                    time.sleep(f.chunk_delay_s)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


class _HubHandler(_Base):
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        self._record("hub")
        body = self._drain()
        if self.hub.api_delay_s:
            self.hub.stop_event.wait(self.hub.api_delay_s)
        path = urlsplit(self.path).path
        m = re.match(r"^/api/models/([^/]+/[^/]+)/paths-info/([^/]+)$", path)
        if not m or not self.hub.hf_enabled:
            return self._error(404)
        repo = unquote(m.group(1))
        if (err := self.hub.check_api(repo, self._token())) is not None:
            return self._error(*err)
        form = parse_qs(body.decode())
        out = []
        for p in form.get("paths", []):
            f = self.hub.files.get((repo, p))
            if f is None:
                continue
            entry = {"type": "file", "path": p, "oid": hashlib.sha1(f.content).hexdigest(), "size": f.size}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            out.append(entry)
        self._json(200, out)

    def do_GET(self) -> None:
        self._record("hub")
        self._drain()
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        if not self.hub.hf_enabled and not path.startswith("/api/v1/"):
            return self._error(404, "RepoNotFound", "Repository not found")
        if self.hub.rate_limit_api is not None and path.startswith("/api/"):
            return self._error(429, headers={"Retry-After": self.hub.rate_limit_api})
        if m := re.match(r"^/api/models/([^/]+/[^/]+)/revision/([^/]+)$", path):
            repo = unquote(m.group(1))
            if (err := self.hub.check_api(repo, self._token())) is not None:
                return self._error(*err)
            return self._json(200, {"id": repo, "sha": COMMIT, "siblings": []})
        if m := re.match(r"^/api/v1/models/([^/]+/[^/]+)/repo/files$", path):
            repo = unquote(m.group(1))
            if not self.hub.ms_enabled or repo not in self.hub.repos:
                return self._json(404, {"Code": 10010205001, "Message": "model not exist", "Success": False})
            files = [{"Name": f.path.rsplit("/", 1)[-1], "Path": f.path, "Type": "blob", "Size": f.size,
                      **({"Sha256": f.sha256} if f.lfs else {})}
                     for (r, _), f in self.hub.files.items() if r == repo]
            files.append({"Name": "sub", "Path": "sub", "Type": "tree", "Size": 0})
            return self._json(200, {"Code": 200, "Success": True, "Data": {"Files": files}, "Message": "success"})
        if m := re.match(r"^/api/v1/models/([^/]+/[^/]+)/repo$", path):
            repo = unquote(m.group(1))
            fp = query.get("FilePath", [""])[0]
            f = self.hub.files.get((repo, fp))
            if not self.hub.ms_enabled or f is None:
                return self._json(404, {"Code": 10010205001, "Message": "file not exist", "Success": False})
            return self._redirect(f)
        if m := re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path):
            repo, filename = unquote(m.group(1)), unquote(m.group(3))
            if (err := self.hub.check_file(repo, self._token())) is not None:
                return self._error(*err)
            f = self.hub.files.get((repo, filename))
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            if not f.lfs:
                return self._serve_bytes(f, {"X-Repo-Commit": COMMIT})
            return self._redirect(f)
        self._error(404, "RepoNotFound", "Repository not found")

    def _redirect(self, f: FakeFile) -> None:
        key = hashlib.sha256(f"{f.repo}/{f.path}".encode()).hexdigest()
        self.send_response(302)
        self.send_header("Location", f"{self.hub.cdn_url}/blob/{key}?signature=abc")
        self.send_header("X-Linked-Size", str(f.size))
        self.send_header("X-Linked-Etag", f'"{f.sha256}"')
        self.send_header("ETag", f'"{f.sha256}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _CdnHandler(_Base):
    def do_GET(self) -> None:
        self._record("cdn")
        m = re.match(r"^/blob/([0-9a-f]{64})$", urlsplit(self.path).path)
        f = self.hub.blobs.get(m.group(1)) if m else None
        if f is None:
            return self._error(404)
        self._serve_bytes(f)


class FakeHub:
    """Start with ``with FakeHub() as hub:``; ``hub.url`` is the endpoint for both hubs."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], FakeFile] = {}
        self.blobs: dict[str, FakeFile] = {}
        self.repos: dict[str, RepoState] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.rate_limit_api: str | None = None
        self.ms_enabled = True
        self.hf_enabled = True
        self.api_delay_s = 0.0  # paths-info answers this late (a silent server)
        hub = self
        self._hub_srv = _Server(("127.0.0.1", 0), type("H", (_HubHandler,), {"hub": hub}))
        self._cdn_srv = _Server(("127.0.0.1", 0), type("C", (_CdnHandler,), {"hub": hub}))
        self.url = f"http://127.0.0.1:{self._hub_srv.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._cdn_srv.server_address[1]}"

    def add(self, repo: str, path: str, content: bytes, **kw) -> FakeFile:
        f = FakeFile(repo, path, content, **kw)
        self.repos.setdefault(repo, RepoState())
        self.files[(repo, path)] = f
        self.blobs[hashlib.sha256(f"{repo}/{path}".encode()).hexdigest()] = f
        return f

    def check_api(self, repo: str, token: str | None):
        st = self.repos.get(repo)
        if st is None:
            return (404, "RepoNotFound", "Repository not found")
        if token is not None and st.valid_tokens and token not in st.valid_tokens:
            return (401, None, "Invalid credentials in Authorization header")
        if st.private_token and token != st.private_token:
            return (401, "RepoNotFound", "Repository not found")
        return None

    def check_file(self, repo: str, token: str | None):
        err = self.check_api(repo, token)
        if err is not None:
            return err
        st = self.repos[repo]
        if st.gated_token and token != st.gated_token:
            return (403, "GatedRepo", "Access to model is restricted and you are not in the authorized list.")
        return None

    def seen(self, server: str | None = None, contains: str = "") -> list[dict]:
        with self.lock:
            return [r for r in self.requests if (server is None or r["server"] == server) and contains in r["path"]]

    def __enter__(self) -> FakeHub:
        for srv in (self._hub_srv, self._cdn_srv):
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for srv in (self._hub_srv, self._cdn_srv):
            srv.shutdown()
            srv.server_close()


def tiny_gguf(payload_bytes: int = 300_000, seed: int = 0) -> bytes:
    """A valid GGUF v3 header (0 tensors, 1 metadata key) followed by deterministic filler bytes."""
    import struct

    key = b"general.architecture"
    val = b"qwen3"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(val)) + val
    filler = hashlib.sha256(str(seed).encode()).digest() * (payload_bytes // 32 + 1)
    return head + kv + filler[:payload_bytes]


FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def assert_store_clean(paths: HubPaths) -> None:
    """Nothing unverified (or at all) in the model store."""
    assert ModelStore(paths).installed(include_unloadable=True) == []
    files = [p for p in paths.models_dir.rglob("*") if p.is_file()]
    assert files == [], f"unexpected files in the store: {files}"


def run_in_thread(fn, *args, **kwargs):
    """Start fn in a thread; returns (thread, outcome dict with 'result' or 'error')."""
    outcome: dict = {}

    def work():
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            outcome["error"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    return t, outcome
