"""Mask timing for a real-size vocabulary: ``python -m runtime.constrained.bench tokenizer.json``.

Samples random allowed tokens (drifting to closing ones so values end) under a few schemas, from a
cold mask cache, and prints the median and p99 time of ``allowed_tokens()`` per token.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np

from runtime.constrained import json_constraint
from runtime.constrained.vocab import vocab_index
from runtime.formats.model_data import TokenizerData
from runtime.tokenizer import Tokenizer

SCHEMAS: list[dict | None] = [
    None,
    {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "kind": {"enum": ["alpha", "beta", 3, None]},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                  "required": ["lat", "lon"]}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                 "text": {"type": "string"}}}},
    {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
]


def measure(tok: Tokenizer, walks: int, max_steps: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    table = vocab_index(tok).token_bytes
    eos = sorted(tok.eos_token_ids)
    times: list[float] = []
    for w in range(walks):
        c = json_constraint(tok, tok.vocab_size, SCHEMAS[w % len(SCHEMAS)])
        for n in range(max_steps):
            t0 = time.perf_counter()
            mask = c.allowed_tokens()
            times.append(time.perf_counter() - t0)
            allowed = np.flatnonzero(mask.numpy())
            if n > 10 and any(mask[e] for e in eos):
                break
            if n > 40:
                closing = [int(t) for t in allowed if t not in eos and any(x in table[t] for x in b'"}]')]
                if closing and rng.random() < 0.5:
                    allowed = closing
            c.advance(int(rng.choice(list(allowed))))
            if c.is_finished():
                break
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tokenizer_json", type=Path)
    ap.add_argument("--walks", type=int, default=30)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    tok = Tokenizer(TokenizerData(tokenizer_json=args.tokenizer_json.read_text(encoding="utf-8")))
    vocab_index(tok)
    print(f"vocabulary {tok.vocab_size} tokens, index built in {time.perf_counter() - t0:.2f} s")
    times = np.array(measure(tok, args.walks, args.max_steps, args.seed)) * 1000
    print(f"{len(times)} masks: median {np.median(times):.2f} ms, p99 {np.percentile(times, 99):.2f} ms, "
          f"max {times.max():.2f} ms")


if __name__ == "__main__":
    main()
