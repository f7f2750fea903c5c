"""The catalog of models we support (``resources/catalog.json``) plus the user's own additions.

Why a data file: names, repos, sizes and sha256 pins change with upstream releases and must be
editable without touching code; the GUI's model manager and ``ternary models`` read the same list.
Only pins from our research notes are in it (``sha256_source`` says where each came from); files
without a pin get their expected sha256 from the hub's metadata at download time. ModelScope
entries are marked ``verified: false`` until someone confirms the mirror exists.

The memory columns (``packed_bytes``, ``min_vram_bytes``, ``min_ram_bytes``) are not stored: they
are computed at load time by :func:`memory_requirements`, which calls :mod:`runtime.planner` (the
arithmetic ``ternary plan`` and the engine use), so the catalog can never disagree with the planner.

User additions (any Hugging Face or ModelScope repo + file, or a local file) live in
``<config dir>/user_catalog.json`` (atomic writes).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime import flags
from runtime.atomic import read_json, write_json_atomic
from runtime.hub.paths import HubPaths

RESOURCES_ENV = "TERNARY_CHAT_RESOURCES"
SCHEMA = 1
# Context the "minimum memory" columns assume: enough for a real chat turn, far below the maximum.
MIN_CONTEXT = 4096
# quant name -> (group size, canonical encoding) of the in-memory representation.
QUANT_LAYOUTS = {"PQ2_0": (128, "t2"), "Q2_0": (128, "t2"), "Q2_0_g64": (64, "t2"), "PTQ1_0": (128, "t3")}
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
ROLES = ("chat", "embedding")
# Beyond the weights (see embedding_memory). CPU: a random model of Qwen3-Embedding-0.6B's shapes
# peaked at 2.76-2.91 GB RSS for 2.38 GB of fp32 weights (Python, torch and a 512-token pass
# included). GPU: the CUDA context (~0.5 GB) plus a 512-token pass, an estimate.
EMBEDDING_GPU_OVERHEAD = 768 << 20
EMBEDDING_CPU_OVERHEAD = 768 << 20


def resources_dir() -> Path:
    """``$TERNARY_CHAT_RESOURCES``, else ``resources/`` of a source checkout, else the installed copy.

    pyproject installs ``resources/catalog.json`` as data-files under
    ``<sys.prefix>/share/ternary-chat/resources``; an editable install keeps using the checkout.
    """
    candidates = []
    if flags.value(RESOURCES_ENV):
        candidates.append(Path(flags.value(RESOURCES_ENV)))
    candidates.append(Path(__file__).resolve().parents[2] / "resources")
    for prefix in (sys.prefix, sys.base_prefix):
        candidates.append(Path(prefix) / "share" / "ternary-chat" / "resources")
    for c in candidates:
        if (c / "catalog.json").is_file():
            return c
    raise FileNotFoundError("resources/catalog.json not found (looked in: " + ", ".join(map(str, candidates)) + ")")


@dataclass
class CatalogFile:
    """One downloadable file of a model (one quantization variant)."""

    variant: str
    file: str
    format: str
    quant: str | None = None
    default: bool = False
    legacy: bool = False
    size: int | None = None  # exact bytes when known (pinned); else None
    approx_size: int | None = None  # for display and the disk pre-check until the hub says
    size_source: str | None = None
    sha256: str | None = None
    sha256_source: str | None = None
    modelscope_file: str | None = None  # when the ModelScope name differs
    packed_bytes: int | None = None
    min_vram_bytes: int | None = None
    min_ram_bytes: int | None = None
    note: str = ""

    @property
    def ms_file(self) -> str:
        return self.modelscope_file or self.file


@dataclass
class HubRepo:
    repo: str
    revision: str
    verified: bool = True
    note: str = ""


@dataclass
class CatalogModel:
    id: str
    name: str
    architecture: str
    context_length: int
    files: list[CatalogFile]
    generation: str = ""
    shape_config: str | None = None
    parameters: int | None = None
    thinking: bool = False
    rotation: str | None = None
    sampling: dict[str, float] = field(default_factory=dict)
    description: str = ""
    huggingface: HubRepo | None = None
    modelscope: HubRepo | None = None
    local_path: str | None = None  # user addition pointing at a file on disk
    user: bool = False
    role: str = "chat"  # "chat" or "embedding" (document search; never loaded as a chat model)

    @property
    def is_embedding(self) -> bool:
        return self.role == "embedding"

    def default_file(self) -> CatalogFile:
        for f in self.files:
            if f.default:
                return f
        return self.files[0]

    def file_named(self, key: str) -> CatalogFile | None:
        """Match by variant (case-insensitive) or exact file name."""
        for f in self.files:
            if key == f.file or key == f.ms_file or key.lower() == f.variant.lower():
                return f
        return None


def _model_from_dict(d: dict[str, Any], user: bool = False) -> CatalogModel:
    d = dict(d)
    files = [CatalogFile(**f) for f in d.pop("files")]
    hf = HubRepo(**d.pop("huggingface")) if d.get("huggingface") else d.pop("huggingface", None)
    ms = HubRepo(**d.pop("modelscope")) if d.get("modelscope") else d.pop("modelscope", None)
    for f in files:
        if f.sha256 is not None and not _SHA256_RE.match(f.sha256):
            raise ValueError(f"catalog: {d.get('id')}/{f.file}: sha256 must be 64 lowercase hex digits")
    if d.get("role", "chat") not in ROLES:
        raise ValueError(f"catalog: {d.get('id')}: role must be one of {', '.join(ROLES)}, got {d.get('role')!r}")
    return CatalogModel(files=files, huggingface=hf, modelscope=ms, user=user, **d)


def chat_models(models: list[CatalogModel]) -> list[CatalogModel]:
    """The models a chat can load (embedding models serve document search only)."""
    return [m for m in models if getattr(m, "role", "chat") == "chat"]


def embedding_memory(parameters: int, file_bytes: int) -> tuple[int, int, int]:
    """(file bytes, min VRAM, min RAM) of a dense embedding model run by
    :class:`runtime.embedding.EmbeddingModel`: bf16 weights plus the CUDA context on a GPU, fp32
    weights on the CPU, plus the activations of one packed pass of ``PACK_TOKENS`` tokens."""
    return (file_bytes, parameters * 2 + EMBEDDING_GPU_OVERHEAD, parameters * 4 + EMBEDDING_CPU_OVERHEAD)


@functools.lru_cache(maxsize=64)
def memory_requirements(shape_config: str, quant: str | None) -> tuple[int, int, int] | None:
    """(packed weight bytes, min VRAM for a GPU run, min RAM for a CPU run) at MIN_CONTEXT tokens.

    Uses :mod:`runtime.planner` (the same arithmetic ``ternary plan`` and the engine use): GPU =
    the plan's predicted peak including the CUDA context with everything on the card; CPU = the
    host plan's allocation. Returns None when the shape or quant is unknown.
    """
    if quant not in QUANT_LAYOUTS:
        return None
    from runtime.model.config import SYNTHETIC_CONFIGS
    from runtime.planner import ModelSizes, plan_memory

    cfg = SYNTHETIC_CONFIGS.get(shape_config)
    if cfg is None:
        return None
    group, encoding = QUANT_LAYOUTS[quant]
    sizes = ModelSizes.from_config(cfg, group, encoding)
    gpu = plan_memory(sizes, 1 << 50, ctx_cap=MIN_CONTEXT, min_context=MIN_CONTEXT)
    cpu = plan_memory(sizes, None, device="cpu", ctx_cap=MIN_CONTEXT, min_context=MIN_CONTEXT)
    return sizes.total_bytes, gpu.predicted.total, cpu.predicted.allocated


class Catalog:
    """Built-in models plus user additions. ``models`` keeps catalog order, user entries last."""

    def __init__(self, models: list[CatalogModel], paths: HubPaths | None = None) -> None:
        self.models = models
        self.paths = paths

    @classmethod
    def load(cls, paths: HubPaths | None = None, catalog_file: str | os.PathLike[str] | None = None,
             with_memory: bool = True) -> Catalog:
        """Built-in catalog (+ user additions when ``paths`` is given); ``with_memory`` fills the
        planner-derived memory columns (imports torch; the download path skips it)."""
        path = Path(catalog_file) if catalog_file else resources_dir() / "catalog.json"
        raw = read_json(path)
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            raise ValueError(f"{path}: not a schema-{SCHEMA} model catalog")
        models = [_model_from_dict(m) for m in raw["models"]]
        if paths is not None:
            for m in read_json(paths.user_catalog_file, {}).get("models", []):
                try:
                    models.append(_model_from_dict(m, user=True))
                except (TypeError, ValueError, KeyError):
                    continue  # a hand-edited broken entry must not hide the whole catalog
        if with_memory:
            for m in models:
                for f in m.files:
                    req = memory_requirements(m.shape_config, f.quant) if m.shape_config else None
                    if m.is_embedding and m.parameters and (f.size or f.approx_size):
                        req = embedding_memory(m.parameters, f.size or f.approx_size or 0)
                    if req:
                        f.packed_bytes, f.min_vram_bytes, f.min_ram_bytes = req
        return cls(models, paths)

    def get(self, model_id: str) -> CatalogModel | None:
        for m in self.models:
            if m.id.lower() == model_id.lower():
                return m
        return None

    def role_of_file(self, filename: str) -> str:
        """The role of the catalog model a file belongs to ("chat" for files the catalog does not
        list): lets a model list leave embedding models out of the chat models."""
        for m in self.models:
            if any(filename in (f.file, f.ms_file) for f in m.files):
                return m.role
        return "chat"

    def find_repo_file(self, repo: str, filename: str) -> tuple[CatalogModel, CatalogFile] | None:
        """The catalog entry (with its pins) for a repo id + file name on either hub."""
        for m in self.models:
            repos = {r.repo.lower() for r in (m.huggingface, m.modelscope) if r is not None}
            if repo.lower() in repos:
                f = m.file_named(filename)
                if f is not None:
                    return m, f
        return None

    # -- user additions ------------------------------------------------------------------
    def _user_raw(self) -> dict[str, Any]:
        if self.paths is None:
            raise ValueError("user catalog needs HubPaths")
        return read_json(self.paths.user_catalog_file, {}) or {"schema": SCHEMA, "models": []}

    def add_user_model(self, *, model_id: str, file: str, source: str, repo: str | None = None,
                       local_path: str | None = None, sha256: str | None = None, name: str | None = None,
                       architecture: str = "unknown", context_length: int = 0, revision: str | None = None) -> CatalogModel:
        """Add (or replace) a user entry: ``source`` is "hf", "modelscope" or "local"."""
        if source not in ("hf", "modelscope", "local"):
            raise ValueError("source must be hf, modelscope or local")
        if source == "local":
            if not local_path or not Path(local_path).is_file():
                raise ValueError(f"local file not found: {local_path}")
        elif not repo or "/" not in repo:
            raise ValueError(f"repo id must look like owner/name, got {repo!r}")
        if sha256 is not None:
            sha256 = sha256.lower()
            if not _SHA256_RE.match(sha256):
                raise ValueError("sha256 must be 64 hex digits")
        if self.get(model_id) is not None and not self.get(model_id).user:
            raise ValueError(f"{model_id!r} is a built-in catalog id; choose another name")
        from runtime.hub.verify import file_format

        entry: dict[str, Any] = {
            "id": model_id, "name": name or model_id, "architecture": architecture,
            "context_length": context_length, "description": f"added by the user on {time.strftime('%Y-%m-%d')}",
            "files": [{"variant": "file", "file": file, "format": file_format(file) or "other", "default": True,
                       "sha256": sha256, "sha256_source": "user" if sha256 else None}],
        }
        if source == "hf":
            entry["huggingface"] = {"repo": repo, "revision": revision or "main"}
        elif source == "modelscope":
            entry["modelscope"] = {"repo": repo, "revision": revision or "master"}
        else:
            entry["local_path"] = str(Path(local_path).resolve())
        raw = self._user_raw()
        raw["models"] = [m for m in raw.get("models", []) if m.get("id", "").lower() != model_id.lower()] + [entry]
        write_json_atomic(self.paths.user_catalog_file, raw)
        model = _model_from_dict(entry, user=True)
        self.models = [m for m in self.models if not (m.user and m.id.lower() == model_id.lower())] + [model]
        return model

    def remove_user_model(self, model_id: str) -> bool:
        raw = self._user_raw()
        before = len(raw.get("models", []))
        raw["models"] = [m for m in raw.get("models", []) if m.get("id", "").lower() != model_id.lower()]
        if len(raw["models"]) == before:
            return False
        write_json_atomic(self.paths.user_catalog_file, raw)
        self.models = [m for m in self.models if not (m.user and m.id.lower() == model_id.lower())]
        return True
