"""The model store: verified model files only, plus a quarantine for files that failed checks.

Why a manifest per file: "installed" must mean "verified". A file enters ``models/`` only by an
atomic ``os.replace`` after its size, sha256 and magic bytes matched, and only then does its
``<file>.verified.json`` manifest (sha256, size, source, repo, revision, provenance) get written.
:meth:`ModelStore.installed` lists manifests whose file still has the recorded size, so a file
someone dropped into the folder by hand, a half-moved file, or anything in ``quarantine/`` is
never offered for loading. Quarantined files keep a ``.reason.json`` saying what differed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from runtime.atomic import read_json, write_json_atomic
from runtime.hub.paths import HubPaths

MANIFEST_SUFFIX = ".verified.json"
REASON_SUFFIX = ".reason.json"


def repo_slug(repo: str) -> str:
    """Folder name for a repo id: ``prism-ml/X`` -> ``prism-ml--X`` (same on both hubs)."""
    parts = [p for p in repo.strip("/").split("/") if p]
    if len(parts) != 2 or any(p in (".", "..") for p in parts):
        raise ValueError(f"repo id must look like owner/name, got {repo!r}")
    return "--".join(parts)


def safe_relative(filename: str) -> Path:
    """A repo file path as a relative local path; refuses absolute paths and ``..``."""
    p = PurePosixPath(filename.replace("\\", "/"))
    if p.is_absolute() or not p.parts or any(part in ("..", ".", "") for part in p.parts):
        raise ValueError(f"unsafe file name {filename!r}")
    return Path(*p.parts)


@dataclass
class InstalledFile:
    path: Path
    slug: str
    filename: str
    size: int
    sha256: str
    record: dict[str, Any] = field(default_factory=dict)
    state: str = "verified"  # "verified" | "modified" (size changed since install) | "missing"

    @property
    def loadable(self) -> bool:
        return self.state == "verified"


class ModelStore:
    def __init__(self, paths: HubPaths | None = None) -> None:
        self.paths = (paths or HubPaths.resolve()).ensure()

    def path_for(self, slug: str, filename: str) -> Path:
        return self.paths.models_dir / slug / safe_relative(filename)

    @staticmethod
    def manifest_path(file_path: Path) -> Path:
        return file_path.with_name(file_path.name + MANIFEST_SUFFIX)

    def install(self, verified_file: str | os.PathLike[str], slug: str, filename: str, *, size: int, sha256: str,
                record: dict[str, Any]) -> InstalledFile:
        """Atomically move an already-verified file into the store and write its manifest.

        The caller must have verified ``verified_file`` (size/sha256/magic); the store trusts it.
        """
        target = self.path_for(slug, filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        manifest = self.manifest_path(target)
        manifest.unlink(missing_ok=True)  # a crash below leaves "not installed", never a stale manifest
        os.replace(verified_file, target)
        full = dict(record, file=filename, slug=slug, size=size, sha256=sha256.lower(),
                    verified_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        write_json_atomic(manifest, full)
        return InstalledFile(target, slug, filename, size, sha256.lower(), full)

    def quarantine(self, bad_file: str | os.PathLike[str], filename: str, problems: list[str],
                   record: dict[str, Any] | None = None) -> Path:
        """Move a file that failed verification out of the way, with a reason file next to it."""
        self.paths.quarantine_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = safe_relative(filename).name
        target = self.paths.quarantine_dir / f"{stamp}-{os.getpid()}-{base}"
        n = 1
        while target.exists():
            target = self.paths.quarantine_dir / f"{stamp}-{os.getpid()}-{n}-{base}"
            n += 1
        os.replace(bad_file, target)
        write_json_atomic(target.with_name(target.name + REASON_SUFFIX),
                          dict(record or {}, file=filename, problems=problems, quarantined_at=stamp))
        return target

    def installed(self, include_unloadable: bool = False) -> list[InstalledFile]:
        """Files with a manifest; only ``verified`` ones unless ``include_unloadable``."""
        out: list[InstalledFile] = []
        root = self.paths.models_dir
        if not root.is_dir():
            return out
        for manifest in sorted(root.rglob("*" + MANIFEST_SUFFIX)):
            rec = read_json(manifest)
            if not isinstance(rec, dict) or "sha256" not in rec or "size" not in rec:
                continue
            path = manifest.with_name(manifest.name[: -len(MANIFEST_SUFFIX)])
            slug = manifest.relative_to(root).parts[0]
            filename = rec.get("file") or path.name
            if not path.is_file():
                state = "missing"
            elif path.stat().st_size != rec["size"]:
                state = "modified"
            else:
                state = "verified"
            item = InstalledFile(path, slug, filename, int(rec["size"]), rec["sha256"], rec, state)
            if include_unloadable or item.loadable:
                out.append(item)
        return out

    def find(self, slug: str, filename: str) -> InstalledFile | None:
        target = self.path_for(slug, filename)
        for item in self.installed(include_unloadable=True):
            if item.path == target:
                return item
        return None

    def find_by_sha256(self, sha256: str) -> InstalledFile | None:
        for item in self.installed():
            if item.sha256 == sha256.lower():
                return item
        return None

    def quarantined(self) -> list[dict[str, Any]]:
        out = []
        qdir = self.paths.quarantine_dir
        if qdir.is_dir():
            for reason in sorted(qdir.glob("*" + REASON_SUFFIX)):
                rec = read_json(reason, {}) or {}
                rec["path"] = str(reason.with_name(reason.name[: -len(REASON_SUFFIX)]))
                out.append(rec)
        return out

    def partial_downloads(self) -> list[dict[str, Any]]:
        """Interrupted downloads that the next attempt will resume (sidecar fields + bytes so far)."""
        out = []
        pdir = self.paths.partial_dir
        if pdir.is_dir():
            for sidecar in sorted(pdir.glob("*.part.json")):
                rec = read_json(sidecar, {}) or {}
                part = sidecar.with_name(sidecar.name[: -len(".json")])
                rec["bytes"] = part.stat().st_size if part.exists() else 0
                rec["partial"] = str(part)
                rec["in_progress"] = sidecar.with_name(sidecar.name[: -len(".part.json")] + ".lock").exists()
                out.append(rec)
        return out

    def discard_partial(self, partial: str | os.PathLike[str]) -> None:
        """Delete an interrupted download (its next attempt starts from zero)."""
        p = Path(partial)
        if p.parent != self.paths.partial_dir or not p.name.endswith(".part"):
            raise ValueError(f"not a partial download: {p}")
        if p.with_name(p.name[: -len(".part")] + ".lock").exists():
            raise ValueError(f"{p.name} is being downloaded right now")
        p.unlink(missing_ok=True)
        p.with_name(p.name + ".json").unlink(missing_ok=True)

    def remove(self, item: InstalledFile) -> None:
        self.manifest_path(item.path).unlink(missing_ok=True)
        item.path.unlink(missing_ok=True)
