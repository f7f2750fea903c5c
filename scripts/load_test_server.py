#!/usr/bin/env python3
"""Bounded load test of ``ternary serve`` on this machine (loopback only; it stops by itself).

``--clients`` threads (default 16) each send ``--requests`` streaming chat requests (default 200)
one after another: prompts of mixed lengths (3 to 150 words) and answers of
mixed lengths (``max_tokens`` 4..64), greedy, ``ignore_eos`` so every answer has exactly its
``max_tokens``, with ``logprobs`` so every token's bytes come back beside the text. It reports:

* failed requests (HTTP errors, error events, broken streams);
* lost tokens: a stream whose token count differs from ``usage`` / ``max_tokens``, or whose text
  (answer and thinking, in arrival order) is not its tokens' bytes;
* interleaved tokens: greedy answers to the same prompt must be prefixes of one another (compared
  as token bytes) whatever the length; a token of another stream in the middle breaks that;
* time to first token (p50 / p99, from sending the request, queueing included) and aggregate
  tokens/s (all generated tokens / wall time).

Without ``--url`` it starts a server in this process: ``--model PATH`` (any model ``ternary serve``
loads) or, by default, the tiny random test model of ``tests/model_factory.py``. ``--url`` must be a
loopback address. ``--deadline`` (seconds, default 1800) ends the run (and fails it) if it is not done.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.server.config import is_loopback  # noqa: E402

WORDS = ("the quick brown fox jumps over the lazy dog ternary weights are minus one zero or plus one "
         "hello world how are you today numbers 0123456789").split()
LENGTHS = (4, 8, 16, 32, 64)


@dataclass
class Outcome:
    ok: bool
    prompt: int
    max_tokens: int
    text: str = ""  # answer and thinking text, in arrival order
    raw: bytes = b""  # the tokens' bytes (logprobs), in order
    tokens: int = 0
    ttft_s: float = 0.0
    error: str = ""


@dataclass
class Report:
    requests: int = 0
    failed: int = 0
    lost: int = 0
    interleaved: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    ttft_p50_s: float = 0.0
    ttft_p99_s: float = 0.0
    tokens_per_s: float = 0.0
    timed_out: bool = False
    errors: list[str] = field(default_factory=list)

    def passed(self) -> bool:
        return not (self.failed or self.lost or self.interleaved or self.timed_out)


def prompts(n: int = 12, seed: int = 0) -> list[str]:
    """Distinct prompts of mixed lengths (3 to 150 words; up to ~500 tokens with the tiny test tokenizer)."""
    rng = random.Random(seed)
    sizes = [3, 5, 8, 12, 20, 30, 45, 60, 80, 100, 120, 150]
    return [f"#{i}: " + " ".join(rng.choice(WORDS) for _ in range(sizes[i % len(sizes)])) for i in range(n)]


def _visible(text: str) -> str:
    """Text without what the engine legitimately changes: the think markers (it routes the thinking
    channel by them), whitespace (it strips a segment's leading whitespace) and U+FFFD (incomplete
    UTF-8 is replaced per byte by the tokenizer, per sequence by Python)."""
    for marker in ("<think>", "</think>"):
        text = text.replace(marker, "")
    return "".join(ch for ch in text if not ch.isspace() and ch != "\ufffd")


def one_request(url: str, model: str, prompt_index: int, prompt: str, max_tokens: int, key: str | None,
                timeout: float) -> Outcome:
    u = urlsplit(url)
    out = Outcome(False, prompt_index, max_tokens)
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "logprobs": True,
            "stream_options": {"include_usage": True}}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return out
        text, raw, usage, finished = [], b"", None, False
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                finished = True
                break
            doc = json.loads(payload)
            if "error" in doc:
                out.error = doc["error"]["message"]
                return out
            if doc.get("usage"):
                usage = doc["usage"]
            for choice in doc.get("choices", []):
                lp = (choice.get("logprobs") or {}).get("content") or []
                if lp and not out.ttft_s:
                    out.ttft_s = time.perf_counter() - t0
                for t in lp:
                    raw += bytes(t["bytes"])
                    out.tokens += 1
                delta = choice.get("delta", {})
                text.append((delta.get("reasoning_content") or "") + (delta.get("content") or ""))
        out.text, out.raw = "".join(text), raw
        if not finished or usage is None:
            out.error = "the stream ended early"
            return out
        lost = (out.tokens != max_tokens or usage["completion_tokens"] != max_tokens
                or _visible(raw.decode("utf-8", "replace")) != _visible(out.text))
        out.ok = True
        out.error = "lost" if lost else ""
        return out
    except (OSError, ValueError, KeyError, http.client.HTTPException) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    finally:
        conn.close()


def run_load(url: str, model: str, clients: int = 16, requests: int = 200, key: str | None = None,
             deadline_s: float = 1800.0, seed: int = 0, lengths: tuple[int, ...] = LENGTHS) -> Report:
    """Drive ``url`` with ``clients`` × ``requests`` streaming requests; see the module docstring."""
    if not is_loopback(urlsplit(url).hostname or ""):
        raise SystemExit(f"refusing to load-test {url}: loopback addresses only")
    texts = prompts(seed=seed)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + deadline_s
    report = Report()

    def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        for _ in range(requests):
            if time.monotonic() > stop_at:
                with lock:
                    report.timed_out = True
                return
            p = rng.randrange(len(texts))
            o = one_request(url, model, p, texts[p], rng.choice(lengths), key, timeout=max(30.0, deadline_s))
            with lock:
                outcomes.append(o)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, stop_at - time.monotonic()) + 60)
        if t.is_alive():
            report.timed_out = True
    report.wall_s = time.perf_counter() - t0
    with lock:
        done = list(outcomes)
    report.requests = len(done)
    report.failed = sum(not o.ok for o in done)
    report.lost = sum(o.ok and o.error == "lost" for o in done)
    report.errors = sorted({o.error for o in done if o.error})[:10]
    good = [o for o in done if o.ok and not o.error]
    by_prompt: dict[int, list[Outcome]] = {}
    for o in good:
        by_prompt.setdefault(o.prompt, []).append(o)
    for group in by_prompt.values():
        longest = max(group, key=lambda o: len(o.raw))
        report.interleaved += sum(not longest.raw.startswith(o.raw) for o in group)
    report.tokens = sum(o.tokens for o in done if o.ok)
    ttfts = sorted(o.ttft_s for o in good)
    if ttfts:
        report.ttft_p50_s = statistics.median(ttfts)
        report.ttft_p99_s = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
    report.tokens_per_s = report.tokens / report.wall_s if report.wall_s > 0 else 0.0
    return report


def _tiny_server() -> tuple[Any, str]:
    from runtime.engine import Engine
    from runtime.server import EngineAccess, ServerConfig, start_server
    from tests import model_factory as mf

    cfg = mf.tiny_qwen3_config(max_position_embeddings=2048)
    data = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=4), mf.tiny_tokenizer())
    engine = Engine.load(data, device="cpu", context_length=1024)
    return start_server(EngineAccess(engine, "tiny-qwen3"), ServerConfig(port=0, max_queue=64)), "tiny-qwen3"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server on a loopback address (default: start one here)")
    p.add_argument("--model", help="model file for the server started here (default: the tiny test model)")
    p.add_argument("--model-id", default=None, help="model name to request (default: the server's)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=200, help="requests per client")
    p.add_argument("--deadline", type=float, default=1800.0, help="seconds before the run gives up")
    p.add_argument("--api-key-env", help="environment variable with the server's API key")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = p.parse_args(argv)
    import os

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    handle = None
    if args.url:
        url, model = args.url.rstrip("/"), args.model_id
        if model is None:
            u = urlsplit(url)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
            model = json.loads(conn.getresponse().read())["data"][0]["id"]
    elif args.model:
        from runtime.engine import Engine
        from runtime.server import EngineAccess, ServerConfig, start_server

        engine = Engine.load(args.model, device="auto")
        model = args.model_id or Path(args.model).stem
        handle = start_server(EngineAccess(engine, model), ServerConfig(port=0, max_queue=args.clients * 2))
        url = handle.url
    else:
        handle, model = _tiny_server()
        url = handle.url
    try:
        report = run_load(url, model, args.clients, args.requests, key, args.deadline)
    finally:
        if handle is not None:
            handle.stop()
    if args.json:
        print(json.dumps(report.__dict__))
    else:
        print(f"{report.requests} requests ({args.clients} clients x {args.requests}) in {report.wall_s:.1f} s: "
              f"{report.failed} failed, {report.lost} with lost tokens, {report.interleaved} interleaved; "
              f"TTFT p50 {report.ttft_p50_s * 1000:.0f} ms, p99 {report.ttft_p99_s * 1000:.0f} ms; "
              f"{report.tokens} tokens, {report.tokens_per_s:.1f} tok/s aggregate"
              + ("; TIMED OUT" if report.timed_out else ""))
        for e in report.errors:
            print("  error:", e)
    return 0 if report.passed() else 1


if __name__ == "__main__":
    raise SystemExit(main())
