"""One validation of sampling parameters for the CLI, the engine and the app (issue 26, item 20).

Corpus: for every parameter, values that must be refused (NaN, infinities, out of range, wrong
type, text that is not a number, seeds past 2**64 - 1) and values that must be accepted (the
edges of each range). The CLI must refuse with argparse's one line and exit code 2, the engine
with :class:`InvalidSettingError` before any work, and the app's settings must give the same
verdict as the CLI for every value.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.errors import InvalidSettingError, TernaryError
from runtime.generation import GenerationSettings
from runtime.sampling_params import MAX_SEED, RULES, check_device, cli_device, cli_type, parse_number

ROOT = Path(__file__).resolve().parents[2]

# flag -> values that must be refused (as typed on a command line)
BAD = {
    "--temperature": ["nan", "NaN", "inf", "-inf", "-1", "2.0001", "1e308", "abc", "", "0x1"],
    "--top-p": ["2", "0", "-0.5", "nan", "1e-9", "x"],
    "--top-k": ["-1", "1001", "1.5", "1e3", "nan", "99999999999999999999999"],
    "--min-p": ["5", "-0.1", "nan", "1.01"],
    "--repetition-penalty": ["0", "NaN", "-1", "0.49", "2.5", "inf"],
    "--presence-penalty": ["1e308", "-1e308", "2.01", "nan", "-inf"],
    "--frequency-penalty": ["3", "-2.5", "nan", "inf"],
    "--max-new-tokens": ["0", "-5", "262145", "1.5", "10**9", "nan"],
    "--seed": ["-1", str(2**64), "2**64", "1.5", "nan", "1e3", "9" * 5000],
    "--device": ["bogus", "cuda:x", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:١", "cpu ", ""],
}
GOOD = {
    "--temperature": ["0", "2", "0.7", "1e-3"],
    "--top-p": ["0.01", "1", "0.5"],
    "--top-k": ["0", "1000", "20"],
    "--min-p": ["0", "1", "0.05"],
    "--repetition-penalty": ["0.5", "2", "1.1"],
    "--presence-penalty": ["-2", "2", "0"],
    "--frequency-penalty": ["-2", "2", "0.5"],
    "--max-new-tokens": ["1", "262144", "512"],
    "--seed": ["0", str(MAX_SEED), "42"],
    "--device": ["auto", "cpu", "cuda", "cuda:0", "cuda:12"],
}
FIELD = {flag: flag[2:].replace("-", "_") for flag in BAD}


@pytest.mark.parametrize("command", ["generate", "chat"])
@pytest.mark.parametrize("flag,value", [(f, v) for f, vs in BAD.items() for v in vs])
def test_cli_refuses_bad_values_with_exit_2(command, flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "no-such-model", *(["--prompt", "hi"] if command == "generate" else []), f"{flag}={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].count("error:") == 1


@pytest.mark.parametrize("flag,value", [(f, v) for f, vs in BAD.items() if f in ("--device", "--seed") for v in vs])
def test_bench_refuses_bad_device_and_seed(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--synthetic", "bonsai-1.7b", f"{flag}={value}"])
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--ctx", "-4"], ["--ctx", "abc"], ["--runs", "0"], ["--gen", "1"],
                                  ["--prompt-tokens", "0"], ["--baseline-gen", "-1"]])
def test_bench_refuses_bad_sizes(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--synthetic", "bonsai-1.7b", *args])
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_cli_in_a_subprocess_gives_one_line_no_traceback():
    for flag, value in [("--temperature", "nan"), ("--presence-penalty", "1e308"), ("--device", "bogus"),
                        ("--seed", "18446744073709551616"), ("--repetition-penalty", "0")]:
        proc = subprocess.run([sys.executable, "-m", "runtime", "generate", "m.gguf", "--prompt", "x", flag, value],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and f"argument {flag}" in proc.stderr


@pytest.mark.parametrize("flag,value", [(f, v) for f, vs in GOOD.items() for v in vs])
def test_cli_accepts_the_edges_of_each_range(flag, value):
    parse = cli_device if flag == "--device" else cli_type(FIELD[flag])
    parse(value)


# -- the engine --------------------------------------------------------------------------------
ENGINE_BAD = [("temperature", math.nan), ("temperature", -1.0), ("temperature", math.inf), ("top_p", 2.0),
              ("top_p", 0.0), ("min_p", 5.0), ("repetition_penalty", 0.0), ("repetition_penalty", math.nan),
              ("presence_penalty", 1e308), ("frequency_penalty", -3.0), ("top_k", -1), ("top_k", 2.5),
              ("max_new_tokens", 0), ("seed", 2**64), ("seed", -1), ("temperature", "0.5"), ("top_k", True)]


@pytest.mark.parametrize("name,value", ENGINE_BAD)
def test_engine_refuses_before_any_work(tiny_engine, name, value):
    with pytest.raises(InvalidSettingError) as e:
        tiny_engine.generate("hello", GenerationSettings(**{name: value}))
    assert e.value.field == name and isinstance(e.value, ValueError) and isinstance(e.value, TernaryError)
    assert RULES[name].explanation in str(e.value)


@pytest.mark.parametrize("name,value", ENGINE_BAD)
def test_sampler_refuses_too(name, value):
    from runtime.sampling import TokenSampler

    base = dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
                frequency_penalty=0.0)
    with pytest.raises(InvalidSettingError):
        TokenSampler(16, "cpu").configure(GenerationSettings(**{**base, name: value}), [])


def test_engine_runs_with_the_largest_seed(tiny_engine):
    done = list(tiny_engine.generate("hello", GenerationSettings(seed=MAX_SEED, max_new_tokens=2, temperature=1.0,
                                                                  ignore_eos=True)))[-1]
    again = list(tiny_engine.generate("hello", GenerationSettings(seed=MAX_SEED, max_new_tokens=2, temperature=1.0,
                                                                   ignore_eos=True)))[-1]
    assert done.stats.token_ids == again.stats.token_ids and len(done.stats.token_ids) == 2


@pytest.mark.parametrize("device", ["bogus", "cuda:x", "tpu", ""])
def test_engine_load_refuses_a_bad_device(tiny_pair, device):
    from runtime.engine import Engine

    with pytest.raises(InvalidSettingError) as e:
        Engine.load(tiny_pair[1], device=device)
    assert e.value.field == "device"


def test_invalid_model_file_defaults_fall_back_to_the_family_defaults(tiny_pair):
    """generation_config.json with NaN temperature or top_k 10**9 must not break every generation."""
    import dataclasses

    from runtime.engine import Engine
    from runtime.formats.arch import DEFAULT_SAMPLING as PRISM_SMALL_DEFAULTS

    data = dataclasses.replace(tiny_pair[1], generation_defaults={
        "temperature": float("nan"), "top_k": 10**9, "top_p": "abc", "repetition_penalty": 0.0,
        "min_p": 0.05, "max_new_tokens": 10**12})
    eng = Engine.load(data, device="cpu", context_length=64)
    try:
        d = eng.default_settings()
        assert d.temperature == PRISM_SMALL_DEFAULTS["temperature"] and d.top_k == PRISM_SMALL_DEFAULTS["top_k"]
        assert d.top_p == PRISM_SMALL_DEFAULTS["top_p"] and d.repetition_penalty == 1.0
        assert d.min_p == 0.05 and d.max_new_tokens == GenerationSettings().max_new_tokens
        done = list(eng.generate("hello", GenerationSettings(max_new_tokens=2, ignore_eos=True)))[-1]
        assert len(done.stats.token_ids) == 2
    finally:
        eng.close()


# -- the app and the CLI agree -------------------------------------------------------------------
APP_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
              "max_new_tokens", "seed")


@pytest.mark.parametrize("flag", [f for f in BAD if FIELD[f] in APP_FIELDS])
def test_app_and_cli_accept_and_refuse_the_same_values(flag):
    from app.core.settings_model import LIMITS, SamplingSettings

    name = FIELD[flag]
    assert LIMITS[name] is RULES[name]  # one definition, not a copy that can drift
    for text in BAD[flag] + GOOD[flag]:
        try:
            value = parse_number(name, text)
            cli_ok = True
        except ValueError:
            cli_ok = False
        # what the app would hold for the same typed text (a number if the text is one)
        try:
            typed: object = int(text) if RULES[name].integer else float(text)
        except ValueError:
            continue  # the app's field refuses text that is not a number before validation
        app_ok = not SamplingSettings(**{name: typed}).validate()
        assert app_ok == cli_ok, (flag, text)
        if cli_ok:
            assert value == typed


def test_app_and_cli_agree_on_devices():
    from app.core.settings_model import HardwareSettings

    for text in BAD["--device"] + GOOD["--device"]:
        app_ok = not [f for f, _ in HardwareSettings(device=text).validate() if f == "device"]
        try:
            cli_device(text)
            cli_ok = True
        except argparse.ArgumentTypeError:
            cli_ok = False
        assert app_ok == cli_ok == (check_device(text) is None), text
