import json

import pytest

from app.core.settings_model import (
    AppSettings,
    HardwareSettings,
    SamplingSettings,
    default_settings_path,
    generation_settings,
)


def test_defaults_are_valid_and_roundtrip(tmp_path):
    s = AppSettings()
    assert s.validate() == []
    s.hardware.context_length = 8192
    s.interface.language = "zh_CN"
    s.downloads.hf_endpoint = "https://hf-mirror.com"
    s.set_sampling("bonsai-4b", SamplingSettings(temperature=0.3, top_k=40, system_prompt="你好"))
    path = s.save()
    assert path == default_settings_path() and str(tmp_path) in str(path)
    again = AppSettings.load()
    assert again == s
    assert again.sampling_for("bonsai-4b").system_prompt == "你好"
    assert again.sampling_for("other").is_default()


@pytest.mark.parametrize("field,value,words", [
    ("temperature", -0.1, "between 0"), ("temperature", 2.5, "between 0"), ("top_p", 0.0, "above 0"),
    ("top_k", 3.5, "whole number"), ("min_p", 1.5, "Min-p"), ("repetition_penalty", 0.1, "0.5"),
    ("presence_penalty", 3, "-2"), ("max_new_tokens", 0, "from 1"), ("seed", -1, "from 0 to 1844"),
    ("temperature", "hot", "between 0"), ("top_k", True, "whole number"),
])
def test_sampling_validation_explains(field, value, words):
    s = SamplingSettings(**{field: value})
    errors = s.validate()
    assert len(errors) == 1 and errors[0][0] == field and words in errors[0][1]


def test_hardware_and_download_validation():
    assert HardwareSettings(device="cuda:1").validate() == []
    assert HardwareSettings(device="tpu").validate()[0][0] == "device"
    assert "at least 256" in HardwareSettings(context_length=100).validate()[0][1]
    s = AppSettings()
    s.downloads.hf_endpoint = "hf-mirror.com"
    s.interface.theme = "purple"
    fields = [f for f, _ in s.validate()]
    assert fields == ["downloads.hf_endpoint", "interface.theme"]
    with pytest.raises(ValueError, match="web address"):
        s.save()


def test_corrupt_or_invalid_file_falls_back_to_defaults(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json", encoding="utf-8")
    assert AppSettings.load(path) == AppSettings()
    path.write_text(json.dumps({"hardware": {"device": "tpu"}, "interface": {"theme": "dark"},
                                "sampling": {"m": {"temperature": 9}}, "unknown": 1}), encoding="utf-8")
    s = AppSettings.load(path)
    assert s.hardware == HardwareSettings()  # invalid section dropped
    assert s.interface.theme == "dark"  # valid section kept
    assert s.sampling == {}


def test_reset_to_model_defaults_and_generation_settings():
    s = AppSettings()
    s.set_sampling("m", SamplingSettings(temperature=0.0, max_new_tokens=64, reasoning_effort="low"))
    g = generation_settings(s.sampling_for("m"))
    assert (g.temperature, g.max_new_tokens, g.reasoning_effort, g.top_p) == (0.0, 64, "low", None)
    s.reset_sampling("m")
    assert s.sampling_for("m").is_default()
    assert generation_settings(s.sampling_for("m")).temperature is None  # = the model file's default


def test_gauge_durations_switch_to_milliseconds_below_one_second() -> None:
    from app.gauges import format_seconds

    assert format_seconds(0.0042) == "4.2 ms"
    assert format_seconds(0.0482) == "48 ms"
    assert format_seconds(1.5) == "1.50 s"


def test_offload_policies_and_gauge_texts_include_mapped() -> None:
    from app.core.settings_model import OFFLOAD_POLICIES
    from app.gauges import offload_mode_text, placement_text

    assert OFFLOAD_POLICIES == ("auto", "stream", "mapped", "cpu")
    assert HardwareSettings(offload_policy="mapped").validate() == []
    assert "mapped" in HardwareSettings(offload_policy="zero").validate()[0][1]
    assert offload_mode_text("mapped") == "offloaded layers read by the GPU from host memory"
    # every layer mapped: none is resident, yet all run on the GPU, which the suffix says
    plan = {"layers_on_gpu": 0, "layers_on_cpu": 36, "offload_mode": "mapped"}
    assert placement_text(plan) == "0 on GPU, 36 on CPU (offloaded layers read by the GPU from host memory)"
    assert placement_text({"layers_on_gpu": 0, "layers_on_cpu": 36, "offload_mode": "none"}) == "0 on GPU, 36 on CPU"
