"""API keys of the local server and of remote backends: in the OS keyring only, never in settings.json.

Same rules as hub tokens (:mod:`runtime.hub.tokens`): service ``ternary-chat``; without a secure
keyring backend the key is kept in this process's memory for the session and the user is told so.
Every value is registered with the hub's redaction (:class:`runtime.hub.tokens.Secret`), so it is
scrubbed from logs that pass through :func:`runtime.hub.tokens.redact`.
"""

from __future__ import annotations

import logging

from runtime.hub.tokens import SERVICE, Secret, TokenStore

log = logging.getLogger(__name__)

SERVER_KEY = "local-server-api-key"
_session: dict[str, str] = {}


def remote_key_name(remote: str) -> str:
    """Keyring username of a remote backend's API key."""
    return f"remote:{remote}"


def _secure() -> bool:
    """A secure keyring backend exists (the hub tokens' rule: no keyring module or a broken one = not secure)."""
    return TokenStore().secure_backend_available()


def get_key(name: str) -> Secret | None:
    """The stored key or None; never raises for a missing or locked keyring."""
    value = None
    if _secure():
        import keyring

        try:
            value = keyring.get_password(SERVICE, name)
        except Exception as exc:  # noqa: BLE001
            log.warning("keyring read failed for %s: %s", name, type(exc).__name__)
    value = value or _session.get(name)
    return Secret(value) if value else None


def set_key(name: str, value: str) -> bool:
    """Store a key. True: in the system keyring; False: in memory for this session only."""
    secret = Secret(value)  # raises ValueError for an empty key
    if _secure():
        import keyring

        try:
            keyring.set_password(SERVICE, name, secret.reveal())
            _session.pop(name, None)
            return True
        except Exception as exc:  # noqa: BLE001
            log.warning("keyring refused %s: %s", name, type(exc).__name__)
    _session[name] = secret.reveal()
    return False


def clear_key(name: str) -> None:
    """Forget a key (keyring and session)."""
    _session.pop(name, None)
    if _secure():
        import keyring

        try:
            keyring.delete_password(SERVICE, name)
        except Exception as exc:  # noqa: BLE001 - not stored is fine
            log.debug("keyring delete %s: %s", name, type(exc).__name__)
