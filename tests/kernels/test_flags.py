"""The ``TERNARY_*`` environment variables: every one is in runtime/flags.py's table, read through it, and
documented in docs/kernels.md exactly as the table prints itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from runtime import flags

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("runtime", "app", "scripts") for p in (ROOT / d).rglob("*.py")]
# x86's file: its four reads move to flags.value(...) when the lead takes it into runtime/kernels/cpu/
READ_DIRECTLY: set[Path] = set()
# a read, not an assignment (scripts set variables for the processes they start)
DIRECT_READ = re.compile(r"""(environ\.get\(|getenv\()\s*["']TERNARY_|environ\[\s*["']TERNARY_\w+["']\s*\](?!\s*=)""")


def _env_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and re.fullmatch(r"TERNARY_[A-Z0-9_]+", n.value)}


def test_every_ternary_variable_named_in_code_is_in_the_table():
    known = {f.name for f in flags.FLAGS}
    unknown = {(str(p.relative_to(ROOT)), n) for p in SOURCES for n in _env_names(p) - known}
    assert not unknown


def test_variables_are_read_through_the_flags_module():
    direct = [f"{p.relative_to(ROOT)}:{i}" for p in SOURCES if p not in READ_DIRECTLY and p.name != "flags.py"
              for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if DIRECT_READ.search(line)]
    assert not direct


def test_docs_carry_the_table():
    assert flags.markdown_table() in (ROOT / "docs" / "kernels.md").read_text(encoding="utf-8")


def test_values_defaults_and_errors(monkeypatch):
    monkeypatch.delenv("TERNARY_ATTN_PREFETCH", raising=False)
    assert flags.value("TERNARY_ATTN_PREFETCH") == "4" and flags.integer("TERNARY_ATTN_PREFETCH") == 4
    monkeypatch.setenv("TERNARY_ATTN_PREFETCH", "2")
    assert flags.integer("TERNARY_ATTN_PREFETCH") == 2
    monkeypatch.setenv("TERNARY_ATTN_PREFETCH", "two")
    with pytest.raises(ValueError, match="TERNARY_ATTN_PREFETCH='two' is not an integer"):
        flags.integer("TERNARY_ATTN_PREFETCH")
    monkeypatch.delenv("TERNARY_KERNELS_CACHE", raising=False)
    assert flags.value("TERNARY_KERNELS_CACHE") is None
    with pytest.raises(KeyError, match="TERNARY_NOPE is not a known"):
        flags.value("TERNARY_NOPE")
