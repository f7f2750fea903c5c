"""Endpoint / source settings: argument > environment > settings file > default."""

from __future__ import annotations

import pytest

from runtime.hub.settings import HubSettings, normalize_endpoint


def test_precedence_and_persistence(paths, monkeypatch):
    assert HubSettings.load(paths).hf_endpoint == "https://huggingface.co"
    HubSettings(source="modelscope", hf_endpoint="https://hf-mirror.com", modelscope_endpoint="https://www.modelscope.ai").save(paths)
    s = HubSettings.load(paths)
    assert (s.source, s.hf_endpoint, s.modelscope_endpoint) == ("modelscope", "https://hf-mirror.com", "https://www.modelscope.ai")
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.local:8080/")
    assert HubSettings.load(paths).hf_endpoint == "http://mirror.local:8080"
    s = HubSettings.load(paths, source="hf", hf_endpoint="other.example", modelscope_endpoint="ms.example")
    assert (s.source, s.hf_endpoint, s.modelscope_endpoint) == ("hf", "https://other.example", "https://ms.example")
    assert "token" not in paths.settings_file.read_text().lower()


def test_bad_values_are_refused():
    with pytest.raises(ValueError):
        normalize_endpoint("ftp://x")
    with pytest.raises(ValueError):
        HubSettings.load(source="github")
