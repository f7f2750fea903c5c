"""Constrained decoding: masks that keep generated text inside a JSON (Schema) language.

The engine asks a :class:`TokenConstraint` which tokens may come next, masks the others' logits, and
reports the sampled token back with ``advance``. :func:`json_constraint` builds one for OpenAI's
``response_format`` ``json_object`` (``schema=None``) and ``json_schema``. See docs/constrained.md.
"""

from __future__ import annotations

from typing import Protocol

import torch

from runtime.constrained.errors import ConstraintError, SchemaError
from runtime.constrained.token_mask import JsonConstraint, json_constraint


class TokenConstraint(Protocol):
    def allowed_tokens(self) -> torch.Tensor:
        """Bool [vocab_size] on CPU; True = may come next. EOS ids are True iff the text is complete."""
        ...

    def advance(self, token_id: int) -> None:
        """Consume a sampled token; raises ConstraintError for a disallowed one."""
        ...

    def is_finished(self) -> bool:
        """Complete and nothing more can follow."""
        ...


__all__ = ["ConstraintError", "JsonConstraint", "SchemaError", "TokenConstraint", "json_constraint"]
