"""The hub's log file (``<log dir>/hub.log``), with tokens scrubbed before anything is written.

Why a separate file: download problems are the top support question; a log of URLs, statuses,
retries and verification results lets a user (or we) see what happened after the fact. The
:class:`~runtime.hub.tokens.RedactingFilter` sits on the handler so no record reaches the disk
with a token or an Authorization header in it.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler

from runtime.hub.paths import HubPaths
from runtime.hub.tokens import RedactingFilter, install_log_redaction


def configure_hub_logging(paths: HubPaths, level: int = logging.INFO) -> logging.Handler:
    """Attach a rotating file handler for ``runtime.hub`` (idempotent per log file)."""
    logger = logging.getLogger("runtime.hub")
    install_log_redaction(logger)
    target = str(paths.log_file)
    for h in logger.handlers:
        if isinstance(h, RotatingFileHandler) and h.baseFilename == target:
            return h
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(target, maxBytes=2 * 1024 * 1024, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    return handler
