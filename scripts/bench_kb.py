#!/usr/bin/env python3
"""Knowledge-base benchmark: index 1,000 pages of text (FTS only), then re-index the unchanged folder.

What it builds (deterministic, seed 0) in a temporary folder: pages of ~330 words of varied prose on
eight topics (hardware, town history, cooking, astronomy, software, finance, biology, travel), one
page in ten in Chinese, written as a mix of files: .md files of 5 pages with headings, .txt files of
5 pages, and one multi-page PDF holding a fifth of the pages (English only: the test PDF writer
uses a standard Type 1 font). It reports wall time, passages, database size (after a checkpoint)
and the time to re-index the unchanged folder.

``--vectors 10000,100000`` instead measures dense search over random 1024-d unit vectors: our
float16 BLOB column scanned with numpy (loading from SQLite each query, and with the matrix kept in
memory) against sqlite-vec's ``vec0`` table, if ``sqlite_vec`` imports and this Python's sqlite3
can load extensions (pip install --target DIR sqlite-vec; PYTHONPATH=DIR).

    .venv/bin/python scripts/bench_kb.py                 # 1,000 pages
    .venv/bin/python scripts/bench_kb.py --pages 200 --keep /tmp/kb-bench
    PYTHONPATH=/tmp/sqlitevec:.venv/lib/python3.11/site-packages /usr/bin/python3 scripts/bench_kb.py \\
        --vectors 10000,100000
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOPICS = {
    "hardware": (["board", "processor", "memory controller", "fan", "power supply", "driver", "firmware", "cache",
                  "bus", "heat sink", "connector", "accelerator"],
                 ["draws", "reaches", "supports", "needs", "reports", "limits", "cools", "feeds"],
                 ["watts", "gigabytes", "cores", "megahertz", "degrees", "lanes"]),
    "history": (["town", "river", "bridge", "market", "mill", "charter", "council", "abbey", "harbour", "guild",
                 "festival", "library"],
                ["was founded", "was rebuilt", "grew", "declined", "was granted", "hosted", "flooded", "traded"],
                ["inhabitants", "arches", "years", "ships", "workers", "books"]),
    "cooking": (["dough", "starter", "oven", "sauce", "broth", "pastry", "knife", "skillet", "marinade", "flour",
                 "butter", "spice blend"],
                ["rests", "bakes", "simmers", "rises", "thickens", "browns", "cools", "ferments"],
                ["grams", "minutes", "degrees", "percent", "cups", "hours"]),
    "astronomy": (["planet", "moon", "comet", "nebula", "telescope", "orbit", "crater", "ring system",
                   "asteroid", "galaxy", "star cluster", "eclipse"],
                  ["orbits", "reflects", "appears", "rotates", "emits", "crosses", "eclipses", "outshines"],
                  ["kilometres", "days", "light years", "hours", "moons", "degrees"]),
    "software": (["compiler", "scheduler", "database", "parser", "cache layer", "thread pool", "index",
                  "network stack", "file system", "allocator", "test suite", "build script"],
                 ["returns", "allocates", "retries", "caches", "parses", "blocks", "spawns", "flushes"],
                 ["milliseconds", "requests", "threads", "megabytes", "lines", "connections"]),
    "finance": (["budget", "invoice", "ledger", "dividend", "loan", "pension fund", "audit", "tax return",
                 "portfolio", "bond", "payroll", "forecast"],
                ["rises", "falls", "matures", "balances", "accrues", "is audited", "is reported", "pays"],
                ["euros", "percent", "quarters", "accounts", "shares", "months"]),
    "biology": (["cell", "enzyme", "protein", "membrane", "root system", "leaf", "bacterium", "gene", "neuron",
                 "muscle", "seed", "fungus"],
                ["divides", "binds", "absorbs", "expresses", "grows", "signals", "mutates", "decays"],
                ["micrometres", "hours", "species", "molecules", "percent", "generations"]),
    "travel": (["train", "ferry", "hostel", "border crossing", "ticket", "itinerary", "luggage", "visa",
                "night bus", "mountain pass", "harbour town", "airport"],
               ["departs", "arrives", "costs", "connects", "is delayed", "fills up", "closes", "opens"],
               ["kilometres", "euros", "hours", "stops", "nights", "passengers"]),
}
ZH = (["知识库", "检索", "向量", "文件", "索引", "段落", "模型", "问题", "答案", "数据库", "引用", "页面"],
      ["保存", "更新", "删除", "查找", "生成", "读取", "比较", "排序"],
      ["个", "秒", "页", "条", "次", "份"])
_NAMES = ["Aldor", "Brisk", "Corvin", "Delmar", "Estra", "Fenwick", "Galen", "Hollis", "Istra", "Jorvik",
          "Kestrel", "Lunar", "Marlow", "Norrin", "Orsk", "Pellam", "Quill", "Rennet", "Solace", "Tamsin"]


def _sentence(rng: random.Random, nouns: list[str], verbs: list[str], units: list[str]) -> str:
    a, b = rng.sample(nouns, 2)
    n = rng.choice([rng.randint(2, 99), rng.randint(100, 9999), round(rng.uniform(0.5, 99.5), 1)])
    name = rng.choice(_NAMES)
    forms = [f"The {a} of {name} {rng.choice(verbs)} {n} {rng.choice(units)} after the {b} was changed.",
             f"According to the {year(rng)} notes, the {a} {rng.choice(verbs)} only when the {b} is ready.",
             f"{name} measured {n} {rng.choice(units)} for the {a}, which surprised the team working on the {b}.",
             f"Unlike the {b}, the {a} {rng.choice(verbs)} slowly, so plan for about {n} {rng.choice(units)}.",
             f"In most cases the {a} and the {b} are checked together; {name} wrote down {n} {rng.choice(units)}."]
    return rng.choice(forms)


def year(rng: random.Random) -> int:
    return rng.randint(1600, 2024)


def _zh_sentence(rng: random.Random) -> str:
    nouns, verbs, units = ZH
    a, b = rng.sample(nouns, 2)
    return f"{rng.choice(_NAMES)}在{year(rng)}年{rng.choice(verbs)}了{rng.randint(2, 999)}{rng.choice(units)}{a}，" \
           f"然后把{b}{rng.choice(verbs)}到新的位置。"


def page_text(rng: random.Random, number: int, chinese: bool) -> tuple[str, list[str]]:
    """One page: a title and ~330 words (or ~900 characters of Chinese) in 4-6 paragraphs."""
    if chinese:
        paras = ["".join(_zh_sentence(rng) for _ in range(rng.randint(6, 9))) for _ in range(rng.randint(4, 5))]
        return f"第{number}页 知识库说明", paras
    topic = rng.choice(list(TOPICS))
    nouns, verbs, units = TOPICS[topic]
    paras, words = [], 0
    while words < 330:
        para = " ".join(_sentence(rng, nouns, verbs, units) for _ in range(rng.randint(3, 6)))
        paras.append(para)
        words += len(para.split())
    return f"{topic.title()} notes, page {number}", paras


def build_corpus(folder: Path, pages: int, seed: int = 0) -> dict[str, int]:
    """Write ``pages`` pages into ``folder``; returns counts of files per kind."""
    from tests.app.pdf_samples import pages_pdf

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pdf_pages = pages // 5
    counts = {"md": 0, "txt": 0, "pdf": 0}
    pdf: list[list[str]] = []
    for n in range(pdf_pages):
        title, paras = page_text(rng, n + 1, chinese=False)
        lines = [title, ""]
        for para in paras:  # ~90 characters a line, a blank line between paragraphs
            words, line = para.split(), ""
            for w in words:
                if len(line) + len(w) > 90:
                    lines.append(line)
                    line = ""
                line += ("" if not line else " ") + w
            lines += [line, ""]
        pdf.append(lines[:60])  # the text of one page
    if pdf:
        pages_pdf(folder / "report.pdf", pdf)
        counts["pdf"] = 1
    n = pdf_pages
    file_no = 0
    while n < pages:
        kind = "md" if file_no % 2 == 0 else "txt"
        sub = folder / f"part{file_no // 20:02d}"
        sub.mkdir(exist_ok=True)
        chunks = []
        for _ in range(min(5, pages - n)):
            title, paras = page_text(rng, n + 1, chinese=rng.random() < 0.1)
            chunks.append((f"## {title}\n\n" if kind == "md" else f"{title}\n\n") + "\n\n".join(paras))
            n += 1
        head = f"# Collection {file_no}\n\n" if kind == "md" else ""
        (sub / f"doc{file_no:04d}.{kind}").write_text(head + "\n\n".join(chunks) + "\n", encoding="utf-8")
        counts[kind] += 1
        file_no += 1
    return counts


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"


def bench_index(pages: int, keep: Path | None) -> None:
    from app.knowledge.indexer import index_base
    from app.knowledge.store import KnowledgeStore

    root = keep or Path(tempfile.mkdtemp(prefix="kb-bench-"))
    if keep and root.exists():
        shutil.rmtree(root)
    docs = root / "docs"
    t0 = time.perf_counter()
    counts = build_corpus(docs, pages)
    built = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in docs.rglob("*") if p.is_file())
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; {machine()}")
    print(f"corpus: {pages} pages in {sum(counts.values())} files {counts}, {size / 2**20:.1f} MB, "
          f"written in {built:.1f} s")
    store = KnowledgeStore(root / "knowledge.sqlite3")
    base = store.create_base("bench")
    store.add_paths(base.id, [docs])
    first = index_base(store, base.id)
    store.checkpoint()
    db_size = store.size_bytes()
    again = index_base(store, base.id)
    print(f"first index (FTS only): {first.seconds:.2f} s, {first.added} files, {first.passages} passages, "
          f"{first.seconds / pages * 1000:.1f} ms/page, problems {len(first.problems)}")
    print(f"database: {db_size / 2**20:.1f} MB ({db_size / size:.2f}x the documents)")
    print(f"re-index unchanged: {again.seconds * 1000:.1f} ms = {again.seconds / first.seconds:.2%} of the first run "
          f"({again.unchanged} unchanged)")
    from app.knowledge.retrieval import search

    t0 = time.perf_counter()
    for q in ("How many watts does the accelerator draw?", "When was the bridge rebuilt?", "知识库怎么更新索引？",
              "How long does the dough rest?", "Which thread pool retries requests?"):
        search(store, [base.id], q, k=8)
    print(f"search: {(time.perf_counter() - t0) / 5 * 1000:.1f} ms per question (FTS, k=8)")
    store.close()
    if keep is None:
        shutil.rmtree(root)


def bench_vectors(sizes: list[int], dim: int = 1024, queries: int = 20) -> None:
    import numpy as np
    import torch  # noqa: F401 - the app has it loaded already; keep its import out of the first query

    from app.knowledge.retrieval import top_cosine
    from app.knowledge.store import KnowledgeStore

    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; {machine()}; dim {dim}, top 50, "
          f"mean of {queries} queries")
    try:
        import sqlite_vec
    except ImportError:
        sqlite_vec = None
    rng = np.random.default_rng(0)
    for n in sizes:
        v = rng.standard_normal((n, dim), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        qs = v[rng.integers(0, n, queries)] + 0.05 * rng.standard_normal((queries, dim), dtype=np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            store = KnowledgeStore(Path(tmp) / "kb.sqlite3")
            base = store.create_base("v")
            with store.transaction() as db:
                fid = db.execute("INSERT INTO files(base_id, path) VALUES (?, 'x')", (base.id,)).lastrowid
                db.executemany("INSERT INTO passages(id, file_id, ordinal, text) VALUES (?,?,?,'')",
                               [(i + 1, fid, i) for i in range(n)])
                db.executemany("INSERT INTO vectors(passage_id, model_id, vector) VALUES (?, 'm', ?)",
                               [(i + 1, v[i].astype(np.float16).tobytes()) for i in range(n)])
            store.checkpoint()
            blob_mb = store.size_bytes() / 2**20
            t0 = time.perf_counter()
            ids, mat = store.vectors([base.id], "m")  # read from SQLite (then kept by the store)
            top_cosine(mat, qs[0], 50)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            for q in qs:
                ids, mat = store.vectors([base.id], "m")
                top_cosine(mat, q, 50)
            warm = (time.perf_counter() - t0) / queries
            exact = [set(np.argsort(-(v @ q))[:10]) for q in qs]
            recall = np.mean([len(set(top_cosine(mat, q, 10)) & e) / 10 for q, e in zip(qs, exact, strict=True)])
            store.close()
            print(f"n={n}: float16 BLOB {blob_mb:.0f} MB; first query (read + scan) {cold * 1000:.0f} ms, "
                  f"later queries {warm * 1000:.1f} ms (kept as {mat.dtype}), recall@10 vs float32 {recall:.3f}")
            if sqlite_vec is None:
                print("  sqlite-vec: not importable here")
                continue
            con = sqlite3.connect(Path(tmp) / "vec.sqlite3")
            if not hasattr(con, "enable_load_extension"):
                print("  sqlite-vec: this Python's sqlite3 cannot load extensions")
                continue
            con.enable_load_extension(True)
            sqlite_vec.load(con)
            con.execute(f"CREATE VIRTUAL TABLE vv USING vec0(embedding float[{dim}] distance_metric=cosine)")
            t0 = time.perf_counter()
            with con:
                con.executemany("INSERT INTO vv(rowid, embedding) VALUES (?, ?)",
                                [(i + 1, v[i].tobytes()) for i in range(n)])
            insert = time.perf_counter() - t0
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            vec_mb = (Path(tmp) / "vec.sqlite3").stat().st_size / 2**20
            t0 = time.perf_counter()
            for q in qs:
                con.execute("SELECT rowid, distance FROM vv WHERE embedding MATCH ? AND k = 50",
                            (q.astype(np.float32).tobytes(),)).fetchall()
            knn = (time.perf_counter() - t0) / queries
            con.close()
            print(f"  sqlite-vec {sqlite_vec.__version__ if hasattr(sqlite_vec, '__version__') else ''} vec0 float32: "
                  f"{vec_mb:.0f} MB, insert {insert:.1f} s, KNN query {knn * 1000:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--keep", type=Path, help="build in this folder and keep it (default: a temporary one)")
    ap.add_argument("--vectors", help="comma-separated vector counts: measure dense search instead")
    args = ap.parse_args()
    if args.vectors:
        bench_vectors([int(x) for x in args.vectors.split(",")])
    else:
        bench_index(args.pages, args.keep)


if __name__ == "__main__":
    main()
