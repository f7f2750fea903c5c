"""Render screenshots of the app's main states into docs/screenshots/*.png (offscreen Qt).

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Nothing is staged: the window, dialogs, hardware detection, catalog, gauges, speed chart and every
reply are the live app driven by the real engine with a tiny random test model (from
tests/model_factory.py: 2 layers, random ternary weights), so the replies are real output of that
model, which is gibberish; the captions in docs/app.md say so. Nothing is written into the view or
the history database by hand. Chinese text needs a CJK font: on Debian/Ubuntu ``apt-get install
fonts-noto-cjk``; the script tells Qt to use Noto Sans CJK SC when it is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTION_EN = "How do ternary weights make a model smaller?"
QUESTION_ZH = "用三句话解释什么是三值量化。"


def _cjk_font(app) -> str:
    from PySide6.QtGui import QFont, QFontDatabase

    families = QFontDatabase.families()
    for fam in ("Noto Sans CJK SC", "Noto Sans SC", "WenQuanYi Micro Hei", "Source Han Sans SC"):
        if fam in families:
            base = "Noto Sans" if "Noto Sans" in families else app.font().family()
            font = QFont(base, 10)
            font.setFamilies([base, fam])
            app.setFont(font)
            return fam
    print("warning: no CJK font found; Chinese text will not render (apt-get install fonts-noto-cjk)")
    return ""


def _wait(app, cond, timeout=120.0) -> None:
    t0 = time.monotonic()
    while not cond():
        app.processEvents()
        time.sleep(0.01)
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("screenshot step timed out")
    for _ in range(5):
        app.processEvents()


def _save(widget, path: Path, overlay=None) -> None:
    from PySide6.QtGui import QColor, QPainter

    pix = widget.grab()
    if overlay is not None:
        over = overlay.grab()
        p = QPainter(pix)
        p.fillRect(pix.rect(), QColor(0, 0, 0, 70))  # dim the window behind the modal dialog
        x = (pix.width() - over.width()) // 2
        y = (pix.height() - over.height()) // 2
        p.drawPixmap(x, y, over)
        p.end()
    pix.save(str(path))
    print("wrote", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def real_chat(app, w, settings, model_path: str, question: str, n_tokens: int, seed: int) -> None:
    """Ask the tiny model a question in a new chat and wait for its real (gibberish) reply."""
    import dataclasses

    import app.main_window as mw
    from app.core.settings_model import SamplingSettings, model_key

    original = mw.generation_settings
    mw.generation_settings = lambda s: dataclasses.replace(original(s), ignore_eos=True)  # a full-length reply
    done: list[int] = []
    w.generationFinished.connect(done.append)
    try:
        settings.set_sampling(model_key(model_path), SamplingSettings(max_new_tokens=n_tokens, seed=seed))
        w.new_conversation()
        w.send(question)
        _wait(app, lambda: len(done) >= 1)
    finally:
        w.generationFinished.disconnect(done.append)
        mw.generation_settings = original


def warm_up(app, w, settings, model_path: str, lengths) -> None:
    """Real generations with the tiny model (in throw-away chats) so the gauges and chart hold real numbers."""
    import dataclasses

    import app.main_window as mw
    from app.core.settings_model import SamplingSettings, model_key

    original = mw.generation_settings
    mw.generation_settings = lambda s: dataclasses.replace(original(s), ignore_eos=True)  # random model: long replies
    done: list[int] = []
    w.generationFinished.connect(done.append)
    try:
        for i, n in enumerate(lengths):
            settings.set_sampling(model_key(model_path), SamplingSettings(max_new_tokens=n, seed=i))
            w.new_conversation()
            w.send("warm-up")
            _wait(app, lambda count=i + 1: len(done) >= count)
            w.delete_conversation(w.conversation_id, confirm=False)
    finally:
        mw.generation_settings = original


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--only", choices=("documents",), help="render only these screenshots (09, 10, 11)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="ternary-chat-shots-"))
    os.environ["TERNARY_CHAT_HOME"] = str(home)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import QTranslator
    from PySide6.QtWidgets import QApplication

    from app.main import create_app
    from app.theme import apply_theme
    from app.translation import install_translation

    app = create_app([sys.argv[0]], "en", "light")
    _cjk_font(app)

    import shutil

    from app.core.settings_model import AppSettings, SamplingSettings, model_key
    from app.main_window import MainWindow
    from tests.model_factory import tiny_model_files

    if args.only == "documents":
        return documents_shots(app, home, out)

    _cfg, _m, _t, folder = tiny_model_files(home / "tiny")
    model_path = str(shutil.move(str(folder), str(home / "tiny-random-test-model")))

    # 1. first run: nothing installed, no conversation
    w = MainWindow(settings=AppSettings(), autoload=False)
    w.resize(1280, 800)
    w.show()
    _wait(app, lambda: w.welcome.hardware is not None)
    _save(w, out / "01-first-run.png")
    w.close()

    # 2. chatting with gauges (real generations with the tiny model fill the gauges and chart)
    settings = AppSettings()
    settings.hardware.device = "cpu"
    settings.local_models = [model_path]
    settings.set_sampling(model_key(model_path), SamplingSettings(max_new_tokens=24, seed=3))
    w = MainWindow(settings=settings, autoload=False)
    w.resize(1280, 800)
    w.show()
    w.load_model(model_path)
    _wait(app, lambda: bool(w.model_info))
    warm_up(app, w, settings, model_path, (24, 40, 16))
    real_chat(app, w, settings, model_path, QUESTION_EN, 60, seed=3)
    w.input.setPlainText("And what about the KV cache?")
    _wait(app, lambda: True)
    _save(w, out / "02-chat-gauges.png")

    # 3. settings (hardware tab shows the cost of a manual context from the real plan)
    from app.settings_dialog import SettingsDialog

    dlg = SettingsDialog(w)
    dlg.show()
    dlg.fields["temperature"].edit.setText("2.5")  # refused inline, with the reason
    _wait(app, lambda: True)
    _save(dlg, out / "03-settings-sampling.png")
    dlg.tabs.setCurrentIndex(1)
    dlg.auto_context.setChecked(False)
    dlg.fields["context_length"].edit.setText("384")
    _wait(app, lambda: True)
    _save(dlg, out / "04-settings-hardware.png")
    dlg.tabs.setCurrentIndex(2)  # downloads: source, mirrors, the models folder with its free space
    _wait(app, lambda: True)
    _save(dlg, out / "08-settings-downloads.png")
    dlg.reject()

    # 4. model manager with the real catalog and this machine's hardware
    from app.model_manager import ModelManagerDialog

    mm = ModelManagerDialog(w)
    mm.resize(980, 520)
    mm.show()
    _wait(app, lambda: True)
    _save(mm, out / "05-model-manager.png")
    mm.reject()

    # 5. summarizing a dropped document (progress dialog over the window)
    doc = home / "annual report.txt"
    doc.write_text("\n\n".join(f"Section {i}. Revenue grew in every region; costs fell. " * 3 for i in range(40)),
                   encoding="utf-8")
    settings.set_sampling(model_key(model_path), SamplingSettings(max_new_tokens=8, seed=1))
    w.summarize_file(str(doc))
    _wait(app, lambda: w._summary_dialog is not None and w._summary_dialog.value() >= 2, timeout=300)
    _save(w, out / "06-summarizing.png", overlay=w._summary_dialog)
    w.stop()
    _wait(app, lambda: w._summary_dialog is None, timeout=300)
    w.close()

    # 6. 简体中文, dark theme
    install_translation(app, "zh_CN")
    apply_theme("dark", app)
    settings.interface.language, settings.interface.theme = "zh_CN", "dark"
    w = MainWindow(settings=settings, autoload=False)
    w.resize(1280, 800)
    w.show()
    w.load_model(model_path)
    _wait(app, lambda: bool(w.model_info))
    warm_up(app, w, settings, model_path, (32, 20))
    real_chat(app, w, settings, model_path, QUESTION_ZH, 48, seed=5)
    _wait(app, lambda: True)
    _save(w, out / "07-chat-zh-dark.png")
    w.close()
    for tr in app.findChildren(QTranslator):
        app.removeTranslator(tr)
    install_translation(app, "en")
    apply_theme("light", app)
    QApplication.processEvents()
    return documents_shots(app, home, out)


KB_QUESTION = "What is the harbour gate code?"


def documents_shots(app, home: Path, out: Path) -> int:
    """09: a question answered from attached documents, with its numbered sources; 10: a source's passage.

    The documents are attached through the app (indexed by the real indexer, retrieved by FTS5) and
    the answer is the tiny model's real output; its model has 4,096 positions (the 512 of the other
    shots hold no passage beside the instructions)."""
    import dataclasses
    import shutil

    import app.main_window as mw
    from app.core.settings_model import AppSettings, SamplingSettings, model_key
    from app.main_window import MainWindow
    from tests.app.pdf_samples import pages_pdf
    from tests.model_factory import tiny_model_files

    folder = tiny_model_files(home / "tiny-kb", max_position_embeddings=4096)[3]
    model_path = str(shutil.move(str(folder), str(home / "tiny-random-test-model-4k")))
    docs = home / "harbour"
    docs.mkdir()
    (docs / "harbour notes.md").write_text(
        "# Harbour\n\n## Boats\n\nThe ferry leaves at nine and returns at noon.\n\n## Gates\n\n"
        "Two gates lead to the quay. The harbour gate code is PELICAN-42 and it changes every spring. "
        "Visitors sign in at the office before they go through.\n\n## Weather\n\n"
        "Fog is common in the morning; the harbour master posts warnings at the gate.\n", encoding="utf-8")
    pages_pdf(docs / "keeper manual.pdf", [["Chapter one: the lighthouse lamp is checked at dusk."],
                                          ["Chapter two: the keeper logs the tides and the gate code changes."],
                                          ["Chapter three: the fog horn sounds every thirty seconds."]])
    settings = AppSettings()
    settings.hardware.device = "cpu"
    settings.hardware.context_length = 720  # small enough that one passage does not fit: "Left out" shows
    settings.local_models = [model_path]
    settings.set_sampling(model_key(model_path), SamplingSettings(max_new_tokens=40, seed=2))
    w = MainWindow(settings=settings, autoload=False)
    w.resize(1280, 800)
    w.show()
    w.load_model(model_path)
    _wait(app, lambda: bool(w.model_info))
    reports: list = []
    w.knowledge.indexingFinished.connect(reports.append)
    w.new_conversation()  # a chat of its own (after the other shots the last chat is reopened at start)
    w.attach_paths([str(docs / "harbour notes.md"), str(docs / "keeper manual.pdf")])
    _wait(app, lambda: bool(reports))
    original = mw.generation_settings
    mw.generation_settings = lambda s: dataclasses.replace(original(s), ignore_eos=True)  # a full-length reply
    done: list[int] = []
    w.generationFinished.connect(done.append)
    try:
        w.send(KB_QUESTION)
        _wait(app, lambda: bool(done))
    finally:
        mw.generation_settings = original
    w.close_banner()
    _wait(app, lambda: True)
    _save(w, out / "09-documents-cited-answer.png")
    reply = w.chat_view.widgets[-1]
    gate = next(i for i, s in enumerate(reply.sources) if "Gates" in s["location"])
    w.open_source(reply.message_id, gate)  # what clicking the source's [n] does
    _wait(app, lambda: w.passage_dialog is not None and w.passage_dialog.isVisible())
    _save(w, out / "10-passage-dialog.png", overlay=w.passage_dialog)
    w.passage_dialog.close()
    knowledge_bases_shot(app, w, docs, out)
    w.close()
    return 0


def knowledge_bases_shot(app, w, docs: Path, out: Path) -> None:
    """11: Documents → Knowledge bases…: a base over a folder, indexed by the real indexer, with a
    scanned PDF named with its reason and a file of the folder excluded with the Exclude button."""
    from app.knowledge_dialog import KnowledgeBasesDialog
    from tests.app.pdf_samples import blank_pdf

    (docs / "old draft.md").write_text("# Draft\n\nAn outdated list of the harbour's opening hours.\n",
                                       encoding="utf-8")
    blank_pdf(docs / "scanned chart.pdf")
    finished: list = []
    w.knowledge.runner.jobFinished.connect(finished.append)
    dlg = KnowledgeBasesDialog(w.knowledge.store, w.knowledge.runner, w)  # what the menu opens (not modal here)
    dlg.resize(980, 560)
    dlg.show()
    dlg.create_base("Harbour")
    dlg.add_paths([docs])
    _wait(app, lambda: bool(finished))
    top = dlg.files_tree.topLevelItem(0)
    draft = next(top.child(i) for i in range(top.childCount()) if top.child(i).text(0) == "old draft.md")
    dlg.files_tree.setCurrentItem(draft)
    dlg.exclude_button.click()
    _wait(app, lambda: True)
    _save(w, out / "11-knowledge-bases.png", overlay=dlg)
    dlg.close()


if __name__ == "__main__":
    raise SystemExit(main())
