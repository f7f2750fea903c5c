"""A small version of scripts/load_test_server.py: 16 concurrent streaming clients x 5 requests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.server.conftest import MODEL_ID

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "load_test_server.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("load_test_server", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_sixteen_clients_no_failed_lost_or_interleaved_tokens(server):
    lt = _load_module()
    served_before = server.stats().requests_served
    report = lt.run_load(server.url, MODEL_ID, clients=16, requests=5, deadline_s=120, lengths=(2, 4, 8))
    assert report.requests == 80 and report.passed(), report
    assert report.failed == 0 and report.lost == 0 and report.interleaved == 0
    assert report.tokens > 80 * 2 and report.ttft_p99_s >= report.ttft_p50_s > 0
    assert server.stats().requests_served - served_before == 80


def test_refuses_a_non_loopback_url():
    import pytest

    lt = _load_module()
    with pytest.raises(SystemExit, match="loopback"):
        lt.run_load("http://192.0.2.1:8731", MODEL_ID, clients=1, requests=1)
