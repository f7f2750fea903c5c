"""``ternary kb`` end to end on the CPU: a folder the test writes, a tiny random model the test builds.

The tiny model answers gibberish, so the tests check structure: which passages went into the
prompt (``--json`` gives their text), numbering, what was left out, the files' status and errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.paths import data_dir
from runtime.cli import main
from tests import model_factory as mf

ROOT = Path(__file__).resolve().parents[2]

LIGHTHOUSE = """# Harbour guide

## The lighthouse

The old lighthouse on the north pier is 31 metres tall. Its lamp was converted to electricity in 1921
and can be seen from 40 kilometres at sea. Visitors may climb its 164 steps on Sundays.
"""
BAKERY = """# Recipes

## Rye bread

Mix 500 grams of rye flour with sourdough starter, salt and warm water. Let the dough rise overnight,
then bake for one hour at 220 degrees. The crust should sound hollow when knocked.
"""
GARDEN = """Tomatoes need at least six hours of sun a day. Water them at the roots in the morning, never the
leaves, and tie the stems to stakes once the first flowers appear.
"""
CHINESE = "熊猫的故乡\n\n大熊猫生活在四川的山林中，每天要吃十二到三十八公斤竹子。野生大熊猫大约有一千八百只。\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny random Qwen3 in a Hugging Face folder, with room for a few passages (byte-level-ish tokens)."""
    _, _, _, folder = mf.tiny_model_files(tmp_path_factory.mktemp("kbmodel"), seed=1, max_position_embeddings=4096)
    return folder


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "lighthouse.md").write_text(LIGHTHOUSE, encoding="utf-8")
    (folder / "bakery.md").write_text(BAKERY, encoding="utf-8")
    (folder / "sub" / "garden.txt").write_text(GARDEN, encoding="utf-8")
    (folder / "sub" / "熊猫.txt").write_text(CHINESE, encoding="utf-8")
    (folder / "broken.txt").write_bytes(b"\x00\x01\x02\xff" * 500)  # binary content under a text name
    return folder


def kb(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["kb", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def ask_args(db: Path, model: Path, question: str, *extra: str) -> list[str]:
    return ["ask", "docs", question, str(model), "--db", str(db), "--device", "cpu", "--ctx", "2048",
            "--max-tokens", "6", "--temperature", "0", *extra]


def test_create_list_ask_files_rm(docs, model, tmp_path, capsys):
    db = tmp_path / "kb.sqlite3"
    rc, out, err = kb(capsys, "create", "docs", str(docs), "--db", str(db))
    assert rc == 0 and "created docs" in out
    assert "problem:" in err and "broken.txt" in err  # the binary file is named, the rest indexed
    assert "4 added" in err

    rc, out, _ = kb(capsys, "list", "--db", str(db), "--json")
    [row] = json.loads(out)
    assert row["name"] == "docs" and row["files"] == 5 and row["indexed"] == 4 and row["problems"] == 1
    assert row["passages"] >= 4 and row["size"] > 2000
    rc, out, _ = kb(capsys, "list", "--db", str(db))
    assert rc == 0 and out.splitlines()[0].split() == ["NAME", "FILES", "PASSAGES", "PROBLEMS", "SIZE"]
    assert out.splitlines()[1].split()[:2] == ["docs", "5"]

    rc, out, err = kb(capsys, *ask_args(db, model, "How tall is the lighthouse on the north pier?", "--json"))
    assert rc == 0
    result = json.loads(out)
    assert set(result) >= {"answer", "sources", "left_out", "stats", "cited", "note"}
    sources = result["sources"]
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert sources[0]["path"].endswith("lighthouse.md") and "31 metres" in sources[0]["text"]
    assert "31 metres" in sources[0]["quote"] and sources[0]["location"].startswith("lighthouse.md")
    assert all(s["used"] for s in sources) and result["left_out"] == []
    st = result["stats"]
    assert st["used"] == len(sources) and st["generated_tokens"] == 6 and st["context_length"] == 2048
    assert st["prompt_tokens"] > 50 and st["device"] == "cpu" and st["embedding"] is False

    rc, out, err = kb(capsys, *ask_args(db, model, "大熊猫每天吃多少竹子？"))
    assert rc == 0
    answer, _, listing = out.partition("\nSources:\n")
    lines = listing.splitlines()
    assert lines[0].startswith("[1] ") and "熊猫.txt" in lines[0]
    assert "竹子" in lines[1]  # the quote, under its source

    rc, out, _ = kb(capsys, "files", "docs", "--db", str(db))
    [lighthouse] = [line for line in out.splitlines() if "lighthouse.md" in line]
    [broken] = [line for line in out.splitlines() if "broken.txt" in line]
    assert lighthouse.split()[:2] == ["indexed", "1"] and broken.startswith("error") and "(binary)" in broken
    rc, out, _ = kb(capsys, "files", "docs", "--db", str(db), "--json")
    errors = [f for f in json.loads(out) if f["status"] == "error"]
    assert len(errors) == 1 and errors[0]["error"] and errors[0]["error_code"]

    rc, out, _ = kb(capsys, "rm", "docs", "--db", str(db))
    assert rc == 0 and "removed docs" in out
    rc, out, _ = kb(capsys, "list", "--db", str(db), "--json")
    assert json.loads(out) == []


def test_small_context_lists_what_was_left_out(docs, model, tmp_path, capsys):
    db = tmp_path / "kb.sqlite3"
    assert kb(capsys, "create", "docs", str(docs), "--db", str(db))[0] == 0
    args = ask_args(db, model, "lighthouse bread tomatoes", "--json")
    args[args.index("--ctx") + 1] = "600"  # instructions ~390 tokens of the tiny tokenizer: room for one passage
    rc, out, _ = kb(capsys, *args)
    assert rc == 0
    result = json.loads(out)
    assert len(result["sources"]) >= 1 and len(result["left_out"]) >= 1
    assert all(item["n"] is None and "did not fit" in item["reason"] for item in result["left_out"])
    assert "did not fit in the 600-token context" in result["note"]
    assert result["stats"]["prompt_tokens"] <= 600 - 6
    rc, out, _ = kb(capsys, *args[:-1])
    assert rc == 0 and "\nLeft out (" in out and "did not fit" in out


def test_update_and_add_reindex_only_what_changed(docs, tmp_path, capsys):
    db = tmp_path / "kb.sqlite3"
    assert kb(capsys, "create", "docs", str(docs / "lighthouse.md"), str(docs / "bakery.md"), "--db", str(db))[0] == 0
    (docs / "bakery.md").write_text(BAKERY + "\nAdd caraway seeds for flavour.\n", encoding="utf-8")
    rc, _, err = kb(capsys, "update", "docs", "--db", str(db))
    assert rc == 0 and "1 updated, 1 unchanged" in err
    rc, _, err = kb(capsys, "add", "docs", str(docs / "sub"), "--db", str(db))
    assert rc == 0 and "2 added" in err
    rc, out, _ = kb(capsys, "list", "--db", str(db), "--json")
    assert json.loads(out)[0]["files"] == 4


def test_errors_are_one_line_and_exit_1(docs, model, tmp_path, capsys):
    db = tmp_path / "kb.sqlite3"
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = kb(capsys, "create", "nothing", str(empty), "--db", str(db))
    assert rc == 1 and "could be indexed" in err and "no knowledge base was created" in err
    assert json.loads(kb(capsys, "list", "--db", str(db), "--json")[1]) == []

    rc, _, err = kb(capsys, "create", "x", str(tmp_path / "missing"), "--db", str(db))
    assert rc == 1 and err.strip() == f"error: no such file or folder: {tmp_path / 'missing'}"

    assert kb(capsys, "create", "docs", str(docs / "bakery.md"), "--db", str(db))[0] == 0
    rc, _, err = kb(capsys, "create", "docs", str(docs / "bakery.md"), "--db", str(db))
    assert rc == 1 and "exists already" in err

    for command in (["ask", "nope", "q", str(model)], ["files", "nope"], ["rm", "nope"], ["update", "nope"]):
        rc, _, err = kb(capsys, *command, "--db", str(db))
        assert rc == 1 and err.startswith("error: no knowledge base named 'nope'") and "docs" in err

    rc, _, err = kb(capsys, "ask", "docs", "q", str(tmp_path / "no-model.gguf"), "--db", str(db))
    assert rc == 1 and "model not found" in err
    rc, _, err = kb(capsys, "ask", "docs", "  ", str(model), "--db", str(db))
    assert rc == 1 and "question is empty" in err
    rc, _, err = kb(capsys, "ask", "docs", "q", str(model), "--db", str(db), "--embed-model", str(tmp_path / "e.gguf"))
    assert rc == 1 and "embedding model not found" in err


def test_default_database_is_the_apps(docs, capsys):
    rc, _, _ = kb(capsys, "create", "mine", str(docs / "lighthouse.md"))
    assert rc == 0
    assert (data_dir() / "knowledge.sqlite3").is_file()
    from app.knowledge.store import KnowledgeStore

    store = KnowledgeStore()  # what the app opens
    assert [b.name for b in store.bases()] == ["mine"]
    store.close()


def test_kb_is_a_ternary_subcommand_and_errors_have_no_traceback(tmp_path):
    env_home = {"TERNARY_CHAT_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "runtime", "kb", "rm", "ghost", "--db", str(tmp_path / "k.db")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, **env_home})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: no knowledge base named 'ghost' (knowledge bases: none yet)"]
    helptext = subprocess.run([sys.executable, "-m", "runtime", "--help"], capture_output=True, text=True,
                              cwd=ROOT, timeout=120, env={**os.environ, **env_home}).stdout
    assert "kb" in helptext.split()


def test_embedding_model_adds_dense_ranks(docs, model, tmp_path, capsys):
    """Any Qwen3-family file runs as an embedding model (last-token pooling): the tiny chat model will do."""
    db = tmp_path / "kb.sqlite3"
    (docs / "broken.txt").unlink()
    rc, _, err = kb(capsys, "create", "docs", str(docs), "--db", str(db), "--embed-model", str(model))
    assert rc == 0 and "embedding model: hf" in err and "(4 embedded)" in err
    rc, out, _ = kb(capsys, *ask_args(db, model, "How tall is the lighthouse?", "--json", "--embed-model", str(model)))
    assert rc == 0
    result = json.loads(out)
    assert result["stats"]["embedding"] is True
    ranks = [(s["fts_rank"], s["dense_rank"]) for s in result["sources"] + result["left_out"]]
    assert len(ranks) == 4 and all(dense is not None for _, dense in ranks)  # every passage has a vector
    assert result["sources"][0]["path"].endswith("lighthouse.md") and ranks[0][0] == 1
    rc, out, _ = kb(capsys, *ask_args(db, model, "How tall is the lighthouse?", "--json", "--no-embed"))
    assert all(s["dense_rank"] is None for s in json.loads(out)["sources"])


def test_ctrl_c_while_indexing_keeps_the_finished_files(docs, tmp_path, capsys, monkeypatch):
    import signal

    import app.knowledge.cli as kb_cli

    def progress_then_ctrl_c(p):
        if p.done_files == 1:  # the first file is committed: the user presses Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(kb_cli, "_progress_printer", lambda: progress_then_ctrl_c)
    db = tmp_path / "kb.sqlite3"
    previous = signal.getsignal(signal.SIGINT)
    rc, _, err = kb(capsys, "create", "docs", str(docs), "--db", str(db))
    assert rc == 1 and "cancelling after the current file" in err
    assert err.strip().splitlines()[-1].startswith("error: indexing was cancelled; the files finished so far are kept")
    assert signal.getsignal(signal.SIGINT) is previous  # Ctrl-C means "stop" again afterwards
    rc, out, _ = kb(capsys, "files", "docs", "--db", str(db), "--json")
    assert rc == 0 and 1 <= len(json.loads(out)) < 5  # kept, not all done
    monkeypatch.undo()
    rc, _, err = kb(capsys, "update", "docs", "--db", str(db))
    assert rc == 0 and "1 problem;" in err
    assert json.loads(kb(capsys, "list", "--db", str(db), "--json")[1])[0]["files"] == 5
