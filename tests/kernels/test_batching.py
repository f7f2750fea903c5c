"""Continuous batching (:mod:`runtime.batching`) under the Triton interpreter, every step eager: requests decoded
together give the tokens each gives alone through the engine's single-sequence path; requests join and leave
mid-stream (rows move); sampling with a seed, logprobs and a constraint per request; cancelling frees the
slot; a prompt longer than a slot is refused; the server runs several requests at once on a batching engine.
The GPU suite checks the same inside CUDA graphs (tests/gpu/test_gpu_batching.py)."""

from __future__ import annotations

import threading

import pytest
import torch

import runtime.kernels.triton.backend  # noqa: F401  (registers the "triton" linear backend)
from runtime.batching import BatchDecoder, buckets, full_batch_rate
from runtime.engine import Engine
from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationSettings, TextEvent, TokenEvent
from runtime.model import qwen3
from tests import model_factory as mf

GREEDY = dict(temperature=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
              ignore_eos=True, enable_thinking=False)
PROMPTS = [[5, 17, 99, 3], [250, 7, 7, 80, 81, 82, 9, 40, 41], [11, 12]]


@pytest.fixture(scope="module", autouse=True)
def wide_tiles():
    """One mat-vec program per 256 output rows: the interpreter's cost is per program, and these tests are about
    the batching, not the tiling (tests/kernels/test_kernels_linear.py covers that)."""
    from runtime.kernels.triton import matvec

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matvec, "_gemv_config", lambda *a: (256, 256, 1, 4))
        yield


@pytest.fixture(scope="module")
def model_data():
    cfg = mf.tiny_qwen3_config(num_hidden_layers=2, hidden_size=128, intermediate_size=256, head_dim=32,
                               max_position_embeddings=256)
    return mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=7), mf.tiny_tokenizer())


def _engine(md) -> Engine:
    mp = pytest.MonkeyPatch()
    try:
        with mf.row_layout(mp, qwen3):
            return Engine.load(md, device="cpu", context_length=64, backend="triton")
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def single(model_data):
    return _engine(model_data)


@pytest.fixture(scope="module")
def batched(model_data):
    eng = _engine(model_data)
    eng._batch = BatchDecoder(eng, max_batch=3, context=48, use_graph=False)
    yield eng
    eng.enable_batching(1)


def _run(engine: Engine, prompt: list[int], s: GenerationSettings, out: dict, **kw) -> None:
    try:
        events = list(engine.generate_tokens(prompt, s, kw.pop("cancel", None), **kw))
        out["events"] = events
        out["done"] = events[-1]
    except BaseException as exc:  # noqa: BLE001 - the test reads it
        out["error"] = exc


def _alone(engine: Engine, prompt: list[int], s: GenerationSettings, **kw) -> DoneEvent:
    engine.reset()
    out: dict = {}
    _run(engine, prompt, s, out, **kw)
    assert "error" not in out, out.get("error")
    return out["done"]


def _together(engine: Engine, jobs: list[tuple[list[int], GenerationSettings, dict]]) -> list[dict]:
    outs: list[dict] = [{} for _ in jobs]
    threads = [threading.Thread(target=_run, args=(engine, p, s, o), kwargs=kw)
               for (p, s, kw), o in zip(jobs, outs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for o in outs:
        assert "error" not in o, o.get("error")
    return outs


def test_buckets_cover_every_batch_size() -> None:
    assert buckets(1) == [1]
    assert buckets(8) == [1, 2, 4, 8]
    assert buckets(12) == [1, 2, 4, 8, 12]


def test_requests_together_give_the_tokens_each_gives_alone(single, batched) -> None:
    lengths = [7, 3, 5]  # different lengths: rows leave mid-stream and the last row moves into the hole
    want = [_alone(single, p, GenerationSettings(**GREEDY, max_new_tokens=n)).stats.token_ids
            for p, n in zip(PROMPTS, lengths, strict=True)]
    outs = _together(batched, [(p, GenerationSettings(**GREEDY, max_new_tokens=n), {})
                               for p, n in zip(PROMPTS, lengths, strict=True)])
    got = [o["done"].stats.token_ids for o in outs]
    assert got == want
    assert [o["done"].stats.finish_reason for o in outs] == ["length"] * 3
    b = batched.batch
    assert b is not None and b.steps > 0 and b.step_rows > b.steps  # some steps really held several rows
    assert not b.rows and sorted(b.free_slots) == [0, 1, 2]


def test_a_request_joining_mid_stream_and_more_requests_than_slots(single, batched) -> None:
    """Four requests on three slots: the fourth waits for a free slot, then joins running streams."""
    prompts = [*PROMPTS, [42, 43, 44, 45, 46]]
    want = [_alone(single, p, GenerationSettings(**GREEDY, max_new_tokens=6)).stats.token_ids for p in prompts]
    outs = _together(batched, [(p, GenerationSettings(**GREEDY, max_new_tokens=6), {}) for p in prompts])
    assert [o["done"].stats.token_ids for o in outs] == want


def test_sampling_logprobs_and_penalties_per_request(single, batched) -> None:
    sampled = GenerationSettings(temperature=0.9, top_p=0.9, top_k=20, repetition_penalty=1.3, seed=1234,
                                 ignore_eos=True, enable_thinking=False, max_new_tokens=6)
    greedy = GenerationSettings(**GREEDY, max_new_tokens=6)
    want_sampled = _alone(single, PROMPTS[0], sampled).stats.token_ids
    single.reset()
    alone_lp = [e for e in single.generate_tokens(PROMPTS[1], greedy, logprobs=3) if isinstance(e, TokenEvent)]
    outs = _together(batched, [(PROMPTS[0], sampled, {}), (PROMPTS[1], greedy, {"logprobs": 3}),
                               (PROMPTS[2], greedy, {})])
    assert outs[0]["done"].stats.token_ids == want_sampled  # its own generator, seeded: batch-independent
    got_lp = [e for e in outs[1]["events"] if isinstance(e, TokenEvent)]
    assert [e.token_id for e in got_lp] == [e.token_id for e in alone_lp] and len(got_lp) == 6
    for a, b in zip(got_lp, alone_lp, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [i for i, _, _ in a.top] == [i for i, _, _ in b.top]


def test_a_constraint_in_the_batch(single, batched) -> None:
    class OnlyEven:
        """Allows even token ids only; finished after four tokens."""

        def __init__(self, vocab: int) -> None:
            self.mask = torch.zeros(vocab, dtype=torch.bool)
            self.mask[::2] = True
            self.n = 0

        def allowed_tokens(self) -> torch.Tensor:
            return self.mask

        def advance(self, tok: int) -> None:
            assert tok % 2 == 0
            self.n += 1

        def is_finished(self) -> bool:
            return self.n >= 4

    vocab = single.model.vocab_size
    s = GenerationSettings(**GREEDY, max_new_tokens=10)
    want = _alone(single, PROMPTS[0], s, constraint=OnlyEven(vocab)).stats.token_ids
    outs = _together(batched, [(PROMPTS[0], s, {"constraint": OnlyEven(vocab)}), (PROMPTS[1], s, {})])
    assert outs[0]["done"].stats.token_ids == want and len(want) == 4
    assert outs[0]["done"].stats.finish_reason == "stop"


def test_cancel_frees_the_slot_and_others_go_on(single, batched) -> None:
    s = GenerationSettings(**GREEDY, max_new_tokens=20)
    cancel = CancelToken()
    out_a: dict = {}
    out_b: dict = {}
    started = threading.Event()

    def run_a() -> None:
        events = []
        for ev in batched.generate_tokens(PROMPTS[0], s, cancel):
            events.append(ev)
            if isinstance(ev, TextEvent) or len(events) == 2:
                started.set()
                cancel.cancel()
        out_a["done"] = events[-1]

    ta = threading.Thread(target=run_a)
    ta.start()
    started.wait(120)
    tb = threading.Thread(target=_run, args=(batched, PROMPTS[1], GenerationSettings(**GREEDY, max_new_tokens=4),
                                             out_b))
    tb.start()
    ta.join(300)
    tb.join(300)
    assert out_a["done"].stats.finish_reason == "cancelled" and out_a["done"].stats.generated_tokens < 20
    want = _alone(single, PROMPTS[1], GenerationSettings(**GREEDY, max_new_tokens=4)).stats.token_ids
    assert out_b["done"].stats.token_ids == want
    b = batched.batch
    assert b is not None and not b.rows and sorted(b.free_slots) == [0, 1, 2]


def test_a_prompt_longer_than_a_slot_is_refused(batched) -> None:
    with pytest.raises(ContextOverflowError, match="context holds 48"):
        list(batched.generate_tokens(list(range(5, 55)), GenerationSettings(**GREEDY, max_new_tokens=2)))
    assert batched.request_context == 48


def test_the_answer_ends_when_the_slot_is_full(single, batched) -> None:
    prompt = list(range(5, 46))  # 41 tokens in a 48-position slot: 7 more fit
    done = _alone(batched, prompt, GenerationSettings(**GREEDY, max_new_tokens=20))
    assert done.stats.generated_tokens == 8 and done.stats.finish_reason == "length"


def test_server_runs_requests_together_on_a_batching_engine(single, batched) -> None:
    import openai

    from runtime.server import EngineAccess, ServerConfig, start_server

    handle = start_server(EngineAccess(batched, "tiny"), ServerConfig(port=0, max_batch=3))
    try:
        import json
        import urllib.request

        with urllib.request.urlopen(handle.url + "/health", timeout=30) as resp:
            health = json.load(resp)
        assert health["parallel_requests"] == 3 and "continuous batching" in health["scheduling"]
        questions = ["Say hello.", "Count: one, two,", "What is a fox?"]

        def ask(i: int, results: list) -> None:
            with openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0, timeout=300) as c:
                r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": questions[i]}],
                                              max_tokens=5, temperature=0)
                results[i] = (r.choices[0].message.content, r.usage.completion_tokens)

        alone: list = [None] * 3
        for i in range(3):  # one after another: each request alone in the batch
            ask(i, alone)
        together: list = [None] * 3
        threads = [threading.Thread(target=ask, args=(i, together)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert together == alone and all(n == 5 for _, n in alone)
        assert handle.stats().requests_served == 6
    finally:
        handle.stop()


def test_full_batch_rate_counts_only_steps_that_ran_every_row() -> None:
    """The full-batch rate (llama-batched-bench's S_TG definition) uses the steps that ran all rows: 4 rows, steps
    at 1.00, 1.01, 1.02, 1.03 s -> 3 intervals of 4 tokens in 0.03 s; ramp steps with fewer rows are left out; too
    few full steps give 0."""
    log = [(0.5, 1), (0.9, 3), (1.00, 4), (1.01, 4), (1.02, 4), (1.03, 4), (1.05, 2)]
    rate, times = full_batch_rate(log, 4)
    assert times == [1.00, 1.01, 1.02, 1.03]
    assert abs(rate - 4 * 3 / 0.03) < 1e-6
    assert full_batch_rate(log, 3) == (0.0, [0.9])
