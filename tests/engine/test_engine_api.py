"""The Engine API contract (docs/engine.md): events, stats, cancellation, context limits, reuse."""

from __future__ import annotations

import threading
import time

import pytest

from runtime.engine import Engine
from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationSettings, NoticeEvent, TextEvent
from tests import model_factory as mf
from tests.engine.conftest import model_data_from_hf

GREEDY = dict(temperature=0.0, ignore_eos=True)


def _run(engine, request, **kw):
    events = list(engine.generate(request, GenerationSettings(**kw)))
    assert isinstance(events[-1], DoneEvent)
    assert not any(isinstance(e, DoneEvent) for e in events[:-1])
    return events, events[-1]


def test_events_and_stats_are_consistent(tiny_engine):
    tiny_engine.reset()
    events, done = _run(tiny_engine, [{"role": "user", "content": "Hello 你好"}], max_new_tokens=12, **GREEDY)
    text = "".join(e.text for e in events if isinstance(e, TextEvent) and e.channel == "answer")
    assert text == done.text
    st = done.stats
    assert st.generated_tokens == len(st.token_ids) == 12
    assert st.finish_reason == "length"
    assert st.prompt_tokens == tiny_engine.count_tokens([{"role": "user", "content": "Hello 你好"}])
    assert 0 < st.ttft_s <= st.total_s
    assert st.prefill_tok_s > 0 and st.decode_tok_s > 0
    assert st.peak_memory_bytes > 10 * 2**20  # process peak RSS: torch alone is more than that
    assert st.device == "cpu" and st.context_length == 256


def test_default_settings_come_from_the_model_file(tiny_pair):
    data = model_data_from_hf(tiny_pair[0])
    data.generation_defaults = {"temperature": 0.7, "top_p": 0.9}
    eng = Engine.load(data, device="cpu", context_length=64)
    d = eng.default_settings()
    assert (d.temperature, d.top_p, d.top_k, d.min_p) == (0.7, 0.9, 20, 0.0)  # top_k from PrismML defaults
    assert d.enable_thinking is False
    data.generation_defaults = {"do_sample": False, "temperature": 0.6}
    assert Engine.load(data, device="cpu", context_length=64).default_settings().temperature == 0.0
    resolved = eng.resolve_settings(GenerationSettings(top_k=5))
    assert (resolved.temperature, resolved.top_k) == (0.7, 5)


def test_seed_determinism(tiny_engine):
    kw = dict(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=16, ignore_eos=True)
    _, a = _run(tiny_engine, "Once upon a time", seed=123, **kw)
    _, b = _run(tiny_engine, "Once upon a time", seed=123, **kw)
    _, c = _run(tiny_engine, "Once upon a time", seed=124, **kw)
    assert a.stats.token_ids == b.stats.token_ids
    assert a.stats.token_ids != c.stats.token_ids


def test_context_overflow_is_raised_before_any_work(tiny_pair):
    eng = Engine.load(tiny_pair[0] and model_data_from_hf(tiny_pair[0]), device="cpu", context_length=32)
    calls = []
    eng._forward = lambda *a, **k: calls.append(a)  # type: ignore[method-assign]
    with pytest.raises(ContextOverflowError, match="32"):
        eng.generate("hello world " * 40, GenerationSettings(max_new_tokens=4))
    assert calls == []


def test_generation_stops_at_the_context_end(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=48)
    events, done = _run(eng, "The quick brown fox jumps", max_new_tokens=1000, **GREEDY)
    n_prompt = done.stats.prompt_tokens
    assert done.stats.finish_reason == "length"
    assert done.stats.generated_tokens == 48 - n_prompt + 1  # the last token needs no cache slot
    assert any(isinstance(e, NoticeEvent) for e in events)


def test_eos_token_stops_generation(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=64)
    _, ref = _run(eng, "The quick brown fox", max_new_tokens=4, temperature=0.0)
    eng.tokenizer.eos_token_ids = {ref.stats.token_ids[2]}
    _, done = _run(eng, "The quick brown fox", max_new_tokens=10, temperature=0.0)
    assert done.stats.finish_reason == "stop"
    assert done.stats.token_ids == ref.stats.token_ids[:2]


def test_stop_string_spanning_tokens(tiny_engine):
    tiny_engine.reset()
    _, ref = _run(tiny_engine, "Hello, world!", max_new_tokens=24, **GREEDY)
    text = ref.text
    pieces = [tiny_engine.tokenizer.decode([t]) for t in ref.stats.token_ids]
    # a stop string that straddles a token boundary, taken from the middle of the answer
    cut = len(pieces[0]) + len(pieces[1]) + len(pieces[2])
    stop = text[cut - 1:cut + 2]
    assert len(stop) == 3
    _, done = _run(tiny_engine, "Hello, world!", max_new_tokens=24, stop=[stop], **GREEDY)
    assert done.stats.finish_reason == "stop_string"
    assert done.text == text[:text.index(stop)]
    assert stop not in done.text


def test_cancel_from_another_thread_stops_within_one_token(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=256)
    cancel = CancelToken()
    forward = eng._forward
    calls = {"n": 0, "after_cancel": 0}

    def counting_forward(tokens, start):
        calls["n"] += 1
        if cancel.cancelled:
            calls["after_cancel"] += 1
        if calls["n"] == 6:  # during the 5th decode step, cancel from another thread
            t = threading.Thread(target=cancel.cancel)
            t.start()
            t.join()
        return forward(tokens, start)

    eng._forward = counting_forward  # type: ignore[method-assign]
    events = list(eng.generate("Once upon a time", GenerationSettings(max_new_tokens=100, **GREEDY),
                               cancel=cancel))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.stats.finish_reason == "cancelled"
    assert calls["after_cancel"] == 0  # no forward pass started after cancel()
    assert done.stats.generated_tokens == 6  # the token from the forward pass in flight, no more


def test_cancel_from_a_timer_thread_during_streaming(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=512)
    cancel = CancelToken()
    cancelled_at = []
    got_first = threading.Event()

    def canceller():
        got_first.wait(30)
        time.sleep(0.05)
        cancelled_at.append(time.perf_counter())
        cancel.cancel()

    th = threading.Thread(target=canceller)
    th.start()
    done = None
    for ev in eng.generate("Hello", GenerationSettings(max_new_tokens=400, **GREEDY), cancel=cancel):
        got_first.set()
        if isinstance(ev, DoneEvent):
            done = ev
    th.join()
    assert done is not None and done.stats.finish_reason == "cancelled"
    assert done.stats.generated_tokens < 400
    per_token = 1.0 / max(done.stats.decode_tok_s, 1e-9)
    assert time.perf_counter() - cancelled_at[0] < 5 * per_token + 1.0


def test_multi_turn_reuses_the_cache_prefix_and_matches_a_fresh_prefill(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=256)
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    _, first = _run(eng, conv, max_new_tokens=8, **GREEDY)
    assert first.stats.reused_prompt_tokens == 0
    conv2 = conv + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And then?"}]
    _, second = _run(eng, conv2, max_new_tokens=8, **GREEDY)
    ids1 = eng.encode_prompt(conv, GenerationSettings(**GREEDY))
    ids2 = eng.encode_prompt(conv2, GenerationSettings(**GREEDY))
    common = next(i for i, (a, b) in enumerate(zip(ids1, ids2, strict=False)) if a != b)
    # Qwen3's template drops the empty think block of earlier turns, so the reusable prefix ends at
    # the previous "<|im_start|>assistant\n"
    assert common > 20
    assert second.stats.reused_prompt_tokens == common
    assert second.stats.reused_prompt_tokens < second.stats.prompt_tokens
    eng.reset()
    _, fresh = _run(eng, conv2, max_new_tokens=8, **GREEDY)
    assert fresh.stats.reused_prompt_tokens == 0
    assert fresh.stats.token_ids == second.stats.token_ids
    # the same prompt again (regenerate) re-uses the whole prompt and the prefill's last logits
    _, again = _run(eng, conv2, max_new_tokens=8, **GREEDY)
    assert again.stats.reused_prompt_tokens == again.stats.prompt_tokens
    assert again.stats.token_ids == fresh.stats.token_ids


def test_regenerate_with_the_same_seed_repeats_the_answer(tiny_pair):
    """Regenerate = same prompt, same seed: the saved prefill logits are reused (not mutated by the
    penalties) and the answer repeats exactly, three times over, with nothing prefilled again."""
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu", context_length=128)
    sampled = dict(temperature=0.9, top_k=20, repetition_penalty=1.3, presence_penalty=0.5,
                   max_new_tokens=12, ignore_eos=True, seed=5)
    runs = [_run(eng, "Tell me a story", **sampled)[1] for _ in range(3)]
    assert runs[0].stats.token_ids == runs[1].stats.token_ids == runs[2].stats.token_ids
    assert runs[0].stats.reused_prompt_tokens == 0
    assert runs[1].stats.reused_prompt_tokens == runs[2].stats.reused_prompt_tokens == runs[1].stats.prompt_tokens
    eng.reset()
    fresh = _run(eng, "Tell me a story", **sampled)[1]
    assert fresh.stats.reused_prompt_tokens == 0 and fresh.stats.token_ids == runs[0].stats.token_ids


def test_template_that_opens_thinking_streams_the_thinking_channel(tiny_pair):
    template = mf.QWEN3_CHAT_TEMPLATE.replace("{{- '<|im_start|>assistant\\n' }}",
                                              "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    assert template != mf.QWEN3_CHAT_TEMPLATE
    data = model_data_from_hf(tiny_pair[0], chat_template=template)
    eng = Engine.load(data, device="cpu", context_length=128)
    events, done = _run(eng, [{"role": "user", "content": "Think"}], max_new_tokens=16, enable_thinking=True,
                        **GREEDY)
    text_events = [e for e in events if isinstance(e, TextEvent)]
    assert text_events and text_events[0].channel == "thinking"
    assert done.thinking == "".join(e.text for e in text_events if e.channel == "thinking")
    assert done.text == "".join(e.text for e in text_events if e.channel == "answer")
    assert eng.info.supports_thinking


def test_memory_stats_and_info(tiny_engine):
    st = tiny_engine.memory_stats()
    cfg = tiny_engine.config
    assert st.context_length == 256
    assert st.kv_cache_bytes == 2 * cfg.num_layers * cfg.num_kv_heads * 256 * cfg.head_dim * 2  # fp16 cache on the CPU
    assert st.ram_process_bytes > 0 and st.ram_peak_bytes >= st.ram_process_bytes
    assert st.device_allocated_bytes is None
    info = tiny_engine.info
    assert info.arch == "qwen3" and info.device == "cpu" and info.context_length == 256
    assert info.parameter_count > 0 and 0 < info.weight_bytes
    assert info.max_context == cfg.max_position_embeddings


def test_default_context_on_cpu_is_capped(tiny_pair):
    eng = Engine.load(model_data_from_hf(tiny_pair[0]), device="cpu")
    assert 256 <= eng.info.context_length <= eng.info.max_context
    assert eng.info.context_length % 256 == 0 or eng.info.context_length == eng.info.max_context


def test_graph_decoder_path_matches_the_eager_path(tiny_pair):
    """The CUDA-graph decode loop (run eagerly on the CPU here) gives the same tokens and stats."""
    data = model_data_from_hf(tiny_pair[0])
    eager = Engine.load(data, device="cpu", context_length=64)
    graph = Engine.load(data, device="cpu", context_length=64, graph_decode=True)
    for eng in (eager, graph):
        eng.reset()
    _, a = _run(eager, "The quick brown fox", max_new_tokens=20, **GREEDY)
    _, b = _run(graph, "The quick brown fox", max_new_tokens=20, **GREEDY)
    assert a.stats.token_ids == b.stats.token_ids and a.text == b.text
    # context end and prefix reuse behave the same
    _, a = _run(eager, "The quick brown fox", max_new_tokens=500, **GREEDY)
    _, b = _run(graph, "The quick brown fox", max_new_tokens=500, **GREEDY)
    assert a.stats.token_ids == b.stats.token_ids
    assert a.stats.reused_prompt_tokens == b.stats.reused_prompt_tokens == a.stats.prompt_tokens
    sampled = dict(temperature=0.9, top_k=10, top_p=0.9, max_new_tokens=12, ignore_eos=True, seed=9)
    _, c = _run(graph, "Hello", **sampled)
    _, d = _run(graph, "Hello", **sampled)
    assert c.stats.token_ids == d.stats.token_ids


def test_dense_file_with_hadamard_metadata_is_refused(tiny_pair):
    from runtime.errors import UnsupportedModelError
    from runtime.model.config import HadamardConfig

    data = model_data_from_hf(tiny_pair[0])
    data.config.hadamard = HadamardConfig()
    with pytest.raises(UnsupportedModelError, match="Hadamard"):
        Engine.load(data, device="cpu", context_length=64)


@pytest.mark.parametrize("encoding", ["t2", "t3"])
def test_embedding_gathers_exact_rows(encoding):
    import torch

    from runtime.formats.codecs import quantize_ternary
    from runtime.kernels.ternary_embedding import TernaryEmbedding

    w = mf.random_ternary(50, 256, 128, torch.Generator().manual_seed(0), 0.1)
    emb = TernaryEmbedding(quantize_ternary(w, 128, encoding=encoding)[0], torch.device("cpu"))
    ids = torch.tensor([3, 0, 49, 3])
    assert torch.equal(emb(ids, torch.float32), w[ids])


@pytest.mark.parametrize("mode", ["stream", "cpu"])
def test_model_built_with_an_offload_placement_gives_the_same_logits(tiny_pair, mode):
    """The placement hook (per-layer devices + wrappers, used for GPU offload) changes no numbers."""
    import torch

    from runtime.model.qwen3 import Qwen3Model
    from runtime.offload import Placement
    from runtime.planner import ModelSizes, plan_memory

    data = tiny_pair[1]  # untied: the embedding leaves the GPU first, then layers
    kw = dict(ctx_cap=256, min_margin_bytes=0, margin_fraction=0.0, prefill_chunk=16, offload_mode=mode,
              host_embedding=False)
    full = plan_memory(data, 2**40, **kw)
    sizes = ModelSizes.from_model_data(data)
    plan = plan_memory(data, full.predicted.total - sizes.embedding_bytes - 1, **kw)
    assert plan.layers_on_cpu > 0 and plan.offload_mode == mode and plan.embedding_device == "cpu"
    ids = torch.arange(20) % 250
    with torch.inference_mode():
        ref = Qwen3Model.from_model_data(data, "cpu", max_positions=64)(ids, torch.arange(20), kv_len=20)
        placed = Qwen3Model.from_model_data(data, "cpu", max_positions=64, placement=Placement(plan, "cpu"))
        if mode == "stream":
            assert any(type(m).__name__ == "StreamedLayer" for m in placed.layers)
        out = placed(ids, torch.arange(20), kv_len=20)
    assert torch.allclose(out, ref, atol=1e-5)


def test_unindexed_cuda_device_equals_the_current_one():
    """Offload compares tensor devices with the plan's: ``cuda`` must match ``cuda:0``."""
    import torch

    from runtime.offload import same_device

    assert same_device(torch.device("cpu"), torch.device("cpu"))
    assert not same_device(torch.device("cpu"), torch.device("cuda"))
    assert same_device(torch.device("cuda:1"), torch.device("cuda:1"))
    assert not same_device(torch.device("cuda:1"), torch.device("cuda:0"))
    if not torch.cuda.is_available():  # the current device is 0 when there is none
        assert same_device(torch.device("cuda"), torch.device("cuda:0"))
