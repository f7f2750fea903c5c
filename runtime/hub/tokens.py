"""Hub access tokens: kept in the OS keyring, never in files, logs, exception text or repr.

Why the care: a Hugging Face / ModelScope token gives write access to the user's account. The
libraries' own ``login()`` functions write it to a plaintext file, so we never call them; we read
the token from the keyring (service ``ternary-chat``, usernames ``huggingface``/``modelscope``) and
pass it explicitly per request. When no secure keyring backend exists (headless Linux, keyring's
``fail``/``null`` backends, the plaintext backends of ``keyrings.alt``) we say so and keep the token
in this process's memory for the session only; we never fall back to plaintext silently.

Every token is wrapped in :class:`Secret` (masked repr/str, refuses pickling) and registered with
:func:`redact`, which scrubs known token values and ``Authorization``/``Bearer``/``m_session_id``
values from any text we log or put in an exception.
"""

from __future__ import annotations

import logging
import os
import re
import threading

from runtime.errors import TernaryError

SERVICE = "ternary-chat"
PROVIDERS = ("huggingface", "modelscope")
PROVIDER_ALIASES = {"hf": "huggingface", "huggingface": "huggingface", "ms": "modelscope", "modelscope": "modelscope"}
# Environment variables the hubs' own clients honour; read only as a last resort, never written.
ENV_VARS = {"huggingface": "HF_TOKEN", "modelscope": "MODELSCOPE_API_TOKEN"}

_known_secrets: set[str] = set()
_known_lock = threading.Lock()
_session_tokens: dict[str, str] = {}  # provider -> token, when no secure keyring exists

_HEADER_PATTERNS = [
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(m_session_id['\"]?\s*[:=]\s*['\"]?)[^\s'\";,}]+"),
    re.compile(r"(?i)([?&](?:token|access_token)=)[^&\s]+"),
]
MASK = "***"


class TokenStorageError(TernaryError):
    """The OS keyring refused to store/read/delete a token (locked, no backend)."""


class Secret:
    """A token value that does not leak through ``repr``, ``str``, f-strings, logging or pickle."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        value = value.strip()
        if not value:
            raise ValueError("empty token")
        self._value = value
        with _known_lock:
            _known_secrets.add(value)

    def reveal(self) -> str:
        """The raw token, for an HTTP header only. Never log or format the result."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self):  # pickling would write the value somewhere we do not control
        raise TypeError("Secret values cannot be pickled")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


def redact(text: str) -> str:
    """Scrub every registered token value and auth-header-looking value from ``text``."""
    if not text:
        return text
    with _known_lock:
        secrets = sorted(_known_secrets, key=len, reverse=True)
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    for pattern in _HEADER_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """Logging filter that scrubs tokens from the formatted message (attach to handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Attach :class:`RedactingFilter` to the ``runtime.hub`` logger (idempotent)."""
    logger = logger or logging.getLogger("runtime.hub")
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())


def normalize_provider(name: str) -> str:
    try:
        return PROVIDER_ALIASES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown hub {name!r}: use one of hf, huggingface, modelscope") from None


def _backend_is_secure(backend: object) -> bool:
    """False for keyring's fail/null backends, keyrings.alt file backends, and empty chainers."""
    module = type(backend).__module__
    name = type(backend).__name__
    if module.startswith("keyrings.alt"):
        return False  # plaintext or getpass-prompting file backends
    if module == "keyring.backends.fail" or module == "keyring.backends.null":
        return False
    if module == "keyring.backends.chainer" and name == "ChainerBackend":
        return any(_backend_is_secure(b) for b in getattr(backend, "backends", []))
    return True


class TokenStore:
    """Reads and writes hub tokens. Lookup order: keyring, session memory, environment variable."""

    def __init__(self, service: str = SERVICE) -> None:
        self.service = service

    def _keyring(self):
        import keyring

        return keyring

    def backend_name(self) -> str:
        backend = self._keyring().get_keyring()
        return f"{type(backend).__module__}.{type(backend).__name__}"

    def secure_backend_available(self) -> bool:
        try:
            return _backend_is_secure(self._keyring().get_keyring())
        except Exception:
            return False

    def get(self, provider: str) -> Secret | None:
        """The token for ``provider`` or None. Never raises for a missing/locked keyring."""
        provider = normalize_provider(provider)
        value: str | None = None
        if self.secure_backend_available():
            from keyring.errors import KeyringError

            try:
                value = self._keyring().get_password(self.service, provider)
            except KeyringError as exc:
                logging.getLogger("runtime.hub").warning("keyring read failed for %s: %s", provider, type(exc).__name__)
        if not value:
            value = _session_tokens.get(provider)
        if not value:
            value = os.environ.get(ENV_VARS[provider]) or None
        return Secret(value) if value else None

    def set(self, provider: str, token: str) -> str:
        """Store a token; returns a sentence saying where it went (keyring or this session only)."""
        provider = normalize_provider(provider)
        secret = Secret(token)
        if self.secure_backend_available():
            from keyring.errors import KeyringError

            try:
                self._keyring().set_password(self.service, provider, secret.reveal())
                _session_tokens.pop(provider, None)
                return f"{provider} token saved in the system keyring ({self.backend_name()})."
            except KeyringError as exc:
                _session_tokens[provider] = secret.reveal()
                return (f"the system keyring refused the {provider} token ({type(exc).__name__}); "
                        "it is kept in memory for this session only.")
        _session_tokens[provider] = secret.reveal()
        return (f"no secure keyring is available ({self.backend_name()}); the {provider} token is kept in memory "
                "for this session only and will be forgotten when the program exits.")

    def clear(self, provider: str) -> str:
        provider = normalize_provider(provider)
        _session_tokens.pop(provider, None)
        removed = False
        if self.secure_backend_available():
            from keyring.errors import KeyringError, PasswordDeleteError

            try:
                self._keyring().delete_password(self.service, provider)
                removed = True
            except PasswordDeleteError:
                pass
            except KeyringError as exc:
                raise TokenStorageError(f"could not delete the {provider} token from the keyring: {type(exc).__name__}") from None
        where = "removed from the system keyring" if removed else "not stored in the keyring"
        note = f" ({ENV_VARS[provider]} is set in the environment and is still used)" if os.environ.get(ENV_VARS[provider]) else ""
        return f"{provider} token {where}{note}."
