"""Starting a command-line program that a test then stops with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen_interruptible(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` whose child takes SIGINT as Ctrl-C even when the test run itself has SIGINT
    ignored: a non-interactive shell starts background jobs (``cmd &``, ``nohup``) with SIGINT ignored,
    an ignored signal stays ignored across exec, and Python then installs no KeyboardInterrupt handler."""
    return subprocess.Popen(cmd, preexec_fn=_sigint_default, **kwargs)
