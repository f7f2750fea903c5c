"""Merge the fastest config per (shape, rows) of a ``bench_batched_matvec.py`` run into a tuned-config table.

Usage (repo root): ``python3 scripts/gpu/tuned_from_bench.py BENCH.json runtime/kernels/triton/tuned/<gpu>.json``

Why: a shipped table (``runtime/kernels/triton/tuned``) spares a GPU model's users the first-use tuning, and the
batched benchmark already timed every candidate of the batched decode shapes with the tuner's own ``_bench``; this
writes those winners under the keys the tuner looks up (``gemv|rows|n|k|g|t2|norm|dual|residual|dtype|a8``), keeping
every other entry of the table. Only configs whose output the benchmark checked (or the one-row variants) are taken.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

FUSIONS = {"qkv+norm": (True, False, False), "o+residual": (False, False, True),
           "gate_up+norm+silu": (True, True, False), "down+residual": (False, False, True),
           "head+norm": (True, False, False)}


def winners(bench: dict, group_size: int = 128, dtype: str = "torch.bfloat16") -> dict[str, list]:
    """Table entries: the fastest timed config of each benchmarked (shape, rows)."""
    out: dict[str, list] = {}
    for row in bench["rows"]:
        norm, dual, resid = FUSIONS[row["shape"]]
        ms, cfg = min((v, c) for c, v in row["all_ms"].items())
        key = f"gemv|{row['rows']}|{row['n']}|{row['k']}|{group_size}|t2|{norm}|{dual}|{resid}|{dtype}|a8"
        out[key] = list(ast.literal_eval(cfg))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", type=Path)
    ap.add_argument("table", type=Path)
    a = ap.parse_args()
    table = json.loads(a.table.read_text()) if a.table.exists() else {}
    new = winners(json.loads(a.bench.read_text()))
    for key, cfg in sorted(new.items()):
        print(f"{key}: {table.get(key)} -> {cfg}", file=sys.stderr)
    table.update(new)
    tmp = a.table.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n")
    os.replace(tmp, a.table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
