"""One running Ternary Chat per data folder; a second start hands over its files and says so.

Why: two instances would share one history database (the second one found it locked and died)
and overwrite each other's settings. The guard is a :class:`QLockFile` in the data folder — the
lock of a crashed instance is stale (its process is gone) and Qt takes it over — and the first
instance listens on a :class:`QLocalServer` named after that folder, so a second start can bring
its window to the front and pass on the file it was asked to open ("Open with…").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

LOCK_NAME = "ternary-chat.lock"
MAX_MESSAGE = 64 * 1024  # a few file paths; anything longer is not from a Ternary Chat

ACQUIRED = "acquired"  # this is the first instance
RUNNING = "running"  # another instance holds the lock
UNAVAILABLE = "unavailable"  # no lock possible here (read-only folder): run without the guard


class SingleInstance(QObject):
    """``acquire()`` once at start; ``activated(files)`` fires in the first instance when another starts."""

    activated = Signal(list)

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.lock_path = Path(folder) / LOCK_NAME
        self.server_name = "ternary-chat-" + hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:16]
        self._lock = QLockFile(str(self.lock_path))
        self._lock.setStaleLockTime(0)  # held as long as the app runs; only a dead owner makes it stale
        self._server: QLocalServer | None = None
        self._buffers: dict[QLocalSocket, bytes] = {}

    def acquire(self) -> str:
        """ACQUIRED, RUNNING or UNAVAILABLE; a damaged lock file (no owner in it) is moved aside first."""
        for attempt in range(2):
            if self._lock.tryLock(0):
                self._listen()
                return ACQUIRED
            if self._lock.error() != QLockFile.LockError.LockFailedError:
                log.warning("single-instance lock %s unavailable (%s); running without it",
                            self.lock_path, self._lock.error())
                return UNAVAILABLE
            if attempt == 0 and not self._owner_recorded():
                try:
                    os.replace(self.lock_path, self.lock_path.with_name(
                        f"{LOCK_NAME}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"))
                except OSError:
                    return UNAVAILABLE
                log.warning("damaged single-instance lock %s moved aside", self.lock_path)
                continue
            return RUNNING
        return RUNNING

    def _owner_recorded(self) -> bool:
        """Whether the lock file names a process (an instance writing it right now gets a moment to finish)."""
        for _ in range(3):
            info = self._lock.getLockInfo()
            if info and info[0] > 0:
                return True
            time.sleep(0.1)
        return False

    def _listen(self) -> None:
        self._server = QLocalServer(self)
        QLocalServer.removeServer(self.server_name)  # we hold the lock: any socket left is a crashed one's
        if not self._server.listen(self.server_name):
            log.warning("single-instance server not started: %s", self._server.errorString())
            return
        self._server.newConnection.connect(self._on_connection)

    def _on_connection(self) -> None:
        while self._server is not None and self._server.hasPendingConnections():
            sock = self._server.nextPendingConnection()
            self._buffers[sock] = b""
            sock.readyRead.connect(lambda s=sock: self._on_ready(s))
            sock.disconnected.connect(lambda s=sock: self._on_done(s))
            if sock.bytesAvailable():
                self._on_ready(sock)

    def _on_ready(self, sock: QLocalSocket) -> None:
        data = self._buffers.get(sock, b"") + bytes(sock.readAll())
        if b"\n" not in data and len(data) < MAX_MESSAGE:
            self._buffers[sock] = data
            return
        self._buffers.pop(sock, None)
        try:
            message = json.loads(data.split(b"\n", 1)[0].decode("utf-8"))
            files = [f for f in message.get("files", []) if isinstance(f, str)]
        except (ValueError, AttributeError):
            files = []
        sock.disconnectFromServer()
        self.activated.emit(files)

    def _on_done(self, sock: QLocalSocket) -> None:
        self._buffers.pop(sock, None)
        sock.deleteLater()

    def notify_running(self, files: list[str], timeout_ms: int = 2000) -> bool:
        """Second instance: ask the first to come to the front and open ``files``; True if it was reached."""
        sock = QLocalSocket()
        sock.connectToServer(self.server_name)
        if not sock.waitForConnected(timeout_ms):
            return False
        sock.write(json.dumps({"files": files}).encode("utf-8") + b"\n")
        ok = sock.waitForBytesWritten(timeout_ms)
        sock.disconnectFromServer()
        return ok

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._lock.isLocked():
            self._lock.unlock()
