"""Exceptions the runtime raises for problems a user can act on.

Every error here carries a message meant to be shown as-is (one line, no traceback); the CLI
prints it and exits non-zero, the GUI shows it in a dialog.
"""


class TernaryError(Exception):
    """Base class: an error with a user-readable message."""


class ModelFormatError(TernaryError):
    """A model file is not what it claims to be: wrong magic, truncated, corrupt, unsupported."""


class UnsupportedModelError(TernaryError):
    """The file is valid but describes something this runtime cannot run (architecture, type)."""


class ContextOverflowError(TernaryError):
    """The prompt (plus requested output) does not fit the loaded context length."""


class OutOfMemoryError(TernaryError):
    """Device or host memory ran out and no fallback plan was possible."""


class CancelledError(TernaryError):
    """Long work (conversion, download, generation) was cancelled by the user."""


class InvalidSettingError(TernaryError, ValueError):
    """A generation setting is outside its allowed range (``field`` names it); see
    :mod:`runtime.sampling_params`. Also a ``ValueError``, as the value is what is wrong."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field
