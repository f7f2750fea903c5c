"""Reading and writing ``settings.json`` so that no setting is ever lost without the user being told.

Why a module of its own: a settings file can be cut short (a crash in another program, a full
disk, a sync tool), hold a bad byte, a folder, a list where an object belongs or JSON nested
thousands deep. Loading must then keep every value that is still valid (field by field, never a
whole section for one bad value), fill in what was lost from ``settings.json.bak`` (a copy of the
last good save), keep the damaged file as ``settings.json.damaged-<time>`` and report what happened
so the app can tell the user. A save never overwrites a damaged file that has no copy yet.

No Qt here; :mod:`app.core.settings_model` defines the settings themselves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.paths import free_sibling
from runtime.atomic import write_bytes_atomic

log = logging.getLogger(__name__)

MAX_BYTES = 16 * 1024**2  # a settings file is a few KB; a bigger one is not read (but kept)
MAX_DEPTH = 64  # settings nest 3 deep; deeper JSON is damage (stdlib json recurses on it and fails near 1000)
# Problems after which the file's own values are incomplete, so the last good copy fills the gaps.
INCOMPLETE = ("not_a_file", "unreadable", "too_large", "not_json", "too_deep", "not_object")
_INVALID = object()
_MISSING = object()


@dataclass
class SettingsLoadReport:
    """What loading found wrong and what was done; ``ok`` when nothing was.

    ``problems``: codes of what was wrong with the file as a whole (not_a_file, unreadable,
    too_large, encoding, not_json, too_deep, not_object, newer); ``reset_fields``: settings that
    were invalid and went back to their defaults (``section.field`` as in the file);
    ``damaged_copy``: where the file as it was is kept; ``restored_from``: the last good copy
    used to fill in what the damaged file had lost.
    """

    path: Path
    problems: list[str] = field(default_factory=list)
    reset_fields: list[str] = field(default_factory=list)
    damaged_copy: Path | None = None
    restored_from: Path | None = None
    version: int = 0
    saved: bool = False  # the repaired settings were written back

    @property
    def ok(self) -> bool:
        return not self.problems and not self.reset_fields


def backup_path(path: Path) -> Path:
    """``settings.json.bak``: a copy of the last good save."""
    return path.with_name(path.name + ".bak")


# -- reading ------------------------------------------------------------------------------------
def _decode(raw: bytes, problems: list[str]) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # saved as "Unicode" by a Windows editor
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            pass
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        problems.append("encoding")
        return raw.decode("utf-8", errors="replace")


def _scan(text: str) -> tuple[list[tuple[int, str]], str]:
    """Places where ``text`` can be cut and closed into valid JSON (between members of objects, never
    inside a list), with the closers each needs, and the closers the whole text needs."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            if "]" not in stack:
                cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == "," and "]" not in stack:  # a list cut short would load as a different list
            cuts.append((i, "".join(reversed(stack))))
    return cuts, "".join(reversed(stack))


def _flatten_deep(text: str) -> tuple[str, bool]:
    """``text`` with every container nested deeper than MAX_DEPTH replaced by ``null``.

    Why not refuse the whole file: the values around a deep one are still good and must be kept;
    the field holding it then fails its type check alone. An unclosed deep container ends the text.
    """
    out: list[str] = []
    depth, start, skip_from = 0, 0, -1
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
            if depth == MAX_DEPTH + 1:
                out.append(text[start:i])
                skip_from = i
        elif ch in "}]":
            if depth == MAX_DEPTH + 1:
                out.append("null")
                start, skip_from = i + 1, -1
            depth = max(0, depth - 1)
    if skip_from >= 0:
        return "".join(out), True
    out.append(text[start:])
    return "".join(out), len(out) > 1


def _salvage(prefix: str) -> Any:
    """The longest complete start of a damaged JSON text, closed; None if nothing can be kept.

    Cut only after complete members: a number cut short (``40`` of ``4096``) must not load as a
    different value, so the whole prefix is tried only when it does not end inside a number.
    """
    cuts, closers = _scan(prefix)
    candidates = []
    tail = prefix.rstrip()
    if tail and tail[-1] not in "0123456789.-+eE" and "]" not in closers:
        candidates.append(tail + closers)
    candidates += [prefix[:i] + c for i, c in reversed(cuts[-50:])]
    for text in candidates:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            continue
    return None


def parse_settings_text(raw: bytes, problems: list[str]) -> Any:
    """The JSON value in ``raw``, salvaged as far as possible; appends problem codes."""
    text = _decode(raw, problems)
    if text.count("[") + text.count("{") > MAX_DEPTH:
        text, flattened = _flatten_deep(text)
        if flattened:
            problems.append("too_deep")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append("not_json")
        try:  # one whole value followed by junk: keep the value
            value, _end = json.JSONDecoder().raw_decode(text.lstrip())
            if isinstance(value, dict):
                return value
        except (ValueError, RecursionError):
            pass
        return _salvage(text[:exc.pos])
    except (ValueError, RecursionError):
        problems.append("not_json")
        return None


def read_settings_file(path: Path) -> tuple[dict[str, Any] | None, list[str], bytes | None]:
    """(data, problems, raw bytes) of ``path``; data None when the file is missing or holds nothing usable."""
    problems: list[str] = []
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, problems, None
    except OSError:
        return None, ["unreadable"], None
    if not stat.S_ISREG(st.st_mode):  # a folder, or a FIFO that would block the start for ever
        return None, ["not_a_file"], None
    if st.st_size > MAX_BYTES:
        return None, ["too_large"], None
    try:
        raw = path.read_bytes()
    except OSError:
        return None, ["unreadable"], None
    data = parse_settings_text(raw, problems)
    if not isinstance(data, dict):
        if "not_json" not in problems:  # valid JSON, but a list, text or null
            problems.append("not_object")
        data = None
    return data, problems, raw


def _merged(base: Any, top: Any) -> Any:
    """``top`` over ``base``, object by object (what the damaged file still holds wins)."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = _merged(base.get(key), value)
        return out
    return top


# -- field by field -----------------------------------------------------------------------------
def _coerce(kind: Any, value: Any) -> Any:
    """``value`` as the annotated type ``kind`` (int for a whole float, float for an int), or _INVALID."""
    args = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    if value is None:
        return None if type(None) in args else _INVALID
    if isinstance(value, bool):
        return value if bool in args else _INVALID
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return value if float in args else _INVALID  # the field's own check explains the range
        if float in args:
            try:
                return float(value)
            except OverflowError:
                return _INVALID
        if int in args and (isinstance(value, int) or value.is_integer()):
            return int(value)
        return _INVALID
    if isinstance(value, str) and str in args:
        return value
    if isinstance(value, str) and (int in args or float in args):  # "8192" typed by hand: the same number
        try:
            number = float(value.strip()) if float in args or "." in value else int(value.strip())
        except (ValueError, OverflowError):
            return _INVALID
        return _coerce(kind, number)
    return _INVALID


def build_section(klass: type, raw: Any, prefix: str, reset: list[str]) -> Any:
    """A ``klass`` with every valid value of ``raw``; each invalid one stays default and is listed."""
    obj = klass()
    if raw is _MISSING:
        return obj
    if not isinstance(raw, dict):
        reset.append(prefix)
        return obj
    hints = typing.get_type_hints(klass)
    for f in dataclasses.fields(klass):
        if f.name not in raw:
            continue
        value = _coerce(hints[f.name], raw[f.name])
        if value is _INVALID:
            reset.append(f"{prefix}.{f.name}")
            continue
        candidate = dataclasses.replace(obj, **{f.name: value})
        if any(name == f.name for name, _why in candidate.validate()):
            reset.append(f"{prefix}.{f.name}")
            continue
        obj = candidate
    return obj


def build_settings(settings_type: type, data: dict[str, Any], reset: list[str]) -> Any:
    """A ``settings_type`` (``AppSettings``) keeping every valid value of ``data``; ``reset`` gets the invalid ones.

    The type is passed in, not imported, so this file layer does not import the model that uses it.
    """
    s = settings_type()
    for f in dataclasses.fields(settings_type):
        if f.name in ("sampling", "last_model", "local_models", "first_run_done", "remotes"):
            continue
        setattr(s, f.name, build_section(type(getattr(s, f.name)), data.get(f.name, _MISSING), f.name, reset))
    sampling = data.get("sampling", _MISSING)
    if isinstance(sampling, dict):
        for key, raw in sampling.items():
            value = build_section(settings_type.SAMPLING_TYPE, raw, f"sampling[{key}]", reset)
            if not value.is_default():
                s.sampling[str(key)] = value
    elif sampling is not _MISSING and sampling is not None:  # null: no overrides, as an empty object
        reset.append("sampling")
    last = data.get("last_model", _MISSING)
    if isinstance(last, str):
        s.last_model = last
    elif last is not _MISSING:
        reset.append("last_model")
    local = data.get("local_models", _MISSING)
    if isinstance(local, list) and all(isinstance(p, str) for p in local):
        s.local_models = list(local)
    elif local is not _MISSING:  # one bad entry: the list is not what the user had, keep none of it
        s.local_models = [p for p in local if isinstance(p, str)] if isinstance(local, list) else []
        reset.append("local_models")
    remotes = data.get("remotes", _MISSING)
    if isinstance(remotes, dict):
        for name, url in remotes.items():
            if isinstance(url, str) and settings_type.check_remote(str(name), url) is None:
                s.remotes[str(name)] = url
            else:
                reset.append(f"remotes[{name}]")
    elif remotes is not _MISSING and remotes is not None:
        reset.append("remotes")
    done = data.get("first_run_done", _MISSING)
    if isinstance(done, bool):
        s.first_run_done = done
    elif done is not _MISSING:
        reset.append("first_run_done")
    return s


# -- keeping copies -----------------------------------------------------------------------------
def keep_damaged_copy(path: Path, raw: bytes | None, tag: str = "damaged") -> Path | None:
    """Keep the file as it is now beside it; returns where (an identical earlier copy is reused).

    A file that cannot be read (or is not a file) is renamed instead of copied, so it is kept too.
    """
    if raw is None:
        target = free_sibling(path, tag)
        try:
            os.replace(path, target)
        except OSError as exc:
            log.warning("settings: could not move %s aside: %s", path, exc)
            return None
        return target
    for old in sorted(path.parent.glob(f"{path.name}.{tag}-*")):
        with contextlib.suppress(OSError):
            if old.is_file() and old.stat().st_size == len(raw) and old.read_bytes() == raw:
                return old
    target = free_sibling(path, tag)
    try:
        write_bytes_atomic(target, raw)
    except OSError as exc:
        log.warning("settings: could not keep a copy of %s: %s", path, exc)
        return None
    return target


def _clean(raw: bytes, settings_type: type) -> bool:
    problems: list[str] = []
    data = parse_settings_text(raw, problems)
    if problems or not isinstance(data, dict):
        return False
    reset: list[str] = []
    build_settings(settings_type, data, reset)
    return not reset


def save_settings_text(path: Path, text: str, settings_type: type) -> Path:
    """Write ``text`` as ``path`` atomically, then as ``settings.json.bak``.

    Whatever is at ``path`` and is not a good settings file (damaged, edited by hand into
    something invalid, a folder) is kept as ``.damaged-<time>`` first.
    """
    data = text.encode("utf-8")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if keep_damaged_copy(path, None) is None:
            raise OSError(f"{path} is not a file and cannot be moved aside")
    elif st is not None:
        try:
            old = path.read_bytes()
        except OSError:
            old = None
        if old != data and (old is None or not _clean(old, settings_type)) and keep_damaged_copy(path, old) is None:
            raise OSError(f"{path} is damaged and no copy of it could be kept; not overwritten")
    write_bytes_atomic(path, data)
    try:
        write_bytes_atomic(backup_path(path), data)
    except OSError as exc:
        log.warning("settings: could not write %s: %s", backup_path(path), exc)
    return path


def load_settings(path: Path, settings_type: type, repair: bool = True) -> tuple[Any, SettingsLoadReport]:
    """Every valid value in ``path`` (gaps from the last good copy), and what was wrong.

    With ``repair`` a damaged file is kept as a copy and the repaired settings are saved, so the
    next start is clean and nothing is lost; without it (a second instance) nothing is written.
    """
    report = SettingsLoadReport(path)
    data, report.problems, raw = read_settings_file(path)
    version = data.get("version") if data else None
    if isinstance(version, int) and not isinstance(version, bool) and version > settings_type.VERSION:
        report.problems.append("newer")
        report.version = version
    if any(p in INCOMPLETE for p in report.problems):
        bak_data, bak_problems, _ = read_settings_file(backup_path(path))
        if isinstance(bak_data, dict) and not bak_problems:
            data = _merged(bak_data, data or {})
            report.restored_from = backup_path(path)
    if not data and not report.problems:
        return settings_type(), report
    settings = build_settings(settings_type, data or {}, report.reset_fields)
    if report.ok:
        return settings, report
    log.warning("settings: %s has problems %s; reset to defaults: %s", path, report.problems,
                ", ".join(report.reset_fields) or "none")
    if repair:
        pure_newer = report.problems == ["newer"] and not report.reset_fields
        tag = f"v{report.version}" if pure_newer else "damaged"
        keep_raw = None if any(p in ("not_a_file", "unreadable", "too_large") for p in report.problems) else raw
        report.damaged_copy = keep_damaged_copy(path, keep_raw, tag)
        if report.damaged_copy is not None:
            try:
                settings.save(path)
                report.saved = True
            except (OSError, ValueError) as exc:
                log.warning("settings: repaired settings not saved: %s", exc)
    return settings, report
