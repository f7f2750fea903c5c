"""The CPU engine's activation modes: int8 by default on SIMD kernels, exact one setting away, and
what int8 costs against exact on a test model (KL, top-1); the thread split of CPU forwards."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.generation import DoneEvent, GenerationSettings
from runtime.kernels.cpu import ternary as cpu_ternary


@pytest.fixture
def default_mode(monkeypatch):
    monkeypatch.delenv("TERNARY_CPU_ACTIVATIONS", raising=False)
    cpu_ternary.set_default_activations(None)
    yield
    cpu_ternary.set_default_activations(None)


def _all_logits(engine: Engine, ids: list[int]) -> torch.Tensor:
    model = engine.model
    t = torch.tensor(ids)
    with torch.inference_mode():
        return model(t, torch.arange(len(ids)), kv_len=len(ids), last_only=False).float()


def test_default_is_int8_on_simd_kernels_and_exact_is_one_setting_away(tiny_pair, default_mode):
    expected = "exact" if cpu_ternary.kernel_name() == "c" else "int8"
    fast = Engine.load(tiny_pair[1], device="cpu", context_length=128)
    assert fast.info.backend == f"cpu_ternary[{cpu_ternary.kernel_name()},{expected}]"
    exact = Engine.load(tiny_pair[1], device="cpu", context_length=128, decode_activations="exact")
    assert exact.info.backend.endswith(",exact]")
    again = Engine.load(tiny_pair[1], device="cpu", context_length=128, decode_activations="int8")
    assert again.info.backend.endswith(",int8]")


def test_int8_cost_against_exact_is_small(tiny_pair, default_mode):
    """Measured: mean KL ~3e-5 nats, top-1 agreement 1.0 on this model (bounds leave room for other CPUs'
    summation order, not for a wrong kernel: a wrong block scale gives KL > 0.1)."""
    fast = Engine.load(tiny_pair[1], device="cpu", context_length=128, decode_activations="int8")
    exact = Engine.load(tiny_pair[1], device="cpu", context_length=128, decode_activations="exact")
    g = torch.Generator().manual_seed(0)
    kls, agree, n = [], 0, 0
    for _ in range(4):
        ids = torch.randint(0, tiny_pair[1].config.vocab_size, (24,), generator=g).tolist()
        a, b = _all_logits(exact, ids), _all_logits(fast, ids)
        assert not torch.equal(a, b)  # the int8 path really ran
        p, q = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
        kls.append((p.exp() * (p - q)).sum(-1))
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        n += a.shape[0]
    kl = torch.cat(kls)
    assert float(kl.mean()) < 1e-3 and float(kl.max()) < 1e-2
    assert agree / n >= 0.95


def test_decode_restores_torch_threads(tiny_engine):
    before = torch.get_num_threads()
    tiny_engine.reset()
    events = list(tiny_engine.generate("hello", GenerationSettings(temperature=0.0, max_new_tokens=6,
                                                                   ignore_eos=True)))
    assert isinstance(events[-1], DoneEvent) and events[-1].stats.generated_tokens == 6
    assert torch.get_num_threads() == before and cpu_ternary.kernel_threads() == before


@pytest.fixture
def two_torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_prefill_runs_torch_on_one_thread_and_the_kernels_on_all(tiny_engine, monkeypatch, two_torch_threads):
    """A multi-token forward (the prompt) runs torch's ops on one thread while the C kernels keep
    torch's thread count; both are restored after (an idle OpenMP thread spins on the kernels' core)."""
    from runtime.kernels.cpu.decode_step import CpuStep

    model = tiny_engine.model
    seen: list[tuple[int, int, int]] = []

    def recording(real):
        def run(self, ids, *args, **kwargs):
            seen.append((ids.numel(), torch.get_num_threads(), cpu_ternary.kernel_threads()))
            return real(self, ids, *args, **kwargs)
        return run

    # the prompt goes through the C step's prompt path where the model allows it, else model.forward
    monkeypatch.setattr(type(model), "forward", recording(type(model).forward))
    monkeypatch.setattr(CpuStep, "prompt", recording(CpuStep.prompt))
    tiny_engine.reset()
    list(tiny_engine.generate("hello there", GenerationSettings(temperature=0.0, max_new_tokens=2,
                                                                ignore_eos=True)))
    prompt_calls = [s for s in seen if s[0] > 1]
    assert prompt_calls and all(t == 1 and k == 2 for _, t, k in prompt_calls)
    assert torch.get_num_threads() == 2 and not cpu_ternary.kernel_threads_set()


def test_kernel_thread_context_is_reentrant_and_only_for_the_c_kernels(two_torch_threads):
    from runtime.engine import _cpu_kernel_threads

    cpu = torch.device("cpu")
    with _cpu_kernel_threads(cpu, "cpu_ternary[c,exact]"):
        assert (torch.get_num_threads(), cpu_ternary.kernel_threads()) == (1, 2)
        with _cpu_kernel_threads(cpu, "cpu_ternary[c,exact]"):  # inner: keeps the outer counts
            assert (torch.get_num_threads(), cpu_ternary.kernel_threads()) == (1, 2)
        assert (torch.get_num_threads(), cpu_ternary.kernel_threads()) == (1, 2)
    assert torch.get_num_threads() == 2 and not cpu_ternary.kernel_threads_set()
    with _cpu_kernel_threads(cpu, "cpu_int4"):  # torch does these matmuls: it keeps its threads
        assert torch.get_num_threads() == 2
