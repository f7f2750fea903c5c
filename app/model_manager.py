"""Model manager: catalog with size / fit / recommended badge, downloads with progress, pause,
resume and cancel, verification result, import of local files and folders, conversion, delete.

Why the hub does the work: :class:`runtime.hub.fetch.ModelFetcher` owns the whole
download-verify-install sequence (nothing unverified reaches the store); this dialog runs it on
a pool thread and shows its progress callbacks. "Pause" cancels the transfer but keeps the
partial file (the next download resumes with HTTP Range); "Cancel" also deletes the partial file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.confirm import confirm_destructive
from app.core.model_fit import FITS_CPU, FITS_GPU, NO_FIT, Hardware, fit, recommend
from app.errors import readable_error
from app.jobs import Job
from runtime.devices import format_bytes

log = logging.getLogger(__name__)


def format_eta(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "–"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def failure_text(f: Any) -> str:
    """A :class:`runtime.hub.errors.DownloadFailure` in the user's words, translated.

    Why here and not the hub's ``text()``: the hub classifies (kind, host, status, bytes kept);
    the sentences must go through Qt's translation table, which only sees literal strings in app/.
    """
    from runtime.hub import errors as e

    host = f.host or QCoreApplication.translate("ModelManagerDialog", "the download server")
    kept = format_bytes(f.kept_bytes)
    resume = QCoreApplication.translate("ModelManagerDialog", "; %1 kept, Retry resumes").replace("%1", kept) \
        if f.resumable else ""
    if f.kind == e.UNREACHABLE:
        text = QCoreApplication.translate("ModelManagerDialog", "could not reach %1 (no network or blocked)") \
            .replace("%1", host) + resume
    elif f.kind == e.DROPPED and f.resumable:
        text = QCoreApplication.translate("ModelManagerDialog", "the connection to %1 dropped after %2; Retry resumes") \
            .replace("%1", host).replace("%2", kept)
    elif f.kind == e.DROPPED:
        text = QCoreApplication.translate("ModelManagerDialog", "the connection to %1 dropped before any data arrived; "
                                          "Retry starts again").replace("%1", host)
    elif f.kind == e.STALLED:
        text = QCoreApplication.translate("ModelManagerDialog", "the download from %1 stopped sending data") \
            .replace("%1", host) + resume
    elif f.kind == e.NO_ANSWER:
        text = QCoreApplication.translate("ModelManagerDialog", "%1 did not answer (network or proxy problem)") \
            .replace("%1", host) + resume
    elif f.kind == e.OFFLINE:
        text = QCoreApplication.translate("ModelManagerDialog", "downloads are switched off on this computer "
                                          "(HF_HUB_OFFLINE is set)")
    elif f.kind == e.REFUSED:
        if f.status == 401:
            why = QCoreApplication.translate("ModelManagerDialog", "the access token is missing, wrong or expired")
        elif f.status == 403:
            why = QCoreApplication.translate("ModelManagerDialog", "the model may need its licence accepted on the "
                                             "website, or the token lacks read permission")
        else:
            why = QCoreApplication.translate("ModelManagerDialog", "access denied")
        text = QCoreApplication.translate("ModelManagerDialog", "the server refused: %1 (%2)") \
            .replace("%1", f.status_text or host).replace("%2", why)
    elif f.kind == e.NOT_FOUND:
        text = QCoreApplication.translate("ModelManagerDialog", "%1 does not have this file (%2); try a mirror") \
            .replace("%1", host).replace("%2", f.status_text or QCoreApplication.translate("ModelManagerDialog",
                                                                                             "not found"))
    elif f.kind == e.RATE_LIMITED:
        if f.retry_after is not None:
            wait = QCoreApplication.translate("ModelManagerDialog", "try again in %1 s") \
                .replace("%1", f"{f.retry_after:.0f}")
        else:
            wait = QCoreApplication.translate("ModelManagerDialog", "try again later")
        text = QCoreApplication.translate("ModelManagerDialog", "%1 is limiting downloads (%2); %3") \
            .replace("%1", host).replace("%2", f.status_text or "429").replace("%3", wait) + resume
    elif f.kind == e.SERVER:
        text = QCoreApplication.translate("ModelManagerDialog", "%1 had a problem (%2); try again later or use a "
                                          "mirror").replace("%1", host) \
            .replace("%2", f.status_text or QCoreApplication.translate("ModelManagerDialog", "an unexpected answer")) \
            + resume
    else:
        text = f.detail or QCoreApplication.translate("ModelManagerDialog", "an unexpected problem")
    if f.hub:
        text = f"{f.hub}: {text}"
    parts = [text] + [failure_text(other) for other in f.also]
    return ". ".join(part.rstrip(".") for part in parts)


def download_work(target: Any, source: str | None, fetcher: Any) -> Callable[[Job], Any]:
    """The work of a download :class:`Job`: one ``ModelFetcher.fetch``, progress and notices reported."""

    def work(job: Job) -> Any:
        from runtime.hub.fetch import ModelFetcher

        return (fetcher or ModelFetcher()).fetch(target, source=source, cancel=job.cancel_event,
                                                  progress=job.report, notice=job.report)
    return work


def discard_partials(filename: str) -> int:
    """Delete the partial download of ``filename`` (and its sidecar); returns files removed."""
    from runtime.hub.paths import HubPaths

    partial = HubPaths.resolve().partial_dir
    safe = Path(filename).name
    removed = 0
    if partial.is_dir():
        for p in partial.glob(f"{safe}.*"):
            if p.suffix in (".part", ".json") and p.is_file():
                p.unlink(missing_ok=True)
                removed += 1
    return removed


def partial_bytes(filename: str) -> int:
    from runtime.hub.paths import HubPaths

    partial = HubPaths.resolve().partial_dir
    safe = Path(filename).name
    return sum(p.stat().st_size for p in partial.glob(f"{safe}.*.part")) if partial.is_dir() else 0


class ModelManagerDialog(QDialog):
    """Catalog + installed + imported models. ``fetcher``/``catalog``/``hardware`` are injectable."""

    COLUMNS = ("name", "variant", "size", "fit", "status")

    # How a download ended, after the dialog has shown it (GUI thread): a caller connects these before
    # it starts a download, so even one that fails at once is not missed.
    downloadDone = Signal(object)  # FetchResult
    downloadFailed = Signal(object)  # runtime.hub.errors.DownloadFailure, also in ``last_failure``

    def __init__(self, window: Any, catalog: Any = None, hardware: Hardware | None = None,
                 fetcher: Any = None) -> None:
        super().__init__(window)
        self.window = window
        self.setWindowTitle(self.tr("Models"))
        self.setAccessibleName(self.tr("Model manager"))
        self.resize(900, 560)
        self.fetcher = fetcher
        self.job: Job | None = None
        self.job_target: Any = None  # the Target the running job fetches
        self.job_row_key: tuple[str, str] | None = None
        self._discard_after_cancel = False
        self.last_result: Any = None
        self.last_error = ""
        self.last_failure: Any = None  # runtime.hub.errors.DownloadFailure of the last failed download
        self.hardware = hardware
        self.catalog = catalog
        self.catalog_error = ""
        if self.catalog is None:
            try:
                from runtime.hub.catalog import Catalog
                from runtime.hub.paths import HubPaths

                self.catalog = Catalog.load(HubPaths.resolve())
            except Exception as exc:  # noqa: BLE001
                self.catalog_error = readable_error(exc)
                self.catalog = None
        if self.hardware is None:
            try:
                self.hardware = Hardware.detect()
            except Exception as exc:  # noqa: BLE001
                log.warning("hardware detection failed: %s", exc)
                self.hardware = Hardware()
        self._build()
        self.refresh()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        lay = QVBoxLayout(self)
        hw = self.hardware
        if hw.gpu_total_bytes:
            hw_text = self.tr("This computer: %1 with %2 free of %3; RAM %4 available.").replace("%1", hw.gpu_name) \
                .replace("%2", format_bytes(hw.gpu_free_bytes)).replace("%3", format_bytes(hw.gpu_total_bytes)) \
                .replace("%4", format_bytes(hw.ram_available_bytes))
        else:
            hw_text = self.tr("This computer: no supported GPU found; models run on the CPU (%1). RAM %2 available.") \
                .replace("%1", hw.cpu_name or "CPU").replace("%2", format_bytes(hw.ram_available_bytes))
        self.hardware_label = QLabel(hw_text)
        self.hardware_label.setWordWrap(True)
        self.hardware_label.setAccessibleName(self.tr("Detected hardware"))
        lay.addWidget(self.hardware_label)

        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels([self.tr("Model"), self.tr("Variant"), self.tr("Size"),
                                              self.tr("Fits this computer?"), self.tr("Status")])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(self.COLUMNS)):
            self.table.horizontalHeader().setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setAccessibleName(self.tr("Models"))
        self.table.horizontalHeader().setAccessibleName(self.tr("Columns"))
        self.table.verticalHeader().setAccessibleName(self.tr("Rows"))
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _i: self.use_selected())
        lay.addWidget(self.table, 1)

        self.progress = QProgressBar()
        self.progress.setAccessibleName(self.tr("Download progress"))
        self.progress.setVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setAccessibleName(self.tr("Download status"))
        self.progress_label.setWordWrap(True)
        self.result_label = QLabel()
        self.result_label.setObjectName("verificationLabel")
        self.result_label.setWordWrap(True)
        self.result_label.setAccessibleName(self.tr("Verification result"))
        self.result_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.progress)
        lay.addWidget(self.progress_label)
        lay.addWidget(self.result_label)

        row = QHBoxLayout()

        def button(text: str, accessible: str, slot: Any) -> QPushButton:
            b = QPushButton(text)
            b.setAccessibleName(accessible)
            b.clicked.connect(slot)
            row.addWidget(b)
            return b

        self.download_button = button(self.tr("Download"), self.tr("Download the selected model"), self.download_selected)
        self.pause_button = button(self.tr("Pause"), self.tr("Pause the download (keeps what was downloaded)"), self.pause)
        self.resume_button = button(self.tr("Resume"), self.tr("Resume the paused download"), self.download_selected)
        self.cancel_button = button(self.tr("Cancel"), self.tr("Cancel the download and delete the partial file"),
                                    self.cancel)
        self.use_button = button(self.tr("Use"), self.tr("Load the selected model and chat"), self.use_selected)
        self.delete_button = button(self.tr("Delete…"), self.tr("Remove the selected model (asks first, says what "
                                                                "happens to its file)"),
                                    lambda: self.delete_selected(confirm=True))  # clicked(bool) must not fill it
        self.confirm_box: QMessageBox | None = None
        row.addStretch(1)
        self.import_file_button = button(self.tr("Import file…"), self.tr("Import a .gguf or .ternary file"),
                                         self.import_file)
        self.import_folder_button = button(self.tr("Import folder…"), self.tr("Import a Hugging Face model folder"),
                                           self.import_folder)
        self.convert_button = button(self.tr("Convert…"), self.tr("Convert a model to the .ternary format"),
                                     self.convert)
        self.convert_button.setVisible(_converter() is not None)
        lay.addLayout(row)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        if self.catalog_error:
            self.result_label.setText(self.tr("The model catalog could not be read: %1").replace("%1", self.catalog_error))

    # ------------------------------------------------------------------ rows
    def rows(self) -> list[dict[str, Any]]:
        """Catalog files (one row per variant, default first) + installed files not in the catalog + imports."""
        out: list[dict[str, Any]] = []
        installed = {}
        try:
            from runtime.hub.store import ModelStore

            for item in ModelStore().installed(include_unloadable=True):
                installed[item.filename] = item
        except Exception as exc:  # noqa: BLE001
            log.warning("store unreadable: %s", exc)
        # embedding models serve document search only: listed, downloadable, never recommended (the
        # shared rule skips them) or loaded for chat
        rec = recommend(self.catalog.models, self.hardware) if self.catalog else None
        seen = set()
        if self.catalog:
            for m in self.catalog.models:
                if m.local_path:
                    continue
                for f in sorted(m.files, key=lambda f: not f.default):
                    if f.legacy:
                        continue
                    item = installed.get(f.file)
                    seen.add(f.file)
                    embedding = getattr(m, "role", "chat") == "embedding"
                    out.append({"key": (m.id, f.file), "model": m, "file": f, "installed": item,
                                "recommended": rec is not None and rec[0] is m and rec[1] is f,
                                "size": f.size or f.approx_size, "fit": fit(f, self.hardware),
                                "name": m.name, "embedding": embedding,
                                "variant": self.tr("Embedding model (for document search)") if embedding
                                else f.variant})
        for name, item in installed.items():
            if name not in seen:
                out.append({"key": ("store", name), "model": None, "file": None, "installed": item,
                            "recommended": False, "size": item.size, "fit": None, "name": name, "variant": ""})
        for p in self.window.settings.local_models if self.window is not None else []:
            path = Path(p)
            out.append({"key": ("local", p), "model": None, "file": None, "installed": None, "local": p,
                        "recommended": False, "size": _size_of(path), "fit": None, "name": path.name,
                        "variant": self.tr("imported")})
        return out

    def refresh(self) -> None:
        selected = self.selected_key()
        self._rows = self.rows()
        self.table.clearSelection()  # rows move when one goes: select by key below, never by position
        self.table.setRowCount(len(self._rows))
        fit_text = {FITS_GPU: self.tr("Yes, on the GPU"), FITS_CPU: self.tr("On the CPU only (slow)"),
                    NO_FIT: self.tr("No (not enough memory)"), "unknown": self.tr("Unknown"), None: ""}
        for r, row in enumerate(self._rows):
            name = row["name"] + ("  ★ " + self.tr("Recommended") if row["recommended"] else "")
            status = self._status_text(row)
            values = [name, row["variant"], format_bytes(row["size"]) if row["size"] else "–",
                      fit_text.get(row["fit"], ""), status]
            for c, v in enumerate(values):
                it = QTableWidgetItem(v)
                if c == 0 and row["model"] is not None and row["model"].description:
                    it.setToolTip(row["model"].description)
                self.table.setItem(r, c, it)
            if row["key"] == selected:
                self.table.selectRow(r)
        self._update_buttons()

    def _status_text(self, row: dict[str, Any]) -> str:
        if self.job is not None and row["key"] == self.job_row_key:
            return self.tr("Downloading…")
        item = row.get("installed")
        if item is not None:
            if item.state == "verified":
                return self.tr("Installed, verified")
            if item.state == "modified":
                return self.tr("Changed on disk since verification — not loadable")
            return self.tr("File missing")
        if row.get("local"):
            return self.tr("Imported (loaded in place)") if Path(row["local"]).exists() else self.tr("File missing")
        if row["file"] is not None and partial_bytes(row["file"].file):
            return self.tr("Paused at %1").replace("%1", format_bytes(partial_bytes(row["file"].file)))
        return self.tr("Not downloaded")

    def selected_row(self) -> dict[str, Any] | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        i = rows[0].row()
        return self._rows[i] if 0 <= i < len(self._rows) else None

    def selected_key(self) -> tuple[str, str] | None:
        row = self.selected_row() if hasattr(self, "_rows") else None
        return row["key"] if row else None

    def select_key(self, key: tuple[str, str]) -> bool:
        for i, row in enumerate(self._rows):
            if row["key"] == key:
                self.table.selectRow(i)
                return True
        return False

    def _update_buttons(self) -> None:
        row = self.selected_row()
        busy = self.job is not None
        downloadable = row is not None and row["file"] is not None and (
            row["installed"] is None or row["installed"].state != "verified")
        paused = downloadable and partial_bytes(row["file"].file) > 0
        self.download_button.setEnabled(downloadable and not busy and not paused)
        self.resume_button.setEnabled(bool(paused) and not busy)
        self.pause_button.setEnabled(busy)
        self.cancel_button.setEnabled(busy or bool(paused))
        loadable = row is not None and ((row["installed"] is not None and row["installed"].state == "verified")
                                        or (row.get("local") and Path(row["local"]).exists()))
        embedding = row is not None and row.get("embedding", False)
        self.use_button.setEnabled(bool(loadable) and not busy and not embedding)
        self.use_button.setToolTip(self.tr("An embedding model is used by document search, not for chat")
                                   if embedding else self.tr("Load the selected model and chat"))
        self.delete_button.setEnabled(row is not None and (row["installed"] is not None or bool(row.get("local")))
                                      and not (busy and row["key"] == self.job_row_key))

    # ------------------------------------------------------------------ downloads
    def download_selected(self) -> None:
        row = self.selected_row()
        if row is None or row["file"] is None or self.job is not None:
            return
        from runtime.hub.fetch import resolve_target

        try:
            target = resolve_target(row["model"].id, self.catalog, row["file"].file)
        except Exception as exc:  # noqa: BLE001
            self._on_failed(exc)
            return
        self.start_download(target, row["key"])

    def start_download(self, target: Any, key: tuple[str, str] | None = None, source: str | None = None) -> Job:
        """Start fetching ``target``; ``job_target`` keeps what it fetches for the partial-file clean-up."""
        if source is None and self.window is not None:
            source = self.window.settings.downloads.source
        self.job = Job(download_work(target, source, self.fetcher), self)
        self.job_target = target
        self.job_row_key = key
        self.last_result = None
        self.last_error = ""
        self.last_failure = None
        self._discard_after_cancel = False
        self.job.progress.connect(self._on_progress)
        self.job.finished.connect(self._on_done)
        self.job.failed.connect(self._on_failed)
        self.job.cancelled.connect(self._on_cancelled)
        self.progress.setVisible(True)
        self.progress.setRange(0, 0)
        self.progress_label.setText(self.tr("Connecting…"))
        self.result_label.clear()
        self.job.start()
        self.refresh()
        return self.job

    def _on_progress(self, p: Any) -> None:
        if isinstance(p, str):  # a notice from the fetcher ("trying the mirror", ...)
            self.progress_label.setText(p)
            return
        if p.total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * p.done / p.total))
        phase = {"verifying": self.tr("Verifying"), "checking partial": self.tr("Checking the partial file")}.get(
            p.phase, self.tr("Downloading"))
        text = self.tr("%1: %2 of %3 · %4/s · %5 left").replace("%1", phase).replace("%2", format_bytes(p.done)) \
            .replace("%3", format_bytes(p.total) if p.total else "?").replace("%4", format_bytes(p.speed_bps)) \
            .replace("%5", format_eta(p.eta_s))
        self.progress_label.setText(text)

    def _finish_job(self) -> None:
        self.job = None
        self.job_target = None
        self.job_row_key = None
        self.progress.setVisible(False)
        self.refresh()
        if self.window is not None:
            self.window.refresh_models()

    def _on_done(self, result: Any) -> None:
        self.last_result = result
        item = result.installed
        if result.already_installed:
            text = self.tr("Already installed and verified: %1").replace("%1", item.filename)
        else:
            text = self.tr("Downloaded and verified: %1 (%2, sha256 %3…)").replace("%1", item.filename) \
                .replace("%2", format_bytes(item.size)).replace("%3", item.sha256[:16])
        if result.notes:
            text += "\n" + "\n".join(result.notes)
        self.result_label.setProperty("kind", "ok")
        self.result_label.setText(text)
        self.progress_label.clear()
        self._finish_job()
        self.downloadDone.emit(result)

    def _on_failed(self, exc: BaseException) -> None:
        from runtime.hub.errors import explain_failure

        failure = explain_failure(exc)
        self.last_failure = failure
        self.last_error = failure_text(failure)
        kind = type(exc).__name__
        self.result_label.setProperty("kind", "error")
        prefix = self.tr("Verification failed") if kind in ("VerificationError", "HubPinMismatchError") \
            else self.tr("Download failed")
        self.result_label.setText(f"{prefix}: {self.last_error}")
        self.progress_label.clear()
        self._finish_job()
        self.downloadFailed.emit(failure)

    def _on_cancelled(self) -> None:
        filename = self.job_target.filename if self.job_target is not None else ""
        if self._discard_after_cancel and filename:
            discard_partials(filename)
            self.progress_label.setText(self.tr("Download cancelled; the partial file was deleted."))
        else:
            self.progress_label.setText(self.tr("Paused. Resume continues where it stopped."))
        self._finish_job()

    def pause(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.progress_label.setText(self.tr("Pausing…"))

    def cancel(self) -> None:
        if self.job is not None:
            self._discard_after_cancel = True
            self.job.cancel()
            self.progress_label.setText(self.tr("Cancelling…"))
            return
        row = self.selected_row()
        if row is not None and row["file"] is not None:
            discard_partials(row["file"].file)
            self.progress_label.setText(self.tr("The partial download was deleted."))
            self.refresh()

    # ------------------------------------------------------------------ local models
    def use_selected(self) -> None:
        row = self.selected_row()
        if row is None or row.get("embedding"):
            return
        path = str(row["installed"].path) if row["installed"] is not None else row.get("local")
        if path and self.window is not None:
            self.window.refresh_models()
            self.window.load_model(path)
            self.accept()

    def delete_question(self, row: dict[str, Any]) -> tuple[str, str]:
        """(question, confirm-button text): exactly what Delete does to the file, by the model's origin.

        A download lives in the models folder and belongs to the app: Delete deletes the file. An
        import is the user's own file used in place: Delete only forgets it.
        """
        item = row["installed"]
        if item is not None:
            path = Path(item.path)
            if not path.exists():
                return (self.tr("Remove %1 from the list? Its file %2 is already gone.").replace("%1", row["name"])
                        .replace("%2", str(path)), self.tr("Remove from list"))
            text = self.tr("Remove %1 from the list and delete the file (%2)?\n%3").replace("%1", row["name"]) \
                .replace("%2", format_bytes(_size_of(path))).replace("%3", str(path))
            if self.window is not None and self.window.model_path == str(path):
                text += "\n" + self.tr("It is the model in use: it will be unloaded first.")
            return text, self.tr("Delete file")
        return (self.tr("Remove %1 from the list? The file stays at %2.").replace("%1", row["name"])
                .replace("%2", str(row.get("local", ""))), self.tr("Remove from list"))

    def _confirm_delete(self, row: dict[str, Any]) -> bool:
        question, action = self.delete_question(row)
        return confirm_destructive(self, self.tr("Delete model"), question, action)

    def delete_selected(self, confirm: bool = True) -> None:
        row = self.selected_row()
        if row is None:
            return
        if confirm and not self._confirm_delete(row):
            return
        if row["installed"] is not None:
            from runtime.hub.store import ModelStore

            if self.window is not None and self.window.model_path == str(row["installed"].path):
                self.window.host.requestUnload.emit()
                self.window.model_info = {}
                self.window.model_path = ""
                self.window.gauges.set_model(None)
            ModelStore().remove(row["installed"])
        elif row.get("local") and self.window is not None:
            # imported models are used in place: forget them, never delete the user's own file
            self.window.settings.local_models = [p for p in self.window.settings.local_models if p != row["local"]]
            self.window.save_settings()
        self.refresh()
        # no row stays selected: the next row must not become the target of a second click on Delete
        self.table.clearSelection()
        self.table.setCurrentCell(-1, -1)
        self._update_buttons()
        if self.window is not None:
            self.window.refresh_models()
            self.window._update_state()

    def import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Import a model file"), str(Path.home()),
                                              self.tr("Models (*.gguf *.ternary)"))
        if path and self.window.import_model(path):
            self.accept()

    def import_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, self.tr("Import a Hugging Face model folder"), str(Path.home()))
        if path and self.window.import_model(path):
            self.accept()

    def convert(self) -> None:
        from app.convert_dialog import ConvertDialog

        dlg = ConvertDialog(self.window, self)
        dlg.exec()
        self.refresh()


def _converter() -> Any:
    try:
        from runtime.formats import convert
    except ImportError:
        return None
    return getattr(convert, "convert", None)


def _size_of(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0

