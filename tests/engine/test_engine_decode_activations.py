"""The int8 / exact decode-activation switch: validated by the engine, passed by the CLI and the bench."""

from __future__ import annotations

from typing import Any

import pytest

import runtime.bench
from runtime.cli import build_parser
from runtime.cli import generate as gen_cli
from runtime.engine import Engine
from runtime.errors import TernaryError


def test_engine_refuses_unknown_decode_activations():
    with pytest.raises(TernaryError, match="decode activations must be int8 or exact"):
        Engine.load("does-not-matter.ternary", device="cpu", decode_activations="int4")


@pytest.mark.parametrize("command", ["generate", "chat", "bench"])
def test_decode_activations_flag_parses(command, capsys):
    base = {"generate": ["generate", "m", "--prompt", "x"], "chat": ["chat", "m"],
            "bench": ["bench", "--synthetic", "bonsai-1.7b"]}[command]
    parser = build_parser()
    assert parser.parse_args(base).decode_activations is None  # the kernels' default (int8)
    for choice in ("int8", "exact"):
        assert parser.parse_args([*base, "--decode-activations", choice]).decode_activations == choice
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--decode-activations", "fp8"])
    assert "invalid choice" in capsys.readouterr().err


def test_decode_activations_flag_reaches_engine_and_bench(monkeypatch):
    seen: dict[str, Any] = {}

    def fake_load(path: Any, **kw: Any) -> Any:
        seen.update(kw)
        raise TernaryError("stop here")

    monkeypatch.setattr(Engine, "load", staticmethod(fake_load))
    args = build_parser().parse_args(["generate", "m", "--prompt", "x", "--decode-activations", "exact"])
    with pytest.raises(TernaryError):
        gen_cli.load_engine(args, quiet=True)
    assert seen["decode_activations"] == "exact"

    def fake_bench(md: Any, **kw: Any) -> Any:
        seen["bench"] = kw
        raise TernaryError("stop here")

    monkeypatch.setattr(runtime.bench, "synthetic_model_cached", lambda *a, **k: None)
    monkeypatch.setattr(runtime.bench, "run_bench", fake_bench)
    args = build_parser().parse_args(["bench", "--synthetic", "bonsai-1.7b", "--decode-activations", "exact"])
    with pytest.raises(TernaryError):
        args.func(args)
    assert seen["bench"]["decode_activations"] == "exact"
