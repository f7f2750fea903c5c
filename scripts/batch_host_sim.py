"""The host side of continuous batching without a GPU: what one stream's token costs in ``Answer.run``, and
whether a driver thread keeps pace with N consumer threads when a decode step takes S ms.

Usage: ``python3 scripts/batch_host_sim.py`` (any machine; the synthetic byte-level tokenizer).

Why: a batched step hands one token to each of N request threads, which detokenise, match stop strings and yield
events under the GIL. If that host work did not fit inside a GPU step, the driver would launch late and the GPU
would idle. Here the "GPU step" is a wait that releases the GIL, as a CUDA event wait does.
"""

from __future__ import annotations

import queue
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.answer import Answer  # noqa: E402
from runtime.generation import CancelToken, GenerationSettings, GenerationStats  # noqa: E402
from runtime.synthetic import synthetic_tokenizer  # noqa: E402
from runtime.tokenizer import Tokenizer  # noqa: E402

TOKENIZER = Tokenizer(synthetic_tokenizer())
SETTINGS = GenerationSettings(temperature=0.0, max_new_tokens=10**6, ignore_eos=True, enable_thinking=False)


class _Hooks:
    logprobs = None
    constraint = None
    last = None


def consume(q: queue.SimpleQueue) -> None:
    """One request's reader: tokens from ``q`` (``None`` ends it) through ``Answer.run``."""
    def stream():
        while (t := q.get()) is not None:
            yield t
    answer = Answer(TOKENIZER, [1, 2, 3], SETTINGS, GenerationStats(prompt_tokens=3), time.perf_counter())
    for _ in answer.run(stream(), CancelToken(), _Hooks(), lambda t, i: None):
        pass


def main() -> None:
    n = 20000
    q: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(n):
        q.put(random.randint(32, 126))
    q.put(None)
    t = time.perf_counter()
    consume(q)
    print(f"per token, one thread: {1e6 * (time.perf_counter() - t) / n:.1f} us")
    for streams, step_ms in ((16, 3.0), (16, 2.0), (16, 1.0), (8, 1.0)):
        qs = [queue.SimpleQueue() for _ in range(streams)]
        threads = [threading.Thread(target=consume, args=(qq,)) for qq in qs]
        for th in threads:
            th.start()
        steps, late = 300, []
        t0 = time.perf_counter()
        for k in range(steps):
            due = t0 + (k + 1) * step_ms / 1e3
            while time.perf_counter() < due:  # the GPU step: the GIL is free meanwhile
                time.sleep(0.0001)
            late.append(time.perf_counter() - due)
            for qq in qs:
                qq.put(random.randint(32, 126))
        for qq in qs:
            qq.put(None)
        for th in threads:
            th.join()
        total = time.perf_counter() - t0
        print(f"{streams} streams, {step_ms} ms steps: {steps} steps in {1e3 * total:.0f} ms (ideal "
              f"{steps * step_ms:.0f}); driver late: median {1e6 * statistics.median(late):.0f} us, "
              f"p99 {1e6 * sorted(late)[int(0.99 * len(late))]:.0f} us")


if __name__ == "__main__":
    main()
