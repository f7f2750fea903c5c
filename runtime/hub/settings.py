"""Hub settings: which source to use and which endpoints (mirrors) to talk to.

Why a file in the config dir and not only environment variables: GUI users set a mirror once in
the settings dialog. Precedence for each value: explicit argument > environment
(``HF_ENDPOINT``, ``MODELSCOPE_ENDPOINT``) > settings file > built-in default. Tokens are never
stored here (see :mod:`runtime.hub.tokens`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from runtime.atomic import read_json, write_json_atomic
from runtime.hub.paths import HubPaths

DEFAULT_HF_ENDPOINT = "https://huggingface.co"
DEFAULT_MODELSCOPE_ENDPOINT = "https://modelscope.cn"
SOURCES = ("auto", "hf", "modelscope")


def normalize_endpoint(url: str) -> str:
    """``hf-mirror.com`` -> ``https://hf-mirror.com``; strips trailing ``/``; rejects non-http URLs."""
    url = url.strip()
    if "://" not in url:
        url = "https://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.hostname \
            or any(c.isspace() for c in url):
        raise ValueError(f"not an http(s) endpoint URL: {url!r}")
    return url.rstrip("/")


def normalize_source(source: str) -> str:
    s = source.lower()
    s = {"huggingface": "hf", "ms": "modelscope"}.get(s, s)
    if s not in SOURCES:
        raise ValueError(f"unknown source {source!r}: use auto, hf or modelscope")
    return s


@dataclass
class HubSettings:
    source: str = "auto"
    hf_endpoint: str = DEFAULT_HF_ENDPOINT
    modelscope_endpoint: str = DEFAULT_MODELSCOPE_ENDPOINT
    models_dir: str = ""  # absolute folder for models (HubPaths honours it); "" = the data dir's models/

    @classmethod
    def load(cls, paths: HubPaths | None = None, *, source: str | None = None, hf_endpoint: str | None = None,
             modelscope_endpoint: str | None = None) -> HubSettings:
        paths = paths or HubPaths.resolve()
        stored = read_json(paths.settings_file, {}) or {}
        s = cls()
        s.source = normalize_source(source or stored.get("source") or "auto")
        s.hf_endpoint = normalize_endpoint(hf_endpoint or os.environ.get("HF_ENDPOINT")
                                           or stored.get("hf_endpoint") or DEFAULT_HF_ENDPOINT)
        s.modelscope_endpoint = normalize_endpoint(modelscope_endpoint or os.environ.get("MODELSCOPE_ENDPOINT")
                                                   or stored.get("modelscope_endpoint") or DEFAULT_MODELSCOPE_ENDPOINT)
        models_dir = stored.get("models_dir")
        s.models_dir = models_dir.strip() if isinstance(models_dir, str) else ""
        return s

    def save(self, paths: HubPaths | None = None) -> None:
        paths = paths or HubPaths.resolve()
        write_json_atomic(paths.settings_file, asdict(self))
