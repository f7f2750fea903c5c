"""Launch configs for mapped weights (pinned host memory read over the bus) are never measured: a
timing would time PCIe, and a config picked for the bus could round differently from the one the
same matrix gets when resident. The tuned config is used when there is one, else the first
candidate, which is not remembered (so a resident matrix of that shape still tunes itself).

The choice logic is plain Python, so it is checked here with the interpreter switched off and the
timer replaced by a tripwire; the GPU suite (tests/gpu/test_gpu_mapped_offload.py) runs it for real.
"""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import triton_linear as tlin

N, K, G = 256, 512, 128


def _no_timing(*_a, **_k):
    raise AssertionError("a mapped weight must not be benchmarked")


@pytest.fixture
def compiled_mode(monkeypatch):
    """As on a GPU (INTERPRET off), with host tensors standing in for pinned host memory."""
    monkeypatch.setattr(tlin, "INTERPRET", False)
    monkeypatch.setattr(tlin, "_bench", _no_timing)
    monkeypatch.setattr(tlin, "_remember", _no_timing)
    monkeypatch.setattr(tlin, "_decode_activations", "int8")


def _gemv_args():
    x2 = torch.zeros(1, K, dtype=torch.bfloat16)
    w = torch.zeros(N, K // 4, dtype=torch.uint8)
    s = torch.zeros(N, K // G, dtype=torch.float16)
    return (x2, None, w, s, None, None, None, N, K, G, "t2", 1e-6, 0.0, False)


def test_host_weights_count_as_mapped_only_outside_the_interpreter(compiled_mode, monkeypatch):
    w = torch.zeros(4, dtype=torch.uint8)
    assert tlin.is_mapped(w)
    monkeypatch.setattr(tlin, "INTERPRET", True)  # the interpreter runs every kernel on host tensors
    assert not tlin.is_mapped(w)


def test_mapped_gemv_takes_the_first_candidate_without_timing_or_remembering(compiled_mode):
    before = dict(tlin._tuned)
    cfg = tlin._gemv_config(*_gemv_args())
    assert cfg[0] == "q8"  # int8 decode activations on t2: the first candidates are the dp4a kernel's
    assert cfg == tlin._gemv_config(*_gemv_args())  # deterministic
    assert tlin._tuned == before


def test_mapped_gemv_follows_a_tuned_config(compiled_mode):
    args = _gemv_args()
    key = tlin._key("gemv", 1, N, K, G, "t2", False, False, False, torch.bfloat16) + "|a8"
    tuned = ("q8", 4, 512, 1, 4)
    tlin._tuned[key] = tuned
    try:
        assert tlin._gemv_config(*args) == tuned  # what the resident matrix uses: same rounding
    finally:
        del tlin._tuned[key]


def test_mapped_prefill_dequantizes_unless_tuned(compiled_mode):
    x2 = torch.zeros(64, K, dtype=torch.bfloat16)
    codes = torch.zeros(N, K // 4, dtype=torch.uint8)
    scales = torch.zeros(N, K // G, dtype=torch.float16)
    y2 = torch.empty(64, N, dtype=torch.bfloat16)
    before = dict(tlin._tuned)
    assert tlin._prefill_choice(x2, codes, scales, G, "t2", y2, None) == ("dequant", None)
    assert tlin._tuned == before
    key = tlin._key("prefill", 64, N, K, G, "t2", torch.bfloat16)
    tlin._tuned[key] = ("mm", [64, 64, 4])
    try:
        assert tlin._prefill_choice(x2, codes, scales, G, "t2", y2, None) == ("mm", (64, 64, 4))
    finally:
        del tlin._tuned[key]
