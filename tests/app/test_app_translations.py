"""The 简体中文 translation is complete and in step with the UI strings in app/*.py."""

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "resources" / "translations" / "ternary_chat_zh_CN.ts"


def _messages(path: Path) -> dict[tuple[str, str], ET.Element]:
    out = {}
    for ctx in ET.parse(path).getroot().iter("context"):
        for m in ctx.iter("message"):
            out[(ctx.find("name").text, m.find("source").text)] = m.find("translation")
    return out


def test_every_string_translated_and_qm_present():
    msgs = _messages(TS)
    assert len(msgs) > 250
    unfinished = [src for (_c, src), tr in msgs.items() if tr.get("type") or not (tr.text or "").strip()]
    assert unfinished == []
    for (_c, src), tr in msgs.items():  # placeholders survive translation
        for k in range(1, 7):
            assert (f"%{k}" in src) == (f"%{k}" in tr.text), src
    qm = TS.with_suffix(".qm")
    assert qm.is_file() and qm.stat().st_mtime >= TS.stat().st_mtime - 5


def test_ts_matches_the_strings_in_the_code(tmp_path):
    lupdate = Path(sys.executable).parent / "pyside6-lupdate"
    if not lupdate.exists():
        lupdate = Path(shutil.which("pyside6-lupdate") or "pyside6-lupdate")
    fresh = tmp_path / "fresh.ts"
    sources = sorted(str(p) for p in (ROOT / "app").glob("*.py"))
    subprocess.run([str(lupdate), *sources, "-ts", str(fresh), "-no-obsolete"], check=True, capture_output=True)
    assert set(_messages(fresh)) == set(_messages(TS)), "run: python scripts/translations_zh_CN.py"
