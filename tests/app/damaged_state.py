"""A corpus of damaged app state: history databases and settings files as crashes, full disks, sync
tools, other versions and hostile edits leave them.

Used by tests/app/test_app_damaged_state.py (opening and loading, no Qt) and
tests/gui/test_gui_damaged_start.py (the real start of the app on each case). Every case writes its
damage at a given path; ``expect`` lists what the app may report for it. A case's ``make`` may
return a callable that undoes something held open (the connection that keeps a database locked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.history import HistoryStore
from app.core.settings_model import AppSettings, SamplingSettings

PAGE = 4096
MODEL_KEY = "/models/tiny.gguf"


@dataclass
class Case:
    name: str
    klass: str
    make: Callable[[Path], Callable[[], None] | None]
    expect: tuple[str, ...]  # history: problem codes (None -> "ok"); settings: "ok" or "problem"
    with_backup: bool = False  # settings: a settings.json.bak from the last good save exists
    broken_field: str = ""  # settings: the one field (or section) that is invalid


# -- history ------------------------------------------------------------------------------------
def real_history(path: Path, conversations: int = 30, messages: int = 8) -> None:
    """A good history with enough pages that a damaged page leaves others readable."""
    store = HistoryStore(path)
    for i in range(conversations):
        c = store.create_conversation(f"chat {i}")
        for j in range(messages):
            store.add_message(c.id, "user" if j % 2 == 0 else "assistant", f"message {i}.{j} " + "lorem ipsum " * 40)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()


def _bytes_of_real_history() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.sqlite3"
        real_history(path)
        return path.read_bytes()


_REAL: bytes | None = None


def real_history_bytes() -> bytes:
    global _REAL
    if _REAL is None:
        _REAL = _bytes_of_real_history()
    return _REAL


def _write(data: bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(data)
    return make


def _truncated(keep: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        data = real_history_bytes()
        path.write_bytes(data[:keep if keep >= 0 else len(data) + keep])
    return make


def _page_damage(page: int, fill: str, seed: int = 0) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        data = bytearray(real_history_bytes())
        pages = len(data) // PAGE
        index = page if page >= 0 else pages + page
        start = index * PAGE + (100 if index == 0 else 0)  # page 1 keeps the 100-byte file header
        rnd = random.Random(seed)
        junk = bytes(rnd.randrange(256) for _ in range(PAGE - (start % PAGE))) if fill == "random" else \
            bytes(PAGE - (start % PAGE))
        data[start:start + len(junk)] = junk
        path.write_bytes(bytes(data))
    return make


def _user_version(version: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(real_history_bytes())
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(f"PRAGMA user_version={version}")
    return make


def _schema(sql: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.executescript(sql)
    return make


def _locked(path: Path) -> Callable[[], None]:
    path.write_bytes(real_history_bytes())
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE conversations SET title=title")
    return holder.close


def _bad_rows(path: Path) -> None:
    path.write_bytes(real_history_bytes())
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE conversations SET settings='{not json', title=42 WHERE id=2")
        db.execute("UPDATE conversations SET settings='[1, 2]', created='yesterday' WHERE id=3")
        db.execute("UPDATE messages SET stats='{\"a\": ', created='soon' WHERE id IN (1, 2)")
        db.execute("UPDATE messages SET content=x'ff00fe', thinking=7 WHERE id=3")
        db.commit()


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside.txt").write_text("a folder where the history file belongs")


def history_cases() -> list[Case]:
    rnd = random.Random(26)
    cases = [Case(f"garbage-{n}", "garbage", _write(bytes(rnd.randrange(256) for _ in range(n))), ("damaged",))
             for n in (1, 64, 100, 512, 4096, 5000, 65536)]
    cases += [
        Case("garbage-text", "garbage", _write(b"hello, this is not a database\n" * 50), ("damaged",)),
        Case("garbage-json", "garbage", _write(json.dumps({"conversations": []}).encode()), ("damaged",)),
        Case("garbage-sqlite-header", "garbage", _write(b"SQLite format 3\x00" + bytes(rnd.randrange(256)
                                                                                       for _ in range(8000))),
             ("damaged",)),
    ]
    total = len(real_history_bytes())
    for keep in (16, 99, 100, PAGE, PAGE + 7, 3 * PAGE, total // 2, -PAGE, -1):
        # the last byte of the last page is free space: SQLite reads every row without it
        cases.append(Case(f"truncated-{keep}", "truncated", _truncated(keep), ("damaged",) + (("ok",) if keep == -1 else ())))
    for page, fill in ((0, "random"), (1, "random"), (2, "zero"), (3, "random"), (10, "random"), (-1, "random"),
                       (-5, "zero"), (20, "random")):
        cases.append(Case(f"corrupt-page-{page}-{fill}", "corrupt_page", _page_damage(page, fill), ("damaged",)))
    cases += [
        Case("directory-empty", "not_a_file", lambda p: p.mkdir(), ("not_a_file",)),
        Case("directory-with-files", "not_a_file", _directory, ("not_a_file",)),
        Case("fifo", "not_a_file", lambda p: os.mkfifo(p), ("not_a_file",)),
    ]
    cases += [Case(f"newer-v{v}", "newer_schema", _user_version(v), ("newer",)) for v in (2, 1000, 2**31 - 1)]
    cases += [
        Case("older-unversioned-same-tables", "older_schema", _user_version(0), ("ok",)),
        Case("older-missing-columns", "older_schema", _schema(
            "CREATE TABLE conversations(id INTEGER PRIMARY KEY, title TEXT);"
            "CREATE TABLE messages(id INTEGER PRIMARY KEY, conversation_id INTEGER, role TEXT, content TEXT);"
            "INSERT INTO conversations VALUES (1, 'kept chat');"
            "INSERT INTO messages VALUES (1, 1, 'user', 'kept message');"), ("upgraded",)),
        Case("older-no-messages-table", "older_schema", _schema(
            "CREATE TABLE conversations(id INTEGER PRIMARY KEY, title TEXT, created REAL, updated REAL);"
            "INSERT INTO conversations VALUES (1, 'kept chat', 0, 0);"), ("upgraded",)),
        Case("foreign-layout", "older_schema", _schema(
            "CREATE TABLE conversations(name TEXT); CREATE TABLE messages(text TEXT);"), ("damaged",)),
        Case("locked-exclusive", "locked", _locked, ("locked",)),
        Case("bad-rows", "bad_rows", _bad_rows, ("ok",)),
    ]
    return cases


# -- settings -----------------------------------------------------------------------------------
def good_settings() -> AppSettings:
    """Every field away from its default, so a reset is visible."""
    s = AppSettings()
    s.hardware.device = "cpu"
    s.hardware.context_length = 8192
    s.hardware.offload_policy = "stream"
    s.hardware.kv_cache_precision = "int8"
    s.hardware.decode_precision = "exact"
    s.hardware.vram_cap_gib = 6.5
    s.downloads.source = "modelscope"
    s.downloads.hf_endpoint = "https://hf-mirror.com"
    s.downloads.modelscope_endpoint = "https://modelscope.example"
    s.downloads.models_dir = "/data/models"
    s.interface.language = "zh_CN"
    s.interface.theme = "dark"
    s.interface.show_thinking = False
    s.set_sampling(MODEL_KEY, SamplingSettings(temperature=0.3, top_p=0.9, top_k=40, min_p=0.05,
                                               repetition_penalty=1.1, presence_penalty=0.5, max_new_tokens=512,
                                               seed=7, system_prompt="Answer briefly. 请简短回答。",
                                               enable_thinking=False, reasoning_effort="low"))
    s.last_model = "/models/tiny.gguf"
    s.local_models = ["/models/tiny.gguf", "/models/other"]
    s.first_run_done = True
    return s


def good_text() -> str:
    return json.dumps(good_settings().to_dict(), ensure_ascii=False, indent=2) + "\n"


def leaf_fields(s: AppSettings) -> dict[str, Any]:
    """Dotted path -> value of every setting (what "kept" is checked against)."""
    out: dict[str, Any] = {}
    for section in ("hardware", "downloads", "interface"):
        for f in dataclasses.fields(getattr(s, section)):
            out[f"{section}.{f.name}"] = getattr(getattr(s, section), f.name)
    for key, sampling in s.sampling.items():
        for f in dataclasses.fields(sampling):
            out[f"sampling[{key}].{f.name}"] = getattr(sampling, f.name)
    for name in ("last_model", "local_models", "first_run_done"):
        out[name] = getattr(s, name)
    return out


def default_leaves() -> dict[str, Any]:
    d = leaf_fields(AppSettings())
    for f in dataclasses.fields(SamplingSettings):
        d[f"sampling[{MODEL_KEY}].{f.name}"] = getattr(SamplingSettings(), f.name)
    return d


def _text(text: str | bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return make


def _with(mutate: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        data = json.loads(good_text())
        mutate(data)
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return make


def _set(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        if dotted.startswith("sampling["):
            data["sampling"][MODEL_KEY][dotted.split("].", 1)[1]] = value
        elif "." in dotted:
            section, name = dotted.split(".", 1)
            data[section][name] = value
        else:
            data[dotted] = value
    return mutate


_NUMERIC = {"hardware.context_length", "hardware.vram_cap_gib"} | {
    f"sampling[{MODEL_KEY}].{n}" for n in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                           "presence_penalty", "max_new_tokens", "seed")}
_NULLABLE = {f"sampling[{MODEL_KEY}].{n}" for n in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                                    "presence_penalty", "max_new_tokens", "seed", "enable_thinking")}


def _wrong_values(dotted: str, good: Any) -> list[tuple[str, Any]]:
    """Values of the wrong type (or out of range) for one field, each named for the case."""
    values: list[tuple[str, Any]] = [("list", [1, 2]), ("dict", {"a": 1})]
    if isinstance(good, bool):
        values += [("string", "yes"), ("number", 1)]
    elif dotted in _NUMERIC:
        values += [("string", "fast"), ("bool", True), ("huge", 10**400), ("nan", float("nan"))]
    elif isinstance(good, str):
        values += [("number", 12), ("bool", False)]
    if dotted not in _NULLABLE:
        values.append(("null", None))
    return values


def _deep(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def settings_cases() -> list[Case]:
    text = good_text()
    raw = text.encode("utf-8")
    cases: list[Case] = []
    for frac in (0.0, 0.05, 0.2, 0.33, 0.5, 0.66, 0.8, 0.95, 0.99):
        cut = max(1, int(len(raw) * frac))
        for bak in (False, True):
            cases.append(Case(f"truncated-{frac}{'-bak' if bak else ''}", "truncated", _text(raw[:cut]),
                              ("problem",), with_backup=bak))
    for where in ("{", '"device"', '"theme"', "请", '"seed"', "]"):
        at = raw.index(where.encode("utf-8")) + (1 if where == "请" else 0)
        for bak in (False, True):
            cases.append(Case(f"bad-utf8-at-{where.strip(chr(34))}{'-bak' if bak else ''}", "bad_utf8",
                              _text(raw[:at] + b"\xff" + raw[at + 1:]), ("problem",), with_backup=bak))
    for dotted, good in leaf_fields(good_settings()).items():
        for label, value in _wrong_values(dotted, good):
            cases.append(Case(f"wrong-{dotted}-{label}", "wrong_type", _with(_set(dotted, value)), ("problem",),
                              broken_field=dotted))
    for section in ("hardware", "downloads", "interface", "sampling"):
        for label, value in (("list", [1]), ("string", "x"), ("number", 3), ("null", None)):
            if section == "sampling" and value is None:
                continue  # no overrides at all is a valid state
            cases.append(Case(f"section-{section}-{label}", "wrong_type", _with(_set(section, value)), ("problem",),
                              broken_field=section))
    for depth in (70, 1000, 100_000):
        cases.append(Case(f"deep-top-{depth}", "deep_nesting", _text(_deep(depth)), ("problem",)))
        cases.append(Case(f"deep-top-{depth}-bak", "deep_nesting", _text(_deep(depth)), ("problem",),
                          with_backup=True))
        cases.append(Case(f"deep-in-field-{depth}", "deep_nesting",
                          _text(text.replace('"last_model": "/models/tiny.gguf"', '"last_model": ' + _deep(depth))),
                          ("problem",), broken_field="last_model"))
    for label, body in (("list", "[1, 2]"), ("string", '"settings"'), ("number", "42"), ("null", "null"),
                        ("true", "true")):
        cases.append(Case(f"not-object-{label}", "not_object", _text(body), ("problem",)))
        cases.append(Case(f"not-object-{label}-bak", "not_object", _text(body), ("problem",), with_backup=True))
    rnd = random.Random(19)
    cases += [
        Case("empty", "truncated", _text(""), ("problem",)),
        Case("empty-bak", "truncated", _text(""), ("problem",), with_backup=True),
        Case("whitespace", "truncated", _text("  \n\n"), ("problem",)),
        Case("garbage", "garbage", _text(bytes(rnd.randrange(256) for _ in range(3000))), ("problem",)),
        Case("garbage-bak", "garbage", _text(bytes(rnd.randrange(256) for _ in range(3000))), ("problem",),
             with_backup=True),
        Case("trailing-junk", "garbage", _text(text + "}}garbage"), ("problem",)),
        Case("directory", "not_a_file", lambda p: p.mkdir(), ("problem",)),
        Case("directory-bak", "not_a_file", lambda p: p.mkdir(), ("problem",), with_backup=True),
        Case("fifo", "not_a_file", lambda p: os.mkfifo(p), ("problem",)),
        Case("too-large", "too_large", _text(text[:-2] + ', "pad": "' + "x" * (17 * 1024**2) + '"}'), ("problem",),
             with_backup=True),
        Case("newer-version", "newer", _with(lambda d: d.update(version=99, future={"x": 1})), ("problem",)),
        Case("utf8-bom", "encoding_ok", _text(b"\xef\xbb\xbf" + raw), ("ok",)),
        Case("utf16", "encoding_ok", _text(text.encode("utf-16")), ("ok",)),
        Case("numbers-as-text", "encoding_ok", _with(_set("hardware.context_length", "8192")), ("ok",)),
        Case("whole-float", "encoding_ok", _with(_set("hardware.context_length", 8192.0)), ("ok",)),
        Case("good", "good", _text(raw), ("ok",), with_backup=True),
    ]
    return cases


def write_backup(path: Path) -> None:
    """The ``settings.json.bak`` a good save of :func:`good_settings` leaves."""
    path.with_name(path.name + ".bak").write_text(good_text(), encoding="utf-8")
