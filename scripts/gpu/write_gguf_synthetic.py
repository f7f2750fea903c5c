"""Write a synthetic Bonsai-shaped model (the same weights ``ternary bench --synthetic`` uses) as
GGUF, for llama-bench. Usage: write_gguf_synthetic.py NAME OUT.gguf [--type Q2_0] [--cache-dir D]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("out")
    ap.add_argument("--type", default="Q2_0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    from runtime.bench import synthetic_model_cached
    from runtime.formats.gguf_writer import write_gguf

    t = time.time()
    md = synthetic_model_cached(a.name, a.seed, a.cache_dir, workers=a.workers)
    write_gguf(md, a.out, a.type)
    print(f"{a.name}: wrote {a.out} ({Path(a.out).stat().st_size / 2**30:.2f} GiB) in {time.time() - t:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
