"""Download a model file end to end: pick the hub, check pins, transfer, verify, install or quarantine.

Why one function owns the whole sequence: the guarantee "nothing unverified ever reaches the
model store" is only as strong as the single place that decides. Order of events:

1. resolve the hub's metadata (size, sha256, commit) *before* any byte moves;
2. cross-check against the catalog pin: a disagreement is :class:`HubPinMismatchError`, never a
   warning (a pin exists precisely to catch a replaced upstream file);
3. transfer with resume/retry/cancel (:mod:`runtime.hub.download`), hashing while writing;
4. verify size, sha256 and magic bytes; on failure move the file to quarantine and raise
   :class:`VerificationError` naming every difference;
5. only then ``os.replace`` into the store and write its manifest.

Source "auto" tries Hugging Face first and falls back to ModelScope on network errors, not-found,
5xx and rate limits (not on auth/gating problems, which the user must fix). The partial file is
keyed by the expected sha256, so a transfer interrupted on one hub resumes from the other.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from runtime.hub.catalog import Catalog, CatalogFile, CatalogModel
from runtime.hub.download import Progress, RemoteFile, RetryPolicy, Transfer, TransferResult, url_host
from runtime.hub.errors import (
    NO_ANSWER,
    DownloadCancelledError,
    HubError,
    HubPinMismatchError,
    NetworkError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    VerificationError,
)
from runtime.hub.huggingface import HuggingFaceHub
from runtime.hub.modelscope import ModelScopeHub
from runtime.hub.paths import HubPaths
from runtime.hub.settings import HubSettings
from runtime.hub.store import InstalledFile, ModelStore, repo_slug
from runtime.hub.tokens import TokenStore
from runtime.hub.verify import compare, file_format

log = logging.getLogger("runtime.hub.fetch")
FALLBACK_ERRORS = (NetworkError, NotFoundError, ServerError, RateLimitedError)


@dataclass
class Target:
    """What to download, on which repos, with which pins (from the catalog when it knows the file)."""

    filename: str
    hf_repo: str | None = None
    ms_repo: str | None = None
    ms_filename: str | None = None
    hf_revision: str = "main"
    ms_revision: str = "master"
    pin_sha256: str | None = None
    pin_size: int | None = None
    pin_source: str | None = None
    model: CatalogModel | None = None
    file: CatalogFile | None = None

    @property
    def slug(self) -> str:
        return repo_slug(self.hf_repo or self.ms_repo or "")

    @property
    def label(self) -> str:
        return f"{self.hf_repo or self.ms_repo}/{self.filename}"


def resolve_target(spec: str, catalog: Catalog, file: str | None = None) -> Target:
    """``NAME`` (catalog id, optional ``--file`` variant) or ``owner/repo[:FILE]``."""
    model = catalog.get(spec)
    if model is not None:
        if model.local_path:
            raise NotFoundError(f"{model.id} is a local file ({model.local_path}); nothing to download")
        cfile = model.file_named(file) if file else model.default_file()
        if cfile is None:
            choices = ", ".join(f"{f.variant} ({f.file})" for f in model.files)
            raise NotFoundError(f"{model.id} has no file {file!r}; choose one of: {choices}")
        return _target_for(model, cfile)
    if "/" not in spec:
        ids = ", ".join(m.id for m in catalog.models)
        raise NotFoundError(f"unknown model {spec!r}: use a catalog name ({ids}) or owner/repo:FILE")
    repo, _, fname = spec.partition(":")
    fname = file or fname
    if not fname:
        raise NotFoundError(f"which file of {repo}? use {repo}:FILE or --file FILE")
    repo_slug(repo)  # validates the shape
    hit = catalog.find_repo_file(repo, fname)
    if hit is not None:
        return _target_for(*hit)
    return Target(filename=fname, hf_repo=repo, ms_repo=repo)


def _target_for(model: CatalogModel, cfile: CatalogFile) -> Target:
    return Target(
        filename=cfile.file, ms_filename=cfile.ms_file,
        hf_repo=model.huggingface.repo if model.huggingface else None,
        ms_repo=model.modelscope.repo if model.modelscope else None,
        hf_revision=model.huggingface.revision if model.huggingface else "main",
        ms_revision=model.modelscope.revision if model.modelscope else "master",
        pin_sha256=cfile.sha256, pin_size=cfile.size, pin_source=cfile.sha256_source, model=model, file=cfile)


@dataclass
class FetchResult:
    installed: InstalledFile
    source: str
    already_installed: bool = False
    resumed_from: int = 0
    notes: list[str] = field(default_factory=list)


class ModelFetcher:
    def __init__(self, paths: HubPaths | None = None, settings: HubSettings | None = None,
                 tokens: TokenStore | None = None, retry: RetryPolicy | None = None,
                 session: requests.Session | None = None, stall_timeout_s: float = 30.0,
                 metadata_timeout_s: float = 60.0) -> None:
        self.paths = paths or HubPaths.resolve()
        self.settings = settings or HubSettings.load(self.paths)
        self.tokens = tokens or TokenStore()
        self.store = ModelStore(self.paths)
        self.retry = retry
        self.session = session
        self.stall_timeout_s = stall_timeout_s
        self.metadata_timeout_s = metadata_timeout_s

    def _hub(self, source: str):
        if source == "hf":
            return HuggingFaceHub(self.settings.hf_endpoint, self.tokens.get("huggingface"))
        return ModelScopeHub(self.settings.modelscope_endpoint, self.tokens.get("modelscope"), session=self.session)

    def _sources(self, target: Target, source: str) -> list[str]:
        if source == "hf":
            if not target.hf_repo:
                raise NotFoundError(f"{target.label}: no Hugging Face repo known for this model")
            return ["hf"]
        if source == "modelscope":
            if not target.ms_repo:
                raise NotFoundError(f"{target.label}: no ModelScope repo known for this model")
            return ["modelscope"]
        return [s for s, repo in (("hf", target.hf_repo), ("modelscope", target.ms_repo)) if repo]

    def _check_pin(self, target: Target, remote: RemoteFile) -> None:
        if target.pin_sha256 and remote.sha256 and remote.sha256.lower() != target.pin_sha256.lower():
            raise HubPinMismatchError(
                f"{target.label}: the hub ({remote.source}) says sha256 {remote.sha256.lower()} but the catalog pins "
                f"{target.pin_sha256.lower()} ({target.pin_source or 'catalog'}); the upstream file changed or the "
                "mirror serves something else. Not downloading.")
        if target.pin_size is not None and remote.size is not None and remote.size != target.pin_size:
            raise HubPinMismatchError(
                f"{target.label}: the hub ({remote.source}) says {remote.size} bytes but the catalog pins "
                f"{target.pin_size} bytes; not downloading.")

    def fetch(self, target: Target, *, source: str | None = None, cancel: threading.Event | None = None,
              progress: Callable[[Progress], None] | None = None,
              notice: Callable[[str], None] | None = None) -> FetchResult:
        cancel = cancel or threading.Event()
        source = source or self.settings.source
        say = notice or (lambda msg: None)

        existing = self.store.find(target.slug, target.filename)
        if existing is not None and existing.loadable and target.pin_sha256 and existing.sha256 == target.pin_sha256.lower():
            return FetchResult(existing, existing.record.get("source", "?"), already_installed=True)

        notes: list[str] = []
        sources = self._sources(target, source)
        last_error: HubError | None = None
        failures: list[tuple[str, HubError]] = []
        for i, src in enumerate(sources):
            if cancel.is_set():
                raise DownloadCancelledError(f"{target.label}: cancelled")
            repo = target.hf_repo if src == "hf" else target.ms_repo
            filename = target.filename if src == "hf" else (target.ms_filename or target.filename)
            revision = target.hf_revision if src == "hf" else target.ms_revision
            try:
                hub = self._hub(src)
                remote = _interruptible(functools.partial(hub.resolve, repo, filename, revision), cancel,
                                        self.metadata_timeout_s, f"{_hub_name(src)} metadata for {target.label}",
                                        url_host(hub.endpoint))
                self._check_pin(target, remote)
                if existing is not None and existing.loadable and remote.sha256 and existing.sha256 == remote.sha256:
                    return FetchResult(existing, existing.record.get("source", src), already_installed=True, notes=notes)
                if not remote.sha256 and target.pin_sha256:
                    remote.sha256 = target.pin_sha256.lower()
                if remote.size is None and target.pin_size is not None:
                    remote.size = target.pin_size
                return self._transfer_and_install(target, remote, cancel, progress, notes)
            except FALLBACK_ERRORS as exc:
                last_error = exc
                if i + 1 < len(sources):
                    failures.append((src, exc))
                    msg = f"{_hub_name(src)} failed ({exc}); trying {_hub_name(sources[i + 1])}"
                    log.warning("%s", msg)
                    notes.append(msg)
                    say(msg)
                    continue
                if i == 0:
                    raise
                # every hub failed: say what happened on each, keep the last error's class and facts
                failures.append((src, exc))
                combined = type(exc)(" / ".join(f"{_hub_name(s)}: {e}" for s, e in failures))
                for key, value in {**exc.details(), **({"retry_after": exc.retry_after}
                                                       if isinstance(exc, RateLimitedError) else {})}.items():
                    setattr(combined, key, value)
                combined.attempts = [(_hub_name(s), e) for s, e in failures]
                raise combined from None
        assert last_error is not None
        raise last_error

    def _transfer_and_install(self, target: Target, remote: RemoteFile, cancel: threading.Event,
                              progress: Callable[[Progress], None] | None, notes: list[str]) -> FetchResult:
        kwargs = {}
        if self.retry is not None:
            kwargs["retry"] = self.retry
        if self.session is not None:
            kwargs["session"] = self.session
        transfer = Transfer(remote, self.paths.partial_dir, stall_timeout_s=self.stall_timeout_s, **kwargs)
        return transfer.run(cancel, progress, functools.partial(self._verify_and_install, target, remote, transfer,
                                                                progress, notes))

    def _verify_and_install(self, target: Target, remote: RemoteFile, transfer: Transfer,
                            progress: Callable[[Progress], None] | None, notes: list[str],
                            result: TransferResult) -> FetchResult:
        """Runs while the partial's lock is held: verify, then install or quarantine."""
        if progress:
            progress(Progress(result.size, remote.size, 0.0, None, "verifying"))
        report = compare(result.path, actual_size=result.size, actual_sha256=result.sha256,
                         expected_size=remote.size, expected_sha256=remote.sha256,
                         fmt=file_format(target.filename))
        record = {
            "source": remote.source, "repo": remote.repo, "revision": remote.revision, "url": remote.url,
            "expected_sha256_from": _sha_origin(target, remote), "catalog_id": target.model.id if target.model else None,
            "variant": target.file.variant if target.file else None, "downloaded_at": time.time(),
            "sha256_checked": bool(remote.sha256),
        }
        if not report.ok:
            log.warning("%s from %s failed verification: %s", target.label, remote.source, "; ".join(report.problems))
            transfer.discard_sidecar()
            qpath = self.store.quarantine(result.path, target.filename, report.problems, record)
            raise VerificationError(
                f"{target.label} from {_hub_name(remote.source)} failed verification: " + "; ".join(report.problems)
                + f". The file was moved to quarantine ({qpath}) and will not be loaded.", str(qpath))
        installed = self.store.install(result.path, target.slug, target.filename, size=result.size,
                                       sha256=result.sha256, record=record)
        transfer.discard_sidecar()
        log.info("%s from %s verified (sha256 %s, %d bytes) and installed at %s", target.label, remote.source,
                 result.sha256, result.size, installed.path)
        if not remote.sha256:
            notes.append(f"{_hub_name(remote.source)} published no sha256 for this file; its size and format were "
                         f"checked and its sha256 recorded as {result.sha256}")
        return FetchResult(installed, remote.source, resumed_from=result.resumed_from, notes=notes + result.notes)


def _interruptible(fn: Callable[[], RemoteFile], cancel: threading.Event, timeout_s: float, what: str,
                   host: str | None = None) -> RemoteFile:
    """Run a metadata lookup so that cancel works and a silent server cannot hang us.

    huggingface_hub's shared HTTP client has no timeout (``timeout=None``) and no cancel, and we do
    not change that process-wide setting. The lookup runs in a daemon thread; on cancel or after
    ``timeout_s`` we stop waiting (the thread ends when its socket does; it holds no file or lock).
    """
    box: dict[str, object] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name="hub-metadata").start()
    deadline = time.monotonic() + timeout_s
    while not done.wait(0.05):
        if cancel.is_set():
            raise DownloadCancelledError(f"{what}: cancelled")
        if time.monotonic() > deadline:
            raise NetworkError(f"{what}: no answer within {timeout_s:.0f} s (network or proxy problem)", host=host,
                               reason=NO_ANSWER)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def _hub_name(source: str) -> str:
    return {"hf": "Hugging Face", "modelscope": "ModelScope"}.get(source, source)


def _sha_origin(target: Target, remote: RemoteFile) -> str:
    if target.pin_sha256 and remote.sha256 == target.pin_sha256.lower():
        return "catalog pin (hub agreed or gave none)"
    return "hub metadata" if remote.sha256 else "none (size and magic bytes only)"


def fetch_model(spec: str, *, file: str | None = None, source: str | None = None,
                home: str | None = None, cancel: threading.Event | None = None,
                progress: Callable[[Progress], None] | None = None,
                notice: Callable[[str], None] | None = None) -> FetchResult:
    """One call for the GUI/CLI: resolve ``spec`` against the catalog and fetch it with saved settings."""
    paths = HubPaths.resolve(home)
    target = resolve_target(spec, Catalog.load(paths, with_memory=False), file)
    return ModelFetcher(paths).fetch(target, source=source, cancel=cancel, progress=progress, notice=notice)
