"""Resumable, verifiable HTTP transfer of one file into a partial file (no Qt, no hub specifics).

Why our own downloader: recent ``huggingface_hub`` deletes its partial file on any failure (no
resume across restarts), offers no cancel, and checks only the size; ModelScope's client has no
public cancel either. Here a transfer

* writes ``partial/<name>.<key>.part`` next to a sidecar JSON (url, etag, expected sha256/size)
  and resumes with HTTP ``Range`` after a crash or restart (the existing bytes are re-hashed once);
* hashes while writing, so verification needs no second read of a multi-GB file;
* retries connection errors, dropped streams, 5xx and 429 with exponential backoff and jitter,
  honouring ``Retry-After``; restarts from 0 when a server ignores ``Range``;
* cancels within a second: a watcher thread shuts the socket down when the cancel event is set
  (a blocked read returns at once), the event is checked between chunks and during backoff;
* reports progress (bytes, total, speed, ETA) through a plain callback, at most every 0.1 s;
* checks free disk space before starting and turns ENOSPC into :class:`DiskFullError`;
* takes a per-file lock file, so two downloads of different files run side by side and a second
  download of the same file is refused cleanly (:class:`DownloadInProgressError`).

Redirects are followed by hand so the token is only ever sent to the hub's own origins
(``RemoteFile.auth_origins``), never to the CDN a hub redirects to.
"""

from __future__ import annotations

import email.utils
import errno
import hashlib
import http.client
import json
import logging
import os
import random
import re
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from runtime.atomic import read_json, write_json_atomic
from runtime.devices import format_bytes
from runtime.errors import TernaryError
from runtime.hub.errors import (
    DROPPED,
    STALLED,
    AuthenticationError,
    DiskFullError,
    DownloadCancelledError,
    DownloadInProgressError,
    GatedRepoError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    network_reason,
)
from runtime.hub.tokens import Secret

log = logging.getLogger("runtime.hub.download")

USER_AGENT = "ternary-chat-hub/0.1"
MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def url_origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port, as huggingface_hub compares origins."""
    p = urlsplit(url)
    return (p.scheme, (p.hostname or "").lower(), p.port or _DEFAULT_PORTS.get(p.scheme, 0))


@dataclass
class RemoteFile:
    """Everything the transfer needs, resolved from a hub's metadata before the first byte."""

    source: str  # "hf" | "modelscope" | "url"
    repo: str
    filename: str
    revision: str
    url: str
    size: int | None
    sha256: str | None
    etag: str | None = None
    token: Secret | None = None
    auth_origins: frozenset[tuple[str, str, int]] = frozenset()
    send_session_cookie: bool = False  # ModelScope's older endpoints read the token from a cookie

    def headers_for(self, url: str) -> dict[str, str]:
        """Auth headers only for the hub's own origins (never for a CDN on another host)."""
        if self.token is None or url_origin(url) not in self.auth_origins:
            return {}
        h = {"Authorization": f"Bearer {self.token.reveal()}"}
        if self.send_session_cookie:
            h["Cookie"] = f"m_session_id={self.token.reveal()}"
        return h

    def key(self) -> str:
        """Partial-file key: the content hash when known (so HF and ModelScope share a partial)."""
        if self.sha256:
            return self.sha256.lower()[:16]
        ident = f"{self.source}:{self.repo}:{self.revision}:{self.filename}:{self.size}"
        return hashlib.sha256(ident.encode()).hexdigest()[:16]


@dataclass
class Progress:
    done: int
    total: int | None
    speed_bps: float
    eta_s: float | None
    phase: str = "downloading"  # "checking partial" | "downloading" | "verifying"


@dataclass
class RetryPolicy:
    max_attempts: int = 6  # consecutive failed attempts without progress
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0  # a longer Retry-After is reported to the user instead
    jitter: float = 0.25

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return max(0.0, retry_after)
        d = min(self.max_delay_s, self.base_delay_s * (2 ** max(0, attempt - 1)))
        return d * (1 + random.uniform(-self.jitter, self.jitter))


@dataclass
class TransferResult:
    path: Path
    size: int
    sha256: str
    resumed_from: int = 0
    attempts: int = 1
    notes: list[str] = field(default_factory=list)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# ------------------------------------------------------------------------------------------------
# Lock file
# ------------------------------------------------------------------------------------------------

_held_locks: set[str] = set()
_held_mutex = threading.Lock()


def _pid_alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.pid_exists(pid)
    except Exception:
        return True  # cannot tell: assume alive (refuse rather than corrupt)


class PartialLock:
    """Exclusive ownership of one partial file, across threads and processes (stale locks reclaimed)."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        key = str(self.path)
        with _held_mutex:
            if key in _held_locks:
                raise DownloadInProgressError(f"{self.what} is already being downloaded in this program")
            for _ in range(2):
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    info = read_json(self.path, {}) or {}
                    pid, host = info.get("pid"), info.get("host")
                    stale = host == socket.gethostname() and isinstance(pid, int) and (
                        pid == os.getpid() or not _pid_alive(pid))
                    if not info:  # unreadable lock: stale if old (a writer fills it within microseconds)
                        stale = time.time() - self.path.stat().st_mtime > 60
                    if stale:
                        self.path.unlink(missing_ok=True)
                        continue
                    raise DownloadInProgressError(
                        f"{self.what} is already being downloaded by another program (pid {pid} on {host}); "
                        f"if that is wrong, delete {self.path}") from None
                os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                         "started": time.time()}).encode())
                os.close(fd)
                _held_locks.add(key)
                return
            raise DownloadInProgressError(f"could not lock {self.path}")

    def release(self) -> None:
        with _held_mutex:
            _held_locks.discard(str(self.path))
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> PartialLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------------------------------
# Transfer
# ------------------------------------------------------------------------------------------------


class _SpeedMeter:
    def __init__(self, window_s: float = 5.0) -> None:
        self.window = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, done: int) -> float:
        self.samples.append((t, done))
        while len(self.samples) > 2 and t - self.samples[0][0] > self.window:
            self.samples.popleft()
        t0, d0 = self.samples[0]
        return (done - d0) / (t - t0) if t > t0 else 0.0


class _RetryableError(Exception):
    """One failed attempt; ``reason`` (a :data:`runtime.hub.errors.NETWORK_REASONS` entry) and
    ``status`` say what kind, ``host`` where, for the final error's user words."""

    def __init__(self, message: str, retry_after: float | None = None, rate_limited: bool = False, *,
                 reason: str = DROPPED, status: int | None = None, host: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        self.reason = reason
        self.status = status
        self.host = host


@dataclass
class _Held:
    """Bytes in the partial file and the running hash of exactly those bytes (mutated by attempts)."""

    have: int
    hasher: Any


class _Restart(Exception):
    """The partial cannot be continued (server ignored/mismatched Range): start again from 0."""


def free_disk_margin(size: int) -> int:
    """Space to keep free beyond the file itself: 1% of it, at least 64 MiB (filesystem slack, logs)."""
    return max(64 * 1024 * 1024, size // 100)


def check_free_space(folder: Path, needed: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    margin = free_disk_margin(needed)
    if free < needed + margin:
        raise DiskFullError(
            f"not enough disk space for {what}: need {format_bytes(needed)} (+{format_bytes(margin)} margin) "
            f"in {folder}, only {format_bytes(free)} free")


def url_host(url: str | None) -> str | None:
    """``https://huggingface.co/x`` -> ``huggingface.co`` (the name a user recognises)."""
    return urlsplit(url).hostname if url else None


def http_error_for(status: int, response: requests.Response | None, what: str, *,
                   kept_bytes: int | None = None) -> Exception:
    """A user-facing HubError for a non-retryable HTTP status on a hub request."""
    code = response.headers.get("X-Error-Code", "") if response is not None else ""
    facts = {"host": url_host(getattr(response, "url", None)), "status": status, "kept_bytes": kept_bytes}
    if code == "GatedRepo":
        return GatedRepoError(f"{what}: this repo is gated; accept its licence on the hub's website while "
                              "logged in, then add a token for that account (ternary token set hf)", **facts)
    if status == 401:
        return AuthenticationError(f"{what}: the hub rejected the request as unauthorized (401); the token is "
                                   "missing, wrong or expired, or the repo is private (ternary token set ...)",
                                   **facts)
    if status == 403:
        return PermissionDeniedError(f"{what}: access denied (403); the token may lack read permission or the "
                                     "repo may be gated (accept the licence on the website)", **facts)
    if status in (404, 410):
        return NotFoundError(f"{what}: not found on the hub ({status})", **facts)
    return ServerError(f"{what}: unexpected HTTP status {status}", **facts)


class Transfer:
    """Download ``remote`` into ``partial_dir``; :meth:`run` returns the finished partial's size and hash.

    The caller verifies (magic bytes etc.) and moves the file into the store; on success it calls
    :meth:`discard_sidecar`. The partial file survives errors and cancellation so the next run
    resumes, except when its sidecar shows it belongs to different content.
    """

    def __init__(self, remote: RemoteFile, partial_dir: str | os.PathLike[str], *,
                 session: requests.Session | None = None, retry: RetryPolicy | None = None,
                 connect_timeout_s: float = 10.0, stall_timeout_s: float = 30.0, chunk_size: int = 1 << 20,
                 progress_interval_s: float = 0.1) -> None:
        self.remote = remote
        self.partial_dir = Path(partial_dir)
        self.session = session or requests.Session()  # trust_env=True: proxies from the environment
        self.retry = retry or RetryPolicy()
        self.connect_timeout_s = connect_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.chunk_size = chunk_size
        self.progress_interval_s = progress_interval_s
        safe = Path(remote.filename).name.replace(os.sep, "_")
        base = f"{safe}.{remote.key()}"
        self.partial_path = self.partial_dir / f"{base}.part"
        self.sidecar_path = self.partial_dir / f"{base}.part.json"
        self.lock_path = self.partial_dir / f"{base}.lock"
        self._response: requests.Response | None = None
        self._response_lock = threading.Lock()

    # -- sidecar -------------------------------------------------------------------------------
    def _sidecar(self) -> dict:
        r = self.remote
        return {"url": r.url, "source": r.source, "repo": r.repo, "filename": r.filename, "revision": r.revision,
                "etag": r.etag, "sha256": r.sha256, "size": r.size}

    def _partial_matches(self) -> bool:
        old = read_json(self.sidecar_path)
        if not isinstance(old, dict):
            return False
        r = self.remote
        if r.sha256 and old.get("sha256"):
            return old["sha256"].lower() == r.sha256.lower() and old.get("size") == r.size
        return old.get("etag") == r.etag and old.get("size") == r.size and old.get("filename") == r.filename

    def discard_sidecar(self) -> None:
        self.sidecar_path.unlink(missing_ok=True)

    # -- cancel --------------------------------------------------------------------------------
    def _abort_response(self) -> None:
        """Unblock a read in progress: shut the socket down (a plain close would not wake recv)."""
        with self._response_lock:
            resp = self._response
        if resp is None:
            return
        raw = getattr(resp, "raw", None)
        conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                return
            except OSError:
                pass
        try:  # no socket handle (other urllib3 version): closing is the next best thing
            resp.close()
        except Exception:
            pass

    def _watch_cancel(self, cancel: threading.Event, finished: threading.Event,
                      tick: Callable[[], None] | None = None) -> None:
        """Abort the socket on cancel; while no data flows, ``tick`` keeps progress (speed -> 0) fresh."""
        while not finished.wait(0.05):
            if cancel.is_set():
                self._abort_response()
                return
            if tick is not None:
                tick()

    # -- HTTP ----------------------------------------------------------------------------------
    def _open(self, offset: int) -> requests.Response:
        url = self.remote.url
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        for _ in range(MAX_REDIRECTS):
            h = dict(headers, **self.remote.headers_for(url))
            resp = self.session.get(url, headers=h, stream=True, allow_redirects=False,
                                    timeout=(self.connect_timeout_s, self.stall_timeout_s))
            if resp.is_redirect or resp.status_code in (301, 302, 303, 307, 308):
                location = resp.headers.get("Location")
                resp.close()
                if not location:
                    raise ServerError(f"{self.remote.filename}: redirect without a Location header")
                url = urljoin(url, location)
                continue
            return resp
        raise ServerError(f"{self.remote.filename}: more than {MAX_REDIRECTS} redirects")

    def _hash_existing(self, hasher, cancel: threading.Event, report) -> int:
        done = 0
        with open(self.partial_path, "rb") as f:
            while chunk := f.read(4 << 20):
                if cancel.is_set():
                    raise DownloadCancelledError(f"{self.remote.filename}: cancelled")
                hasher.update(chunk)
                done += len(chunk)
                report(done, "checking partial", force=False)
        return done

    def run(self, cancel: threading.Event | None = None, progress: Callable[[Progress], None] | None = None,
            finalize: Callable[[TransferResult], Any] | None = None) -> Any:
        """Transfer under the per-file lock; ``finalize(result)`` (verify + install) runs before the
        lock is released, so a second download of the same file cannot touch the partial meanwhile.
        Returns ``finalize``'s value, or the :class:`TransferResult` without one."""
        cancel = cancel or threading.Event()
        self.partial_dir.mkdir(parents=True, exist_ok=True)
        what = f"{self.remote.repo}/{self.remote.filename}" if self.remote.repo else self.remote.filename
        with PartialLock(self.lock_path, what):
            result = self._run_locked(cancel, progress, what)
            return finalize(result) if finalize is not None else result

    def _run_locked(self, cancel: threading.Event, progress: Callable[[Progress], None] | None,
                    what: str) -> TransferResult:
        r = self.remote
        meter = _SpeedMeter()
        last_emit = [0.0]
        latest = [0]  # bytes held now, also read by the watcher thread
        report_lock = threading.Lock()

        def report(done: int, phase: str = "downloading", force: bool = False) -> None:
            latest[0] = done
            if progress is None:
                return
            with report_lock:
                now = time.monotonic()
                if not force and now - last_emit[0] < self.progress_interval_s:
                    return
                last_emit[0] = now
                speed = meter.add(now, done) if phase == "downloading" else 0.0
                eta = (r.size - done) / speed if (r.size is not None and speed > 0) else None
                progress(Progress(done, r.size, speed, eta, phase))

        def tick() -> None:
            # A stalled server sends nothing, so the reader cannot report: after 0.5 s of silence
            # the watcher reports the bytes held (the last burst included) and a decaying speed.
            if progress is not None and time.monotonic() - last_emit[0] > 0.5:
                report(latest[0], force=True)

        if self.partial_path.exists() and not self._partial_matches():
            log.info("discarding partial %s: it belongs to different content", self.partial_path.name)
            self.partial_path.unlink()
        have = self.partial_path.stat().st_size if self.partial_path.exists() else 0
        if r.size is not None and have > r.size:
            log.info("partial %s larger than expected (%d > %d): restarting", self.partial_path.name, have, r.size)
            self.partial_path.unlink()
            have = 0
        if r.size is not None:
            check_free_space(self.partial_dir, r.size - have, what)  # before creating anything
        if not self.partial_path.exists():
            self.partial_path.touch()
        write_json_atomic(self.sidecar_path, self._sidecar())
        log.info("%s: %s from %s (%s of %s already here)", what, "resuming" if have else "starting",
                 r.url, format_bytes(have), format_bytes(r.size))

        held = _Held(0, hashlib.sha256())
        if have:
            held.have = self._hash_existing(held.hasher, cancel, report)
        resumed_from = held.have
        notes: list[str] = []
        failures = 0
        attempts = 0
        high_water = held.have  # failures only reset when an attempt gets further than ever before
        finished = threading.Event()
        watcher = threading.Thread(target=self._watch_cancel, args=(cancel, finished, tick), daemon=True,
                                   name=f"cancel-watch-{r.filename}")
        watcher.start()
        try:
            while True:
                if cancel.is_set():
                    raise DownloadCancelledError(f"{what}: cancelled; {format_bytes(held.have)} kept for resuming")
                if r.size is not None and held.have == r.size and (held.have > 0 or attempts > 0):
                    break  # the partial is already complete (e.g. crashed before verification)
                attempts += 1
                high_water = max(high_water, held.have)
                try:
                    self._attempt(held, cancel, report, what)
                    break
                except _Restart as exc:
                    notes.append(str(exc))
                    log.info("%s: %s; restarting from 0", what, exc)
                    self.partial_path.write_bytes(b"")
                    held.have, held.hasher = 0, hashlib.sha256()
                    failures += 1
                    if failures >= self.retry.max_attempts:
                        raise ServerError(f"{what}: the server does not resume correctly ({exc})") from None
                    continue
                except _RetryableError as exc:
                    if cancel.is_set():
                        raise DownloadCancelledError(
                            f"{what}: cancelled; {format_bytes(held.have)} kept for resuming") from None
                    on_disk = self.partial_path.stat().st_size if self.partial_path.exists() else 0
                    if on_disk != held.have:  # a write did not reach the disk: hash what is really there
                        held.have, held.hasher = 0, hashlib.sha256()
                        held.have = self._hash_existing(held.hasher, cancel, report) if on_disk else 0
                    have = held.have
                    failures = 1 if have > high_water else failures + 1
                    facts = {"host": exc.host or url_host(r.url), "kept_bytes": have}
                    if exc.rate_limited and exc.retry_after is not None and exc.retry_after > self.retry.max_retry_after_s:
                        raise RateLimitedError(f"{what}: rate-limited by the hub (429); try again in "
                                               f"{exc.retry_after:.0f} s", exc.retry_after, **facts) from None
                    if failures >= self.retry.max_attempts:
                        if exc.rate_limited:
                            raise RateLimitedError(f"{what}: still rate-limited after {failures} attempts (429)"
                                                   + (f"; retry after {exc.retry_after:.0f} s" if exc.retry_after is not None else ""),
                                                   exc.retry_after, **facts) from None
                        if exc.status is not None:
                            raise ServerError(f"{what}: the server keeps failing ({exc}); "
                                              f"{format_bytes(have)} kept for resuming", status=exc.status,
                                              **facts) from None
                        raise NetworkError(f"{what}: network error after {failures} attempts ({exc}); "
                                           f"{format_bytes(have)} kept for resuming", reason=exc.reason,
                                           **facts) from None
                    delay = self.retry.delay(failures, exc.retry_after)
                    log.info("%s: %s; retry %d in %.2f s", what, exc, failures, delay)
                    if cancel.wait(delay):
                        raise DownloadCancelledError(
                            f"{what}: cancelled; {format_bytes(have)} kept for resuming") from None
        finally:
            finished.set()
        report(held.have, "downloading", force=True)
        return TransferResult(self.partial_path, held.have, held.hasher.hexdigest(), resumed_from, attempts, notes)

    def _attempt(self, held: _Held, cancel: threading.Event, report, what: str) -> None:
        """One HTTP request from ``held.have`` onwards; raises _RetryableError/_Restart/HubError."""
        r = self.remote
        have = held.have
        try:
            resp = self._open(have)
        except requests.exceptions.RequestException as exc:
            raise _RetryableError(_describe_network_error(exc), reason=network_reason(exc),
                                  host=_request_host(exc)) from None
        with self._response_lock:
            self._response = resp
        try:
            status = resp.status_code
            if status == 416:
                m = re.match(r"bytes \*/(\d+)", resp.headers.get("Content-Range", ""))
                if (r.size is not None and have == r.size) or (m and int(m.group(1)) == have):
                    return  # already complete (verification judges the size)
                raise _Restart(f"server refused range bytes={have}- (416)")
            host = url_host(resp.url)
            if status == 429:
                raise _RetryableError("HTTP 429 rate-limited", parse_retry_after(resp.headers.get("Retry-After")),
                                      rate_limited=True, status=status, host=host)
            if status >= 500:
                raise _RetryableError(f"HTTP {status}", parse_retry_after(resp.headers.get("Retry-After")),
                                      status=status, host=host)
            if status == 408:
                raise _RetryableError("HTTP 408 request timeout", reason=STALLED, host=host)
            if status not in (200, 206):
                raise http_error_for(status, resp, what, kept_bytes=have)
            server_total: int | None = None
            if status == 200:
                if have:
                    log.info("%s: server ignored Range; restarting from 0", what)
                    self.partial_path.write_bytes(b"")
                    held.have, held.hasher = 0, hashlib.sha256()
                    have = 0
                length = resp.headers.get("Content-Length", "")
                server_total = int(length) if length.isdigit() else None
            else:
                m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != have:
                    raise _Restart(f"server answered Range bytes={have}- with Content-Range "
                                   f"{resp.headers.get('Content-Range')!r}")
                server_total = int(m.group(3)) if m.group(3).isdigit() else None
            try:
                out = open(self.partial_path, "ab")
            except OSError as exc:
                raise _disk_error(exc, what, self.partial_path) from None
            raw = resp.raw
            if hasattr(raw, "read1"):
                def read_some(n: int) -> bytes:
                    return raw.read1(n, decode_content=False)
            else:  # pragma: no cover - urllib3 < 2
                def read_some(n: int) -> bytes:
                    return raw.read(n, decode_content=False)
            with out:
                try:
                    while True:
                        # read1: whatever arrived, up to chunk_size. A plain read(n) waits to fill n
                        # and throws the bytes away when the connection drops mid-read.
                        chunk = read_some(self.chunk_size)
                        if not chunk:
                            break
                        if cancel.is_set():
                            raise DownloadCancelledError(f"{what}: cancelled; {format_bytes(have)} kept for resuming")
                        try:
                            out.write(chunk)
                        except OSError as exc:
                            raise _disk_error(exc, what, self.partial_path) from None
                        held.hasher.update(chunk)
                        held.have += len(chunk)
                        have = held.have
                        report(have)
                    out.flush()
                    os.fsync(out.fileno())
                except TernaryError:
                    raise
                except Exception as exc:
                    _flush_quietly(out)
                    if cancel.is_set():  # the watcher shut the socket: whatever the read raised
                        raise DownloadCancelledError(
                            f"{what}: cancelled; {format_bytes(have)} kept for resuming") from None
                    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # from flush/fsync
                        raise _disk_error(exc, what, self.partial_path) from None
                    if isinstance(exc, (requests.exceptions.RequestException, urllib3.exceptions.HTTPError,
                                        http.client.HTTPException, OSError)):
                        reason = STALLED if network_reason(exc) == STALLED else DROPPED  # it was connected
                        raise _RetryableError(_describe_network_error(exc), reason=reason,
                                              host=url_host(resp.url)) from None
                    raise
            if server_total is not None and have == server_total:
                return  # complete as far as the server is concerned; a size mismatch with the
                # hub's metadata is then reported (and quarantined) by verification
            if r.size is not None and have < r.size:
                raise _RetryableError(f"connection closed early at {have} of {server_total or r.size} bytes",
                                      reason=DROPPED, host=url_host(resp.url))
        finally:
            with self._response_lock:
                self._response = None
            resp.close()


def _flush_quietly(f) -> None:
    try:
        f.flush()
    except OSError:
        pass


class LocalWriteError(TernaryError):
    """Writing the partial file failed for a reason other than a full disk (permissions, I/O error)."""


def _disk_error(exc: OSError, what: str, path: Path) -> Exception:
    """ENOSPC -> DiskFullError; other write failures -> LocalWriteError (never retried as network errors)."""
    if exc.errno == errno.ENOSPC:
        return DiskFullError(f"{what}: the disk is full (writing {path}); free some space and download again "
                             "to resume")
    return LocalWriteError(f"{what}: cannot write {path}: {exc.strerror or exc}")


def _request_host(exc: requests.exceptions.RequestException) -> str | None:
    request = getattr(exc, "request", None)
    return url_host(getattr(request, "url", None))


def _describe_network_error(exc: BaseException) -> str:
    text = str(exc)
    low = text.lower()
    if "name or service not known" in low or "nodename nor servname" in low or "getaddrinfo" in low:
        return "the hub's host name does not resolve (offline or DNS problem)"
    if "connection refused" in low:
        return "connection refused (offline, or the endpoint/proxy is wrong)"
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "connection timed out"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return "the transfer stalled (no data for too long)"
    log.debug("connection dropped: %r", exc)  # the transport's class name is for the log, not the user
    return "the connection dropped"
