"""Launch configs for mapped weights (pinned host memory read over the bus): a mapped matrix gets the
config a resident matrix of its shape gets, so the output does not depend on the VRAM cap. A tuned
config is followed; a shape nobody tuned is timed on a short-lived device copy (timing in place
would time PCIe, and a config picked for the bus could round differently) and remembered. Only when
there is no room for the copy, or inside a graph capture, is the first candidate (mat-vec) or
dequantize + cuBLAS (prefill) used, and then not remembered.

The choice logic is plain Python, so it is checked here with the interpreter switched off, host
tensors standing in for pinned memory, a fake device copy and a fake timer; the GPU suite
(tests/gpu/test_gpu_mapped_offload.py) runs it for real.
"""

from __future__ import annotations

import pytest
import torch

from runtime.kernels.triton import gemm, launch, matvec, tuning

N, K, G = 256, 512, 128


def _tripwire(*_a, **_k):
    raise AssertionError("must not be called here")


class _Device:
    """Fake device copies and timer: ``copies`` are the tensors handed out by ``_device_copies``,
    ``timed`` the weight each timed launch read; each config's time comes from ``times``."""

    def __init__(self, monkeypatch, room: bool = True, capturing: bool = False) -> None:
        self.copies: list[torch.Tensor] = []
        self.timed: list[torch.Tensor] = []
        self.remembered: dict[str, object] = {}
        self.current = None
        self.times: dict[object, float] = {}
        self.room = room
        monkeypatch.setattr(tuning, "_device_copies", self.device_copies)
        monkeypatch.setattr(tuning, "_bench", self.bench)
        monkeypatch.setattr(tuning, "_remember", self.remembered.__setitem__)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
        # _gemv_launch(x2, nw, w, ..., cfg), _mm_launch(x2, codes, ..., cfg), _dequant_matmul(x2, codes, ...)
        monkeypatch.setattr(matvec, "_gemv_launch", lambda *a, **_k: self.record(a[2], a[-1]))
        monkeypatch.setattr(gemm, "_mm_launch", lambda *a, **_k: self.record(a[1], a[-1]))
        monkeypatch.setattr(gemm, "_dequant_matmul", lambda *a, **_k: self.record(a[1], "dequant"))

    def device_copies(self, _device, *tensors):
        if not self.room:
            return None
        out = [t.clone() if t is not None else None for t in tensors]
        self.copies += [t for t in out if t is not None]
        return out

    def record(self, weight: torch.Tensor, cfg) -> None:
        self.timed.append(weight)
        self.current = tuple(cfg) if isinstance(cfg, (tuple, list)) else cfg

    def bench(self, fn) -> float:
        fn()
        return self.times.get(self.current, 1.0)


def _interpret(monkeypatch, on: bool) -> None:
    """Each kernel module keeps its own copy of the import-time ``INTERPRET``: switch them all."""
    for mod in (launch, tuning, matvec, gemm):
        monkeypatch.setattr(mod, "INTERPRET", on)


@pytest.fixture
def compiled_mode(monkeypatch):
    """As on a GPU (INTERPRET off), int8 decode activations (the default)."""
    _interpret(monkeypatch, False)
    monkeypatch.setattr(matvec, "_decode_activations", "int8")
    monkeypatch.setattr(tuning, "_tuned", {})


def _gemv_args():
    x2 = torch.zeros(1, K, dtype=torch.bfloat16)
    w = torch.zeros(N, K // 4, dtype=torch.uint8)
    s = torch.zeros(N, K // G, dtype=torch.float16)
    return (x2, None, w, s, None, None, None, N, K, G, "t2", 1e-6, 0.0, False)


def _prefill_args():
    x2 = torch.zeros(64, K, dtype=torch.bfloat16)
    codes = torch.zeros(N, K // 4, dtype=torch.uint8)
    scales = torch.zeros(N, K // G, dtype=torch.float16)
    return (x2, codes, scales, G, "t2", torch.empty(64, N, dtype=torch.bfloat16), None)


GEMV_KEY = tuning._key("gemv", 1, N, K, G, "t2", False, False, False, torch.bfloat16) + "|a8"
PREFILL_KEY = tuning._key("prefill", 64, N, K, G, "t2", torch.bfloat16)


def test_host_weights_count_as_mapped_only_outside_the_interpreter(compiled_mode, monkeypatch):
    w = torch.zeros(4, dtype=torch.uint8)
    assert launch.is_mapped(w)
    _interpret(monkeypatch, True)  # the interpreter runs every kernel on host tensors
    assert not launch.is_mapped(w)


def test_mapped_gemv_is_timed_on_device_copies_and_remembered(compiled_mode, monkeypatch):
    dev = _Device(monkeypatch)
    args = _gemv_args()
    first = matvec._gemv_config(*args)  # all candidates equally fast: the first wins
    assert dev.timed and all(any(t is c for c in dev.copies) for t in dev.timed)  # never the mapped tensor
    assert not any(t is args[2] for t in dev.timed)
    assert dev.remembered == {GEMV_KEY: first}
    # a clearly faster candidate (here the last one timed) is the one chosen, as for a resident matrix
    last = dev.current
    assert last != first
    dev.times = {last: 0.5}
    dev.remembered.clear()
    assert matvec._gemv_config(*args) == last and dev.remembered == {GEMV_KEY: last}


def test_mapped_gemv_without_room_or_in_a_capture_takes_the_first_candidate_unremembered(compiled_mode, monkeypatch):
    dev = _Device(monkeypatch, room=False)
    cfg = matvec._gemv_config(*_gemv_args())
    assert cfg[0] == "q8"  # int8 decode activations on t2: the first candidates are the dp4a kernel's
    assert dev.timed == [] and dev.remembered == {}
    monkeypatch.setattr(tuning, "_device_copies", _tripwire)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert matvec._gemv_config(*_gemv_args()) == cfg and dev.remembered == {}


def test_mapped_gemv_follows_a_tuned_config(compiled_mode, monkeypatch):
    _Device(monkeypatch)
    monkeypatch.setattr(tuning, "_device_copies", _tripwire)
    tuned = ("q8", 4, 512, 1, 4)
    tuning._tuned[GEMV_KEY] = tuned
    assert matvec._gemv_config(*_gemv_args()) == tuned  # what the resident matrix uses: same rounding


def test_mapped_prefill_is_timed_on_device_copies_and_remembered(compiled_mode, monkeypatch):
    dev = _Device(monkeypatch)
    args = _prefill_args()
    mm = tuple(tuning._MM_CANDIDATES[1])
    dev.times = {mm: 0.25}  # one Triton GEMM config beats dequantize + cuBLAS and the other configs
    assert gemm._prefill_choice(*args) == ("mm", mm)
    assert dev.timed and all(any(t is c for c in dev.copies) for t in dev.timed)
    assert not any(t is args[1] for t in dev.timed)
    assert dev.remembered == {PREFILL_KEY: ("mm", list(mm))}


def test_mapped_prefill_without_room_or_in_a_capture_dequantizes_unremembered(compiled_mode, monkeypatch):
    dev = _Device(monkeypatch, room=False)
    assert gemm._prefill_choice(*_prefill_args()) == ("dequant", None)
    assert dev.timed == [] and dev.remembered == {}
    monkeypatch.setattr(tuning, "_device_copies", _tripwire)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert gemm._prefill_choice(*_prefill_args()) == ("dequant", None) and dev.remembered == {}
    tuning._tuned[PREFILL_KEY] = ("mm", [64, 64, 4])  # a tuned entry is followed, capture or not
    assert gemm._prefill_choice(*_prefill_args()) == ("mm", (64, 64, 4))
