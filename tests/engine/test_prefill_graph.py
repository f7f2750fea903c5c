"""Padded static-shape prefill (runtime.prefill) in eager mode on the CPU: the logic the CUDA graphs
replay. Padding a chunk to its bucket must not change the last token's logits, the K/V of the real
positions, or anything decoded afterwards (the pad rows' K/V beyond the prompt must never be read).

Not bit-exact even on the CPU: torch's CPU flash attention blocks its sums by query count and KV
length, and the CPU ternary kernel takes a mat-vec path for <= 3 rows, so rows differ at the
1e-7 level; the bounds below are ~50x that, and greedy tokens must be identical.
"""

from __future__ import annotations

import gc

import pytest
import torch

from runtime import engine as engine_mod
from runtime.engine import Engine
from runtime.generation import GenerationSettings
from runtime.model.qwen3 import Qwen3Model
from runtime.prefill import (
    MIN_BUCKET,
    GraphPrefill,
    _static_addresses,
    bucket_size,
    graph_prefill_runner,
    pad_chunk,
)
from tests.engine.conftest import hf_greedy

TOL = 2e-5  # max |logit difference| (fp32 logits of magnitude ~1-10)


@pytest.fixture(autouse=True)
def _graph_prefill_on(monkeypatch):
    """These tests exercise the graph prefill (on by default; pinned on here against the environment)."""
    monkeypatch.setenv("TERNARY_GRAPH_PREFILL", "1")


def _model(md, ctx: int = 256) -> Qwen3Model:
    return Qwen3Model.from_model_data(md, "cpu", dtype=torch.float32, max_positions=ctx)


def _ids(n: int, vocab: int = 300, seed: int = 0) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _eager(model: Qwen3Model, tokens: list[int], start: int) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor(tokens), torch.arange(start, start + len(tokens)), kv_len=start + len(tokens),
                     last_only=True)


def _chunks(model_or_runner, ids: list[int], bounds: list[int]) -> list[torch.Tensor]:
    out = []
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        out.append(_eager(model_or_runner, ids[s:e], s) if isinstance(model_or_runner, Qwen3Model)
                   else model_or_runner(ids[s:e], s))
    return out


def _greedy_decode(model: Qwen3Model, logits: torch.Tensor, pos: int, steps: int, masked: bool) -> tuple:
    """Greedy tokens and per-step logits; ``masked`` uses the static whole-cache attention
    (``kv_len=None``, what a graph-captured decode step runs), else the eager ``kv_len=pos+1``."""
    toks, all_logits = [], []
    with torch.inference_mode():
        for _ in range(steps):
            tok = int(torch.argmax(logits[-1]))
            toks.append(tok)
            logits = model(torch.tensor([tok]), torch.tensor([pos]), kv_len=None if masked else pos + 1)
            all_logits.append(logits[-1])
            pos += 1
    return toks, torch.stack(all_logits)


# ---------------------------------------------------------------------------------------------- pad_chunk


def test_bucket_sizes():
    assert [bucket_size(n) for n in (1, 2, 15, 16, 17, 32, 33, 511, 512)] == [16, 16, 16, 16, 32, 32, 64, 512, 512]
    assert bucket_size(3, minimum=1) == 4
    with pytest.raises(ValueError):
        bucket_size(0)


def test_pad_chunk_layout():
    c = pad_chunk([5, 6, 7], start=10, max_positions=100, max_bucket=16)
    assert c is not None and c.bucket == MIN_BUCKET
    assert c.tokens == [5, 6, 7] + [0] * 13
    assert c.positions == list(range(10, 26))
    assert c.last == 2
    assert c.kv_len == 16  # power of two >= 13 filled positions and >= the largest bucket
    c = pad_chunk(list(range(40)), start=100, max_positions=4096, pad_token=9)
    assert c.bucket == 64 and c.tokens[40:] == [9] * 24 and c.kv_len == 512  # at least MAX_BUCKET
    assert pad_chunk(list(range(40)), start=600, max_positions=4096).kv_len == 1024
    # the KV bucket never exceeds the cache
    assert pad_chunk(list(range(20)), start=90, max_positions=120).kv_len == 120


def test_pad_chunk_near_the_end_clamps_pads_to_the_last_slot():
    c = pad_chunk(list(range(5)), start=50, max_positions=60)
    assert c.positions[:5] == [50, 51, 52, 53, 54]
    assert c.positions[5:] == [55, 56, 57, 58, 59] + [59] * 6  # never outside the cache
    assert max(c.positions) == 59 and c.kv_len == 60
    # real tokens reaching the last slot would share it with pads: no bucket
    assert pad_chunk(list(range(5)), start=55, max_positions=60) is None
    # an exact fit needs no pads, so it may reach the last slot
    assert pad_chunk(list(range(16)), start=44, max_positions=60).positions == list(range(44, 60))
    assert pad_chunk(list(range(600)), start=0, max_positions=4096) is None  # longer than the largest bucket
    with pytest.raises(ValueError):
        pad_chunk([1, 2], start=59, max_positions=60)


# ---------------------------------------------------------------------------------------------- forward


def test_logits_index_selects_rows(tiny_pair):
    model = _model(tiny_pair[1])
    ids = torch.tensor(_ids(20))
    with torch.inference_mode():
        full = model(ids, torch.arange(20), kv_len=20)
        sel = model(ids, torch.arange(20), kv_len=20, logits_index=torch.tensor([7]))
    assert sel.shape == (1, full.shape[1])
    assert torch.allclose(sel[0], full[7], atol=1e-5, rtol=0)


@pytest.mark.parametrize("n", [2, 5, 16, 17, 37, 64])
def test_padded_chunk_equals_unpadded(tiny_pair, n):
    md = tiny_pair[1]
    ref, padded = _model(md), _model(md)
    runner = GraphPrefill(padded, max_bucket=64, use_graph=False)
    assert runner.padded and not runner.use_graph
    ids = _ids(n, seed=n)
    want = _eager(ref, ids, 0)
    got = runner(ids, 0)
    assert got.shape == want.shape == (1, 300)
    assert (got - want).abs().max().item() <= TOL
    assert int(got.argmax()) == int(want.argmax())
    # the real positions hold the same K/V; the pads really wrote something beyond them
    for name in ("k", "v"):
        a, b = getattr(ref.cache, name), getattr(padded.cache, name)
        assert (a[:, :, :n] - b[:, :, :n]).abs().max().item() <= 1e-5
    if bucket_size(n) > n:
        assert padded.cache.k[:, :, n:bucket_size(n)].abs().sum() > 0
        assert ref.cache.k[:, :, n:].abs().sum() == 0


def test_multi_chunk_prompt_and_greedy_decode_unchanged(tiny_pair):
    """A 150-token prompt in chunks (last ones padded), then 20 greedy steps through both the eager
    (kv_len) and the static masked (kv_len=None) decode: same tokens as without padding, and as
    transformers on the whole sequence."""
    hf, md = tiny_pair
    ids = _ids(150, seed=11)
    bounds = [0, 64, 128, 133, 150]  # 64, 64, 5 (bucket 16), 17 (bucket 32)
    ref, padded = _model(md), _model(md)
    runner = GraphPrefill(padded, max_bucket=64, use_graph=False)
    want, got = _chunks(ref, ids, bounds), _chunks(runner, ids, bounds)
    for w, g in zip(want, got, strict=True):
        assert (w - g).abs().max().item() <= TOL
    assert padded.cache.k[:, :, 150:165].abs().sum() > 0  # stale pad K/V sits right after the prompt
    for masked in (False, True):
        r_model, p_model = _model(md), _model(md)
        r_runner = GraphPrefill(p_model, max_bucket=64, use_graph=False)
        r_logits = _chunks(r_model, ids, bounds)[-1]
        p_logits = _chunks(r_runner, ids, bounds)[-1]
        t_ref, l_ref = _greedy_decode(r_model, r_logits, 150, 20, masked)
        t_pad, l_pad = _greedy_decode(p_model, p_logits, 150, 20, masked)
        assert t_pad == t_ref, f"masked={masked}"
        assert (l_pad - l_ref).abs().max().item() <= 5 * TOL
    assert t_ref == hf_greedy(hf, ids, 20)


def test_positions_near_the_end_of_the_cache(tiny_pair):
    """Chunks whose bucket runs past the cache: pads clamp to the last slot, nothing is written
    outside, the logits and the last free slot's later use are unaffected."""
    md = tiny_pair[1]
    ctx = 64
    ids = _ids(ctx - 1, seed=5)
    bounds = [0, 32, 40, 58, 63]  # 32; 8 -> bucket 16 (pads 48..55); 18 -> 32 (pads 58..63, clamped);
    # 5 -> 16 (pads at 63, then clamped to 63)
    ref, padded = _model(md, ctx), _model(md, ctx)
    runner = GraphPrefill(padded, max_bucket=32, use_graph=False)
    want, got = _chunks(ref, ids, bounds), _chunks(runner, ids, bounds)
    for w, g in zip(want, got, strict=True):
        assert (w - g).abs().max().item() <= TOL
    assert padded.cache.k.shape[2] == ctx
    assert padded.cache.k[:, :, ctx - 1].abs().sum() > 0  # the clamped pad writes landed in the last slot
    assert ref.cache.k[:, :, ctx - 1].abs().sum() == 0
    # the last slot is then written by the token that belongs there before anything reads it:
    # eager decode over kv_len=ctx vs the static masked decode over the whole (stale) cache
    tok = int(torch.argmax(want[-1]))
    with torch.inference_mode():
        a = ref(torch.tensor([tok]), torch.tensor([ctx - 1]), kv_len=ctx)
        b = padded(torch.tensor([tok]), torch.tensor([ctx - 1]), kv_len=None)
    assert (a - b).abs().max().item() <= 5 * TOL


def test_chunk_reaching_the_last_slot_runs_unpadded(tiny_pair):
    md = tiny_pair[1]
    ctx = 40
    ids = _ids(ctx, seed=2)
    ref, padded = _model(md, ctx), _model(md, ctx)
    runner = GraphPrefill(padded, max_bucket=64, use_graph=False)
    _chunks(ref, ids, [0, 32]), _chunks(runner, ids, [0, 32])
    want, got = _eager(ref, ids[32:], 32), runner(ids[32:], 32)  # 8 tokens ending at slot 39
    assert torch.equal(want, got)  # the plain eager forward, bit for bit


def test_long_and_single_token_chunks_run_the_plain_forward(tiny_pair):
    md = tiny_pair[1]
    ref, other = _model(md), _model(md)
    runner = GraphPrefill(other, max_bucket=16, use_graph=False)
    ids = _ids(40, seed=4)
    assert torch.equal(_eager(ref, ids[:39], 0), runner(ids[:39], 0))  # 39 > largest bucket
    assert torch.equal(_eager(ref, ids[39:], 39), runner(ids[39:], 39))  # one token


def test_device_tensor_tokens_equal_list_tokens(tiny_pair):
    md = tiny_pair[1]
    models = _model(md), _model(md)  # runners hold their model weakly
    a, b = (GraphPrefill(m, use_graph=False) for m in models)
    ids = _ids(23, seed=8)
    assert torch.equal(a(ids, 0), b(torch.tensor(ids), 0))


def test_cpu_runner_is_the_plain_forward_and_refuses_graphs(tiny_pair):
    md = tiny_pair[1]
    model, ref = _model(md), _model(md)
    runner = graph_prefill_runner(model)
    assert runner is graph_prefill_runner(model)  # one runner per model
    assert not runner.use_graph and not runner.padded and "CUDA" in runner.unsupported_reason
    ids = _ids(21, seed=9)
    assert torch.equal(runner(ids, 0), _eager(ref, ids, 0))
    with pytest.raises(ValueError, match="CUDA"):
        GraphPrefill(model, use_graph=True)


def test_runner_does_not_keep_the_model_alive(tiny_pair):
    import weakref

    model = _model(tiny_pair[1])
    runner = graph_prefill_runner(model)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
    with pytest.raises(RuntimeError, match="no longer exists"):
        runner([1, 2, 3], 0)


def test_cache_reallocation_changes_the_graph_key(tiny_pair):
    """Graphs bake in cache and RoPE addresses; setup_cache must be detected (-> invalidate)."""
    model = _model(tiny_pair[1], 64)
    before = _static_addresses(model)
    assert before == _static_addresses(model)
    model.setup_cache(128)
    after = _static_addresses(model)
    assert after != before and any(shape[1:] == (2, 128, 64) for _, _, shape, _ in after if len(shape) == 4)


# ---------------------------------------------------------------------------------------------- engine


def _padded_engine(md, monkeypatch) -> Engine:
    """A CPU engine whose prefill chunks go through the padded runner (CUDA uses it with graphs)."""
    eng = Engine.load(md, device="cpu", context_length=256)
    runner = GraphPrefill(eng.model, max_bucket=32, use_graph=False)
    monkeypatch.setattr(eng, "_forward", lambda tokens, start: runner(tokens, start))
    return eng


def test_engine_multi_turn_prefix_reuse_with_padded_prefill(tiny_pair, monkeypatch):
    hf, md = tiny_pair
    monkeypatch.setattr(engine_mod, "PREFILL_CHUNK", 32)  # multi-chunk prompts, padded last chunks
    plain = Engine.load(md, device="cpu", context_length=256)
    padded = _padded_engine(md, monkeypatch)
    s = GenerationSettings(temperature=0.0, max_new_tokens=10, ignore_eos=True, enable_thinking=False)
    msgs = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. Hello, world! 你好"}]
    outs = []
    for eng in (plain, padded):
        first = list(eng.generate(msgs, s))[-1]
        turn2 = msgs + [{"role": "assistant", "content": first.text},
                        {"role": "user", "content": "How are you today? 今天天气很好"}]
        second = list(eng.generate(turn2, s))[-1]
        outs.append((first.stats.token_ids, second.stats.token_ids, second.stats.reused_prompt_tokens,
                     eng.encode_prompt(turn2, s)))
    assert outs[0] == outs[1]
    t1, t2, reused, ids2 = outs[1]
    assert reused > 32 and len(ids2) - reused > 1  # really reused a prefix and prefilled a padded tail
    assert t2 == hf_greedy(hf, ids2, 10)  # and both equal transformers on the whole conversation


# ---------------------------------------------------------------------------------------------- capture failures


def _graph_runner_on_cpu(model: Qwen3Model, monkeypatch, capture) -> GraphPrefill:
    """A runner forced into graph mode on the CPU with ``_capture`` replaced: exercises the
    capture bookkeeping (retry without cuDNN attention, eager fallback) without a GPU."""
    runner = GraphPrefill(model, max_bucket=64, use_graph=False)
    runner.use_graph = True
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(runner, "_capture", capture)
    return runner


def test_failed_capture_retries_without_cudnn_then_falls_back_to_eager(tiny_pair, monkeypatch):
    model, ref = _model(tiny_pair[1]), _model(tiny_pair[1])
    seen = []

    def capture(m, bucket, kv_len):
        seen.append(runner._sdpa_backends)
        raise RuntimeError(f"capture {len(seen)} failed\nsecond line")

    runner = _graph_runner_on_cpu(model, monkeypatch, capture)
    ids = _ids(20, seed=12)
    got = runner(ids, 0)
    assert seen[0] is None and seen[1] is not None and len(seen) == 2  # one retry, without cuDNN
    assert not runner.use_graph and not runner.padded
    assert runner.fallback_reason.endswith("capture 1 failed; then capture 2 failed")
    assert torch.equal(got, _eager(ref, ids, 0))  # the plain eager forward from now on
    assert torch.equal(runner(ids, 0), got) and len(seen) == 2


def test_capture_that_succeeds_on_retry_is_used(tiny_pair, monkeypatch):
    model = _model(tiny_pair[1])
    calls = []

    class FakeGraph:
        def replay(self):
            calls.append("replay")

    def capture(m, bucket, kv_len):
        calls.append("capture")
        if runner._sdpa_backends is None:
            raise RuntimeError("cudnn attention is not capturable")
        out = runner._body(m, bucket, kv_len)
        from runtime.prefill import _Captured

        return _Captured(FakeGraph(), out), out.clone()

    runner = _graph_runner_on_cpu(model, monkeypatch, capture)
    ids = _ids(20, seed=13)
    first = runner(ids, 0)
    second = runner(ids, 0)
    assert calls == ["capture", "capture", "replay"]
    assert runner.use_graph and runner.fallback_reason is None and runner.graphs == 1
    assert runner.capture_errors == ["cudnn attention is not capturable"]
    assert torch.equal(first, second)


def test_out_of_memory_during_capture_propagates(tiny_pair, monkeypatch):
    """The engine answers an OOM in prefill with smaller chunks: the runner must not swallow it."""
    model = _model(tiny_pair[1])

    def capture(m, bucket, kv_len):
        raise torch.OutOfMemoryError("CUDA out of memory")

    runner = _graph_runner_on_cpu(model, monkeypatch, capture)
    with pytest.raises(torch.OutOfMemoryError):
        runner(_ids(20), 0)
    assert runner.use_graph and runner.fallback_reason is None and runner.graphs == 0


def test_replays_read_the_static_buffers(tiny_pair, monkeypatch):
    """A stand-in graph whose replay re-runs the captured body on the static input buffers (what a
    CUDA graph does): chunks of different lengths and starts sharing a (bucket, KV bucket) key
    must each get their own logits and K/V, i.e. every call refreshes tokens, positions and the
    last-row index before replaying."""
    model, ref = _model(tiny_pair[1]), _model(tiny_pair[1])
    keys = []

    class ReplayBody:
        def __init__(self, m, bucket, kv_len, out):
            self.args, self.out = (m, bucket, kv_len), out

        def replay(self):
            self.out.copy_(runner._body(*self.args))

    def capture(m, bucket, kv_len):
        from runtime.prefill import _Captured

        keys.append((bucket, kv_len))
        warm = runner._body(m, bucket, kv_len)
        out = torch.empty_like(warm)
        return _Captured(ReplayBody(m, bucket, kv_len, out), out), warm.clone()

    runner = _graph_runner_on_cpu(model, monkeypatch, capture)
    ids = _ids(120, seed=14)
    # (start, end) -> key: 0..20 and 0..30 -> (32, 64); 30..40, 40..50, 50..60 -> (16, 64);
    # 60..80, 80..100, 100..117 -> (32, 128): same key, other lengths, starts and last rows
    for s, e in [(0, 20), (0, 30), (30, 40), (40, 50), (50, 60), (60, 80), (80, 100), (100, 117)]:
        want, got = _eager(ref, ids[s:e], s), runner(ids[s:e], s)
        assert (want - got).abs().max().item() <= TOL, (s, e)
    assert keys == [(32, 64), (16, 64), (32, 128)]
    assert runner.replays == 5 and runner.captures == 0  # captures are counted by the real _capture
    for name in ("k", "v"):
        a, b = getattr(ref.cache, name)[:, :, :117], getattr(model.cache, name)[:, :, :117]
        assert (a - b).abs().max().item() <= 1e-5


def test_graph_prefill_can_be_turned_off(monkeypatch):
    from runtime.prefill import graph_prefill_enabled, graph_unsupported_reason

    monkeypatch.delenv("TERNARY_GRAPH_PREFILL", raising=False)
    assert graph_prefill_enabled()  # on by default since it was measured on the H200
    monkeypatch.setenv("TERNARY_GRAPH_PREFILL", "0")
    assert not graph_prefill_enabled()
    assert "turned off" in graph_unsupported_reason(object())
    monkeypatch.setenv("TERNARY_GRAPH_PREFILL", "1")
    assert graph_prefill_enabled()
