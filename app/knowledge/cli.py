"""``ternary kb``: knowledge bases from the terminal - create, update, add, ask, list, files, rm.

Why in the app package: it drives the same store as the app (``<data dir>/knowledge.sqlite3`` by
default, ``--db`` for another), so a base made here is chosen in a chat there and vice versa; and
it answers with the same grounded prompt (:mod:`app.knowledge.answer`) and embedding-model rule
(:mod:`app.knowledge.embedder`). Registered in :data:`runtime.cli.SUBCOMMAND_MODULES`.

Output: answers and listings on stdout, progress and per-file problems on stderr. Errors a user can
act on raise :class:`runtime.errors.TernaryError` (one line, exit 1, via :func:`runtime.cli.main`).
Heavy modules (torch, the engine) are imported only by the commands that need them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.errors import TernaryError

DEFAULT_ANSWER_TOKENS = 512
DEFAULT_PASSAGES = 8


# -- parser ---------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="PATH", help="knowledge database (default: the app's knowledge.sqlite3)")


def _embed_options(p: argparse.ArgumentParser, device: bool = True) -> None:
    if device:
        from runtime.sampling_params import cli_device

        p.add_argument("--device", default="auto", type=cli_device,
                       help="where the embedding model runs: auto (default), cpu, cuda or cuda:N")
    emb = p.add_mutually_exclusive_group()
    emb.add_argument("--embed-model", metavar="FILE",
                     help="embedding model for dense search (default: the installed catalog embedding model, "
                          "if any; else full-text search only)")
    emb.add_argument("--no-embed", action="store_true", help="full-text search only, even if an embedding "
                                                               "model is installed")


def register(sub: Any) -> None:
    from runtime.cli.generate import MAX_CLI_CONTEXT
    from runtime.sampling_params import cli_device, cli_int, cli_type

    kb = sub.add_parser("kb", help="knowledge bases: index documents and ask questions with cited answers",
                        description="Named collections of files and folders (txt, md, pdf, docx, html, source "
                                    "code), indexed for search, shared with the app. Ask a question and a model "
                                    "answers from the best passages, citing them as [1], [2], ...")
    cmds = kb.add_subparsers(dest="kb_command", metavar="KB_COMMAND", required=True)

    p = cmds.add_parser("create", help="create a knowledge base from files and folders and index it")
    p.add_argument("name", help="name of the new knowledge base")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders (folders are walked)")
    _embed_options(p)
    _common(p)
    p.set_defaults(func=run_create)

    p = cmds.add_parser("update", help="re-index a knowledge base (only files that changed)")
    p.add_argument("name")
    _embed_options(p)
    _common(p)
    p.set_defaults(func=run_update)

    p = cmds.add_parser("add", help="add files or folders to a knowledge base and index them")
    p.add_argument("name")
    p.add_argument("paths", nargs="+", metavar="PATH")
    _embed_options(p)
    _common(p)
    p.set_defaults(func=run_add)

    p = cmds.add_parser("ask", help="answer a question from a knowledge base, with numbered sources",
                        description="Retrieve the best passages, give the model as many as fit in its context, "
                                    "stream the answer, then list the sources it was given and what was left out.")
    p.add_argument("name", help="knowledge base")
    p.add_argument("question")
    p.add_argument("model", help="model: .ternary file, .gguf file or Hugging Face folder")
    _embed_options(p, device=False)
    p.add_argument("--device", default="auto", type=cli_device, help="auto (default), cpu, cuda or cuda:N "
                                                                     "(the model and the embedding model)")
    p.add_argument("--ctx", type=cli_int(1, MAX_CLI_CONTEXT, "--ctx"), metavar="N",
                   help="context length in tokens (default: the planner's choice)")
    p.add_argument("--max-tokens", "--max-new-tokens", dest="max_new_tokens", type=cli_type("max_new_tokens"),
                   default=DEFAULT_ANSWER_TOKENS, metavar="N",
                   help=f"answer length limit, also reserved in the context (default {DEFAULT_ANSWER_TOKENS})")
    p.add_argument("-k", "--passages", type=cli_int(1, 100, "--passages"), default=DEFAULT_PASSAGES, metavar="K",
                   help=f"passages to retrieve (default {DEFAULT_PASSAGES}); as many as fit are used")
    p.add_argument("--temperature", type=cli_type("temperature"), metavar="T",
                   help="0..2, 0 = greedy (default: the model's)")
    p.add_argument("--seed", type=cli_type("seed"), metavar="S", help="random seed (same seed => same answer)")
    think = p.add_mutually_exclusive_group()
    think.add_argument("--think", dest="enable_thinking", action="store_true", default=None,
                       help="enable the thinking channel (models whose template supports it)")
    think.add_argument("--no-think", dest="enable_thinking", action="store_false", help="disable thinking")
    p.add_argument("--json", action="store_true", help="print one JSON object (answer, sources, left_out, stats)")
    _common(p)
    p.set_defaults(func=run_ask)

    p = cmds.add_parser("list", help="knowledge bases with their files, passages, problems and size")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    _common(p)
    p.set_defaults(func=run_list)

    p = cmds.add_parser("files", help="the files of a knowledge base with their status and errors")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    _common(p)
    p.set_defaults(func=run_files)

    p = cmds.add_parser("rm", help="delete a knowledge base (its index only; your files stay)")
    p.add_argument("name")
    _common(p)
    p.set_defaults(func=run_rm)


# -- helpers --------------------------------------------------------------------------------------
def open_store(args: argparse.Namespace) -> Any:
    from app.knowledge.store import KnowledgeStore

    return KnowledgeStore(Path(args.db).expanduser() if args.db else None)


def named_base(store: Any, name: str) -> Any:
    base = store.base_named(name)
    if base is None:
        known = ", ".join(b.name for b in store.bases()) or "none yet"
        raise TernaryError(f"no knowledge base named {name!r} (knowledge bases: {known})")
    return base


def existing_paths(paths: list[str]) -> list[Path]:
    """The given paths, absolute; a missing one is an error before anything is written."""
    out = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise TernaryError(f"no such file or folder: {raw}")
        out.append(path.absolute())  # the store keeps the user's name for it (symlinks not resolved)
    return out


def embedder_for(args: argparse.Namespace) -> Any:
    """The embedding model (loaded) for this command, or None for full-text search only."""
    from app.knowledge.embedder import EmbedderHandle, find_embedding_model

    if args.no_embed:
        return None
    if args.embed_model:
        path = Path(args.embed_model).expanduser()
        if not path.exists():
            raise TernaryError(f"embedding model not found: {args.embed_model}")
    else:
        path = find_embedding_model()
        if path is None:
            return None
    print(f"embedding model: {path.name}", file=sys.stderr)
    return EmbedderHandle(path, args.device).get()


def _progress_printer() -> Any:
    """Progress on stderr: one rewritten line on a terminal, a line per file otherwise."""
    tty = sys.stderr.isatty()

    def progress(p: Any) -> None:
        if getattr(p, "phase", "files") == "embedding":
            text, last = f"embedding passages: {p.embedded} of {p.to_embed} done", False
            if not tty:
                sys.stderr.write(text + "\n")
                return
        else:
            text = f"[{p.done_files}/{p.total_files}] {p.passages} passages  {p.current}"
            last = p.done_files >= p.total_files
        if tty:
            sys.stderr.write("\r" + text[:100].ljust(100) + ("\n" if last else ""))
        elif p.current or last:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
    return progress


def index_and_report(store: Any, base: Any, embedder: Any) -> Any:
    """Index ``base``, print its problems and a summary on stderr; returns the indexer's report."""
    from app.knowledge.indexer import index_base

    with interrupt_cancels() as cancel:
        report = index_base(store, base.id, embedder=embedder, progress=_progress_printer(), cancel=cancel)
    for problem in report.problems:
        print(f"problem: {problem.path}: {problem.message} ({problem.code})", file=sys.stderr)
    if getattr(report, "skipped", None):
        print(f"skipped {len(report.skipped)} files of types that are not indexed (e.g. {report.skipped[0].name})",
              file=sys.stderr)
    print(f"{base.name}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
          f"{report.removed} removed, {_count(len(report.problems), 'problem')}; "
          f"{_count(report.passages, 'passage')}"
          + (f" ({report.embedded} embedded)" if getattr(report, "embedded", 0) else "")
          + f" in {report.seconds:.1f} s", file=sys.stderr)
    if report.cancelled:
        raise IndexingInterrupted(f"indexing was cancelled; the files finished so far are kept "
                                  f"(`ternary kb update {base.name}` continues)")
    return report


class IndexingInterrupted(TernaryError):
    """Ctrl-C while indexing: the indexer stopped between files, so what finished is kept."""


@contextlib.contextmanager
def interrupt_cancels() -> Iterator[Any]:
    """A cancel token that Ctrl-C sets (instead of killing the indexer mid-file) while the block runs."""
    from runtime.generation import CancelToken

    cancel = CancelToken()
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum: int, frame: Any) -> None:
        if cancel.cancelled:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        print("\ncancelling after the current file (Ctrl-C again to stop at once)", file=sys.stderr)
        cancel.cancel()

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _indexed_files(store: Any, base_id: int) -> list[Any]:
    return [f for f in store.files(base_id) if f.status == "indexed"]


# -- commands -------------------------------------------------------------------------------------
def run_create(args: argparse.Namespace) -> int:
    paths = existing_paths(args.paths)
    store = open_store(args)
    try:
        if store.base_named(args.name) is not None:
            raise TernaryError(f"a knowledge base named {args.name!r} exists already "
                               f"(use `ternary kb add` or `ternary kb update`)")
        embedder = embedder_for(args)
        base = store.create_base(args.name)
        store.add_paths(base.id, paths)
        index_and_report(store, base, embedder)
        if not _indexed_files(store, base.id):
            store.delete_base(base.id)
            raise TernaryError(f"nothing in {', '.join(args.paths)} could be indexed (see the problems above); "
                               f"no knowledge base was created")
        print(f"created {args.name}")
        return 0
    finally:
        store.close()


def run_update(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        base = named_base(store, args.name)
        index_and_report(store, base, embedder_for(args))
        return 0
    finally:
        store.close()


def run_add(args: argparse.Namespace) -> int:
    paths = existing_paths(args.paths)
    store = open_store(args)
    try:
        base = named_base(store, args.name)
        store.add_paths(base.id, paths)
        index_and_report(store, base, embedder_for(args))
        return 0
    finally:
        store.close()


def run_rm(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        base = named_base(store, args.name)
        store.delete_base(base.id)
        print(f"removed {args.name}")
        return 0
    finally:
        store.close()


def base_summary(store: Any, base: Any) -> dict[str, Any]:
    files = store.files(base.id)
    return {"name": base.name, "files": len(files), "indexed": sum(f.status == "indexed" for f in files),
            "passages": sum(f.passages for f in files), "problems": sum(f.status == "error" for f in files),
            "size": sum(f.size for f in files), "roots": [str(r) for r in store.roots(base.id)]}


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def run_list(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        rows = [base_summary(store, b) for b in store.bases()]
    finally:
        store.close()
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    if not rows:
        print("no knowledge bases (create one with `ternary kb create NAME PATH...`)")
        return 0
    width = max(4, *(len(r["name"]) for r in rows))
    print(f"{'NAME':<{width}}  {'FILES':>5}  {'PASSAGES':>8}  {'PROBLEMS':>8}  {'SIZE':>9}")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['files']:>5}  {r['passages']:>8}  {r['problems']:>8}  "
              f"{human_size(r['size']):>9}")
    return 0


def run_files(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        files = store.files(named_base(store, args.name).id)
    finally:
        store.close()
    rows = [{"path": str(f.path), "status": f.status, "passages": f.passages, "size": f.size,
             "error_code": f.error_code, "error": f.error} for f in files]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    if not rows:
        print("no files yet (folders are walked when indexed: `ternary kb update NAME`)")
    for r in rows:
        line = f"{r['status']:<8} {r['passages']:>6}  {r['path']}"
        if r["error"]:
            line += f"  -- {r['error']}" + (f" ({r['error_code']})" if r["error_code"] else "")
        print(line)
    return 0


def _settings(args: argparse.Namespace) -> Any:
    from runtime.generation import GenerationSettings
    from runtime.sampling_params import validate_generation_settings

    settings = GenerationSettings(temperature=args.temperature, seed=args.seed, max_new_tokens=args.max_new_tokens,
                                  enable_thinking=args.enable_thinking)
    validate_generation_settings(settings)
    return settings


def _load_engine(args: argparse.Namespace) -> Any:
    from runtime.engine import Engine

    progress = None
    if not args.json and sys.stderr.isatty():
        def progress(stage: str, fraction: float) -> None:
            sys.stderr.write(f"\rloading: {stage:<24s} {fraction * 100:5.1f}%")
            if fraction >= 1.0:
                sys.stderr.write("\r" + " " * 50 + "\r")
            sys.stderr.flush()
    return Engine.load(args.model, device=args.device, context_length=args.ctx, progress=progress)


def run_ask(args: argparse.Namespace) -> int:
    from app.knowledge.answer import build_grounded_prompt, cited_numbers, left_out_reason_english
    from app.knowledge.retrieval import search
    from runtime.generation import DoneEvent, NoticeEvent, TextEvent

    question = args.question.strip()
    if not question:
        raise TernaryError("the question is empty")
    if not Path(args.model).expanduser().exists():
        raise TernaryError(f"model not found: {args.model}")
    settings = _settings(args)
    store = open_store(args)
    try:
        base = named_base(store, args.name)
        embedder = embedder_for(args)
        t0 = time.perf_counter()
        hits = search(store, [base.id], question, k=args.passages, embedder=embedder)
        retrieval_s = time.perf_counter() - t0
    finally:
        store.close()
    if embedder is not None:
        embedder.close()
    engine = _load_engine(args)
    try:
        context = int(engine.info.context_length)
        prompt = build_grounded_prompt([], question, hits, count_tokens=lambda m: engine.count_tokens(m, settings),
                                       context_length=context, answer_tokens=settings.max_new_tokens)
        if not args.json:
            if not hits:
                print(f"note: nothing in {args.name} matches the question", file=sys.stderr)
            if prompt.note:
                print(f"note: {prompt.note}", file=sys.stderr)
        done = None
        for ev in engine.generate(prompt.messages, settings):
            if isinstance(ev, DoneEvent):
                done = ev
            elif isinstance(ev, NoticeEvent):
                print(f"note: {ev.message}", file=sys.stderr)
            elif isinstance(ev, TextEvent) and not args.json:
                stream = sys.stdout if ev.channel == "answer" else sys.stderr
                stream.write(ev.text)
                stream.flush()
        assert done is not None
    finally:
        engine.close()
    cited = cited_numbers(done.text, limit=len(prompt.used))
    items = prompt.sources_json(question)
    used = [dict(item, text=s.hit.passage.text, cited=s.number in cited)
            for item, s in zip(items, prompt.used, strict=False)]
    left_out = [dict(item, reason=left_out_reason_english(item)) for item in items[len(prompt.used):]]
    st = done.stats
    if args.json:
        print(json.dumps({
            "answer": done.text, "thinking": done.thinking, "sources": used, "left_out": left_out,
            "cited": cited, "note": prompt.note,
            "stats": {"retrieved": len(hits), "used": len(used), "left_out": len(left_out),
                      "dropped_messages": prompt.dropped_messages, "retrieval_s": retrieval_s,
                      "prompt_tokens": st.prompt_tokens, "generated_tokens": st.generated_tokens,
                      "context_length": st.context_length, "ttft_s": st.ttft_s, "decode_tok_s": st.decode_tok_s,
                      "total_s": st.total_s, "finish_reason": st.finish_reason, "device": st.device,
                      "model": engine.info.name, "embedding": embedder is not None},
        }, ensure_ascii=False))
        return 0
    out = ["", "", "Sources:" if used else "Sources: none (the answer is not grounded in the knowledge base)"]
    for item in used:
        mark = "" if item["cited"] else "  (not cited)"
        out.append(f"[{item['n']}] {item['location']}{mark}")
        out.append(f"    “{item['quote']}”")
    if left_out:
        out.append(f"Left out ({len(left_out)}, did not fit in the {context}-token context):")
        out += [f"  - {item['location']}: {item['reason']}" for item in left_out]
    print("\n".join(out))
    print(f"[{st.prompt_tokens} prompt tokens, {st.generated_tokens} generated; {len(used)} of {len(hits)} "
          f"passages used; finish: {st.finish_reason}]", file=sys.stderr)
    return 0
