"""All user settings as dataclasses: validation with explanations, atomic JSON persistence.

Why plain Python: the settings dialog, the worker and the tests share one definition of what a
valid value is. Ranges live in :data:`LIMITS` so the dialog builds its validators and its inline
explanations from the same numbers that :meth:`AppSettings.validate` checks.

Sampling settings are kept per model: a field left ``None`` means "the model file's default"
(what ``Engine.default_settings()`` reports), so "reset to model defaults" just clears the
overrides of that model. Hub tokens are NOT stored here: they go to the OS keyring through the hub
module.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from app.core.settings_file import SettingsLoadReport, build_settings, load_settings, save_settings_text
from runtime.sampling_params import DEVICE_EXPLANATION, RULES, Range, check_device

log = logging.getLogger(__name__)

SETTINGS_VERSION = 1


# One definition of the sampling ranges for the app, the CLI and the engine (runtime/sampling_params.py):
# the dialog, AppSettings.validate, `ternary generate` flags and Engine.generate all read RULES.
Limit = Range

LIMITS: dict[str, Limit] = {
    **{name: RULES[name] for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                      "presence_penalty", "max_new_tokens", "seed")},
    "context_length": Limit(0, 1_048_576, "Context length must be 0 (Auto) or a whole number of tokens up to 1048576.",
                            integer=True),
    "vram_cap_gib": Limit(0.0, 4096.0, "The VRAM cap must be 0 (no cap) or a size in GiB up to 4096."),
}
MIN_MANUAL_CONTEXT = 256
REASONING_EFFORTS = ("", "low", "medium", "high")
DEVICES_FIXED = ("auto", "cpu", "cuda")
OFFLOAD_POLICIES = ("auto", "stream", "mapped", "cpu")  # the planner's offload modes: auto = cheapest per token
# auto = the engine's activation dtype (fp32 on CPU, bf16 on GPU); int8 = the 8-bit cache (half the memory)
KV_PRECISIONS = ("auto", "fp16", "bf16", "int8")
# GPU decode mat-vecs: int8 activations + dp4a (faster) or exact fp32 activations in the kernel
DECODE_PRECISIONS = ("int8", "exact")
SOURCES = ("auto", "hf", "modelscope")  # same names as runtime.hub.settings
LANGUAGES = ("en", "zh_CN")
THEMES = ("light", "dark", "system")  # system = follow the desktop's light/dark scheme, live


@dataclass
class SamplingSettings:
    """Sampling controls of one model; ``None`` = use the model file's default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    system_prompt: str = ""
    enable_thinking: bool | None = None
    reasoning_effort: str = ""

    def validate(self) -> list[tuple[str, str]]:
        errors = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in LIMITS and value is not None:
                problem = LIMITS[f.name].check(value)
                if problem:
                    errors.append((f.name, problem))
        if self.reasoning_effort not in REASONING_EFFORTS:
            errors.append(("reasoning_effort", "Reasoning effort must be empty, low, medium or high."))
        return errors

    def is_default(self) -> bool:
        return self == SamplingSettings()


@dataclass
class HardwareSettings:
    """How a model is loaded. Changing these reloads the model."""

    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    context_length: int = 0  # 0 = Auto (the planner's choice)
    offload_policy: str = "auto"
    kv_cache_precision: str = "auto"
    decode_precision: str = "int8"
    vram_cap_gib: float = 0.0  # 0 = no cap

    def validate(self) -> list[tuple[str, str]]:
        errors = []
        if check_device(self.device):
            errors.append(("device", DEVICE_EXPLANATION))
        for name in ("context_length", "vram_cap_gib"):
            problem = LIMITS[name].check(getattr(self, name))
            if problem:
                errors.append((name, problem))
        if 0 < self.context_length < MIN_MANUAL_CONTEXT:
            errors.append(("context_length", f"A manual context length must be at least {MIN_MANUAL_CONTEXT} tokens."))
        if self.offload_policy not in OFFLOAD_POLICIES:
            errors.append(("offload_policy", "Offload policy must be auto, stream, mapped or cpu."))
        if self.kv_cache_precision not in KV_PRECISIONS:
            errors.append(("kv_cache_precision", "KV-cache precision must be auto, fp16, bf16 or int8."))
        if self.decode_precision not in DECODE_PRECISIONS:
            errors.append(("decode_precision", "Decode precision must be int8 or exact."))
        return errors

    @property
    def vram_cap_bytes(self) -> int | None:
        return int(self.vram_cap_gib * 1024**3) if self.vram_cap_gib > 0 else None


@dataclass
class DownloadSettings:
    source: str = "auto"
    hf_endpoint: str = ""  # e.g. https://hf-mirror.com ; empty = https://huggingface.co
    modelscope_endpoint: str = ""  # empty = https://modelscope.cn
    models_dir: str = ""  # empty = the default folder under the data dir

    def validate(self) -> list[tuple[str, str]]:
        errors = []
        if self.source not in SOURCES:
            errors.append(("source", "Source must be auto, hf (Hugging Face) or modelscope."))
        for name in ("hf_endpoint", "modelscope_endpoint"):
            value = getattr(self, name)
            if not isinstance(value, str):
                errors.append((name, "A mirror endpoint must be text."))
                continue
            value = value.strip()
            if value and not (value.startswith("https://") or value.startswith("http://")):
                errors.append((name, "A mirror endpoint must be a web address starting with https:// or http://."))
        if not isinstance(self.models_dir, str) or (self.models_dir and not Path(self.models_dir).is_absolute()):
            errors.append(("models_dir", "The models folder must be empty (default) or an absolute path."))
        return errors


@dataclass
class InterfaceSettings:
    language: str = "en"
    theme: str = "light"
    show_thinking: bool = True
    show_performance_panel: bool = True  # View → Show performance panel (Ctrl+Shift+P)

    def validate(self) -> list[tuple[str, str]]:
        errors = []
        if self.language not in LANGUAGES:
            errors.append(("language", "Language must be en or zh_CN."))
        if self.theme not in THEMES:
            errors.append(("theme", "Theme must be light, dark or system."))
        if not isinstance(self.show_performance_panel, bool):
            errors.append(("show_performance_panel", "show_performance_panel must be true or false."))
        return errors


@dataclass
class ServerSettings:
    """Settings → Local server: the app serves its loaded model over the OpenAI/Anthropic APIs.

    The API key is not here: it lives in the keyring (:mod:`app.core.secrets`). A host other than a
    loopback address is refused by the server without one (checked when it starts).
    """

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 8731

    def validate(self) -> list[tuple[str, str]]:
        errors = []
        if not isinstance(self.enabled, bool):
            errors.append(("enabled", "enabled must be true or false."))
        if not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            errors.append(("port", "The port must be a whole number from 1 to 65535."))
        if not isinstance(self.host, str) or not self.host.strip() or any(c.isspace() for c in self.host.strip()):
            errors.append(("host", "The host must be an address such as 127.0.0.1."))
        return errors

    @property
    def loopback(self) -> bool:
        """True when only this computer can reach the server (no API key needed)."""
        from runtime.server.config import is_loopback

        return is_loopback(self.host)

    @property
    def url(self) -> str:
        host = self.host.strip()
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"


def check_remote(name: str, url: str) -> str | None:
    """Why a remote backend entry is invalid, or None."""
    if not name.strip() or "#" in name:
        return "A remote needs a name without '#'."
    from app.core.remote import normalize_base_url

    try:
        normalize_base_url(url)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass
class AppSettings:
    """Everything persisted in ``settings.json``."""

    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    downloads: DownloadSettings = field(default_factory=DownloadSettings)
    interface: InterfaceSettings = field(default_factory=InterfaceSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    remotes: dict[str, str] = field(default_factory=dict)  # remote backend name -> base URL (keys: keyring)
    sampling: dict[str, SamplingSettings] = field(default_factory=dict)  # model key -> overrides
    last_model: str = ""
    local_models: list[str] = field(default_factory=list)  # imported files/folders, loadable in place
    first_run_done: bool = False

    # What :mod:`app.core.settings_file` builds sections and checks versions with (passed, not imported).
    SAMPLING_TYPE: ClassVar[type[SamplingSettings]] = SamplingSettings
    check_remote: ClassVar[Any] = staticmethod(check_remote)
    VERSION: ClassVar[int] = SETTINGS_VERSION

    # -- per-model sampling --------------------------------------------------------------------
    def sampling_for(self, model_key: str) -> SamplingSettings:
        """The user's overrides for a model (a fresh all-default object if there are none)."""
        return self.sampling.get(model_key) or SamplingSettings()

    def set_sampling(self, model_key: str, sampling: SamplingSettings) -> None:
        if sampling.is_default():
            self.sampling.pop(model_key, None)
        else:
            self.sampling[model_key] = sampling

    def reset_sampling(self, model_key: str) -> None:
        """Back to the model file's defaults."""
        self.sampling.pop(model_key, None)

    # -- validation ----------------------------------------------------------------------------
    def validate(self) -> list[tuple[str, str]]:
        """(field path, explanation) for every invalid value; empty when all is well."""
        errors = []
        for section in ("hardware", "downloads", "interface", "server"):
            errors += [(f"{section}.{name}", why) for name, why in getattr(self, section).validate()]
        for remote, url in self.remotes.items():
            problem = check_remote(remote, url)
            if problem:
                errors.append((f"remotes[{remote}]", problem))
        for key, s in self.sampling.items():
            errors += [(f"sampling[{key}].{name}", why) for name, why in s.validate()]
        return errors

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["version"] = SETTINGS_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppSettings:
        """Build from JSON data: every valid value is kept, each invalid one alone falls back to its default."""
        reset: list[str] = []
        s = build_settings(cls, data if isinstance(data, dict) else {}, reset)
        if reset:
            log.warning("settings: invalid values reset to defaults: %s", ", ".join(reset))
        return s

    @classmethod
    def load(cls, path: str | Path | None = None) -> AppSettings:
        return cls.load_with_report(path)[0]

    @classmethod
    def load_with_report(cls, path: str | Path | None = None, repair: bool = True) -> tuple[AppSettings, Any]:
        """Settings and an :class:`app.core.settings_file.SettingsLoadReport` of what was wrong with the file.

        Never raises: a damaged file is kept as a copy, every valid value survives, gaps are filled
        from the last good copy (see :mod:`app.core.settings_file`).
        """
        try:
            path = Path(path) if path else default_settings_path()
        except OSError as exc:  # the config folder cannot be created
            log.warning("settings folder unusable (%s); using defaults", exc)
            return cls(), SettingsLoadReport(Path(str(exc.filename or "settings.json")), problems=["unreadable"])
        return load_settings(path, cls, repair=repair)

    def save(self, path: str | Path | None = None) -> Path:
        """Atomic write; a damaged file there is kept as a copy first, and the result is also kept as ``.bak``."""
        errors = self.validate()
        if errors:
            raise ValueError(errors[0][1])
        path = Path(path) if path else default_settings_path()
        return save_settings_text(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=2) + "\n",
                                  type(self))


def model_key(path: str) -> str:
    """Settings key for a model's own sampling overrides: its resolved path.

    Why not the file name (the key before): two different files called ``model.gguf`` in two
    folders shared one set of overrides. Keys written by older versions (a bare name) are moved to
    the path of the first model of that name that is loaded (:meth:`MainWindow.adopt_name_keyed_sampling`).
    """
    if path.startswith("remote:"):  # a remote model (app.core.remote.remote_ref) is its own key
        return path
    return str(Path(path).expanduser().resolve()) if path else ""


def default_settings_path() -> Path:
    from app.core.paths import config_dir

    return config_dir() / "settings.json"


def generation_settings(sampling: SamplingSettings) -> Any:
    """The engine's ``GenerationSettings`` for these overrides (``None`` fields = model default)."""
    from runtime.generation import GenerationSettings

    kwargs: dict[str, Any] = {name: getattr(sampling, name) for name in (
        "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "seed",
        "enable_thinking")}
    if sampling.max_new_tokens is not None:
        kwargs["max_new_tokens"] = sampling.max_new_tokens
    if sampling.reasoning_effort:
        kwargs["reasoning_effort"] = sampling.reasoning_effort
    return GenerationSettings(**kwargs)


@dataclass(frozen=True)
class FolderCheck:
    """Whether a folder can hold models. ``reason`` is a code ("" = usable) the dialog translates."""

    reason: str
    problem: str  # English explanation ("" when usable)
    exists: bool = False
    free_bytes: int = 0


FOLDER_PROBLEMS = {
    "empty": "Choose a folder for the models.",
    "relative": "Enter a full path (for example /home/me/models).",
    "not_dir": "This path is a file, not a folder.",
    "not_creatable": "This folder does not exist and cannot be created here.",
    "not_writable": "This folder is not writable: downloads could not be saved in it.",
}


def check_models_folder(text: str) -> FolderCheck:
    """Is ``text`` a folder that exists or can be created, and is writable? Plus its free space.

    Why probe with a real file instead of ``os.access``: ``os.access`` says yes for root and on some
    network/read-only mounts where a write then fails; a download must not discover that at 90%.
    """
    import os
    import shutil
    import tempfile

    def bad(reason: str, exists: bool = False) -> FolderCheck:
        return FolderCheck(reason, FOLDER_PROBLEMS[reason], exists)

    text = text.strip()
    if not text:
        return bad("empty")
    path = Path(text).expanduser()
    if not path.is_absolute():
        return bad("relative")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            return bad("not_creatable")
        existing = existing.parent
    if not existing.is_dir():
        return bad("not_dir" if existing == path else "not_creatable", exists=existing == path)
    try:
        fd, probe = tempfile.mkstemp(prefix=".ternary-write-test-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError:
        return bad("not_writable" if existing == path else "not_creatable", exists=existing == path)
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        free = 0
    return FolderCheck("", "", exists=existing == path, free_bytes=free)


def current_models_dir() -> Path:
    """Where the hub stores models now (the user's folder from hub_settings.json, or the default)."""
    from runtime.hub.paths import HubPaths

    return HubPaths.resolve().models_dir


def default_models_path() -> Path:
    """The models folder used when the user chose none."""
    from runtime.hub.paths import HubPaths

    return HubPaths.resolve().default_models_dir
