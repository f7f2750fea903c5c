"""Offload policy: the planner honours the mode asked, and ``Engine.load(offload=...)`` passes it on."""

from __future__ import annotations

import pytest

from runtime import planner
from runtime.errors import TernaryError
from runtime.model.config import SYNTHETIC_CONFIGS

GIB = 1024**3


@pytest.mark.parametrize("mode", ["stream", "mapped", "cpu"])
def test_plan_memory_gives_the_offload_mode_asked_under_a_small_gpu_budget(mode):
    cfg = SYNTHETIC_CONFIGS["bonsai-8b"]
    plan = planner.plan_memory(cfg, 2 * GIB, device="hypothetical", offload_mode=mode)
    assert plan.fits and plan.layers_on_cpu > 0 and plan.layers_on_gpu > 0  # 8B does not fit 2 GiB whole
    assert plan.offload_mode == mode


def test_engine_load_passes_offload_to_the_planner(tmp_path, monkeypatch):
    from runtime.engine import Engine
    from tests.model_factory import tiny_model_files

    *_rest, folder = tiny_model_files(tmp_path)
    seen: list[dict] = []
    real = planner.plan_for_this_machine

    def spy(model, **kw):
        seen.append(kw)
        return real(model, **kw)

    monkeypatch.setattr(planner, "plan_for_this_machine", spy)
    for offload, expected in (("cpu", "cpu"), ("stream", "stream"), ("mapped", "mapped"), ("auto", None)):
        engine = Engine.load(str(folder), device="cpu", offload=offload)
        engine.close()
        assert seen[-1]["offload_mode"] == expected
    with pytest.raises(TernaryError, match="offload must be auto, stream, mapped or cpu"):
        Engine.load(str(folder), device="cpu", offload="gpu")
    with pytest.raises(TernaryError, match="needs the triton backend"):  # only Triton linears can be mapped
        Engine.load(str(folder), device="cpu", offload="mapped", backend="reference")
