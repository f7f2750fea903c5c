"""Errors of constrained decoding: a schema we cannot enforce, a token the constraint forbids."""

from runtime.errors import TernaryError


class SchemaError(TernaryError, ValueError):
    """A JSON Schema uses a keyword (named in the message) or a shape that cannot be enforced token by
    token; the server turns it into a 400 so the client learns which keyword to drop."""


class ConstraintError(TernaryError):
    """A token was fed to a constraint that does not allow it (an engine bug, never the model's fault)."""
