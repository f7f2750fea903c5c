"""First-run page: what this computer has, which model we recommend, one click to get chatting.

Shown in place of the chat while no model is loaded and no conversation is open. Hardware
detection imports torch, so it runs on the thread pool; the page fills in when it is done.

When the download fails the page says what failed in the user's words and offers the ways on:
Retry (a partial file resumes), "Use a mirror…" (another hub or a Hugging Face mirror), and
"Import a file you already have".
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.model_fit import FITS_GPU, Hardware, recommend
from app.jobs import run_in_background
from runtime.devices import format_bytes


class WelcomePage(QWidget):
    def __init__(self, window: Any) -> None:
        super().__init__()
        self.window = window
        self.setObjectName("welcomePage")
        self.hardware: Hardware | None = None
        self.recommendation: tuple[Any, Any] | None = None
        self.catalog: Any = None  # runtime.hub.catalog.Catalog, loaded on first refresh (tests set their own)
        self.fetcher_factory: Any = None  # () -> ModelFetcher; None = the hub's saved settings
        self.download_dialog: Any = None  # the model manager showing the running download
        self.mirror_dialog: Any = None
        self.failure: Any = None  # runtime.hub.errors.DownloadFailure of the last failed download
        lay = QVBoxLayout(self)
        lay.setContentsMargins(48, 32, 48, 32)
        lay.addStretch(1)
        self.title = QLabel(self.tr("Welcome to Ternary Chat"))
        self.title.setObjectName("welcomeTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.subtitle = QLabel(self.tr("Private chat with ternary Bonsai models, running entirely on this computer."))
        self.subtitle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.subtitle.setWordWrap(True)
        self.hardware_label = QLabel(self.tr("Checking this computer's hardware…"))
        self.hardware_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hardware_label.setWordWrap(True)
        self.hardware_label.setAccessibleName(self.tr("Detected hardware"))
        self.recommend_label = QLabel()
        self.recommend_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.recommend_label.setWordWrap(True)
        self.recommend_label.setAccessibleName(self.tr("Recommended model"))
        self.start_button = QPushButton(self.tr("Download and start chatting"))
        self.start_button.setObjectName("primaryButton")
        self.start_button.setAccessibleName(self.tr("Download the recommended model and start chatting"))
        self.start_button.setEnabled(False)
        self.start_button.clicked.connect(self.download_recommended)
        self.other_button = QPushButton(self.tr("Choose another model or import one…"))
        self.other_button.setAccessibleName(self.tr("Open the model manager"))
        self.other_button.clicked.connect(window.open_model_manager)
        self.installed_label = QLabel()
        self.installed_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.installed_label.setWordWrap(True)
        self.failure_label = QLabel()
        self.failure_label.setObjectName("inlineError")
        self.failure_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.failure_label.setWordWrap(True)
        self.failure_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.failure_label.setAccessibleName(self.tr("Download problem"))
        self.failure_label.setVisible(False)
        self.retry_button = QPushButton(self.tr("Retry"))
        self.retry_button.setObjectName("primaryButton")
        self.retry_button.clicked.connect(self.download_recommended)
        self.mirror_button = QPushButton(self.tr("Use a mirror…"))
        self.mirror_button.setAccessibleName(self.tr("Download from another hub or a mirror"))
        self.mirror_button.clicked.connect(self.choose_mirror)
        self.import_button = QPushButton(self.tr("Import a file you already have…"))
        self.import_button.setAccessibleName(self.tr("Import a model file from this computer"))
        self.import_button.clicked.connect(self.import_file)
        for w in (self.title, self.subtitle, self.hardware_label, self.recommend_label, self.failure_label):
            lay.addWidget(w)
        failed_row = QHBoxLayout()  # shown in place of the download button after a failed download
        failed_row.addStretch(1)
        for b in (self.retry_button, self.mirror_button, self.import_button):
            b.setVisible(False)
            failed_row.addWidget(b)
        failed_row.addStretch(1)
        lay.addLayout(failed_row)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.start_button)
        row.addWidget(self.other_button)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addWidget(self.installed_label)
        lay.addStretch(2)
        self._detect_started = False

    def retranslate(self) -> None:
        """Re-set the texts after a language switch (the hardware line and recommendation included)."""
        self.title.setText(self.tr("Welcome to Ternary Chat"))
        self.subtitle.setText(self.tr("Private chat with ternary Bonsai models, running entirely on this computer."))
        self.hardware_label.setAccessibleName(self.tr("Detected hardware"))
        self.recommend_label.setAccessibleName(self.tr("Recommended model"))
        self.start_button.setText(self.tr("Download and start chatting"))
        self.start_button.setAccessibleName(self.tr("Download the recommended model and start chatting"))
        self.other_button.setText(self.tr("Choose another model or import one…"))
        self.other_button.setAccessibleName(self.tr("Open the model manager"))
        self.failure_label.setAccessibleName(self.tr("Download problem"))
        self.mirror_button.setText(self.tr("Use a mirror…"))
        self.mirror_button.setAccessibleName(self.tr("Download from another hub or a mirror"))
        self.import_button.setText(self.tr("Import a file you already have…"))
        self.import_button.setAccessibleName(self.tr("Import a model file from this computer"))
        if self.failure is not None:
            self.show_failure(self.failure)
        else:
            self.retry_button.setText(self.tr("Retry"))
        if self.hardware is None:
            self.hardware_label.setText(self.tr("Checking this computer's hardware…"))
        else:
            self.set_hardware(self.hardware)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._detect_started:
            self._detect_started = True
            self._task = run_in_background(Hardware.detect, self.set_hardware,
                                           lambda exc: self.set_hardware(Hardware()))

    def set_hardware(self, hw: Hardware) -> None:
        self.hardware = hw
        if hw.gpu_total_bytes:
            self.hardware_label.setText(self.tr("GPU: %1 (%2 free of %3) · RAM: %4 available of %5")
                                        .replace("%1", hw.gpu_name).replace("%2", format_bytes(hw.gpu_free_bytes))
                                        .replace("%3", format_bytes(hw.gpu_total_bytes))
                                        .replace("%4", format_bytes(hw.ram_available_bytes))
                                        .replace("%5", format_bytes(hw.ram_total_bytes)))
        else:
            self.hardware_label.setText(self.tr("No supported GPU found: models run on the CPU (%1) · RAM: %2 available "
                                                "of %3").replace("%1", hw.cpu_name or "CPU")
                                        .replace("%2", format_bytes(hw.ram_available_bytes))
                                        .replace("%3", format_bytes(hw.ram_total_bytes)))
        self.refresh()

    def refresh(self) -> None:
        installed = self.window.available_models() if self.window is not None else []
        if installed:
            self.installed_label.setText(self.tr("%1 model(s) already on this computer: pick one in the model picker "
                                                 "above.").replace("%1", str(len(installed))))
        else:
            self.installed_label.clear()
        if self.hardware is None:
            return
        try:
            from runtime.hub.catalog import Catalog

            if self.catalog is None:
                self.catalog = Catalog.load()
            # embedding models (document search) are never the model to chat with
            models = [m for m in self.catalog.models if getattr(m, "role", "chat") == "chat"]
        except Exception as exc:  # noqa: BLE001
            self.recommend_label.setText(self.tr("The model catalog could not be read: %1").replace("%1", str(exc)))
            return
        self.recommendation = recommend(models, self.hardware)
        if self.recommendation is None:
            self.recommend_label.setText(self.tr("None of the catalog models fits this computer's free memory. "
                                                 "Close other programs or import a smaller model."))
            self.start_button.setEnabled(False)
            return
        m, f = self.recommendation
        where = self.tr("on the GPU") if self.hardware.gpu_total_bytes and _fits_gpu(f, self.hardware) \
            else self.tr("on the CPU")
        self.recommend_label.setText(self.tr("Recommended for this computer: %1 (%2, %3 download), runs %4.")
                                     .replace("%1", m.name).replace("%2", f.variant)
                                     .replace("%3", format_bytes(f.size or f.approx_size)).replace("%4", where))
        self.start_button.setEnabled(True)

    def download_recommended(self) -> None:
        """Download the recommendation in the model manager (progress, pause); a failure comes back here."""
        if self.download_dialog is not None:  # closed while downloading: show its progress again
            self.download_dialog.open()
            return
        if self.recommendation is None:
            return
        from app.model_manager import ModelManagerDialog
        from runtime.hub.errors import explain_failure
        from runtime.hub.fetch import resolve_target

        m, f = self.recommendation
        fetcher = self.fetcher_factory() if self.fetcher_factory is not None else None
        dlg = ModelManagerDialog(self.window, catalog=self.catalog, hardware=self.hardware, fetcher=fetcher)
        try:
            target = resolve_target(m.id, dlg.catalog, f.file)
        except Exception as exc:  # noqa: BLE001 - shown in the user's words
            dlg.deleteLater()
            self.show_failure(explain_failure(exc))
            return
        self.clear_failure()
        dlg.select_key((m.id, f.file))
        dlg.downloadDone.connect(lambda result: dlg.use_selected())
        dlg.downloadFailed.connect(lambda _failure: self._download_failed(dlg))
        dlg.finished.connect(lambda _code: self._download_dialog_closed(dlg))
        dlg.start_download(target, (m.id, f.file))
        self.download_dialog = dlg
        dlg.open()

    def _download_failed(self, dlg: Any) -> None:
        """The page, not the dialog, offers the ways on: close the dialog and say what failed."""
        from runtime.hub.errors import OTHER, DownloadFailure

        self.show_failure(dlg.last_failure or DownloadFailure(OTHER, detail=dlg.last_error))
        self.download_dialog = None
        dlg.reject()

    def _download_dialog_closed(self, dlg: Any) -> None:
        """Closing the dialog does not stop the download: it stays reachable until the download ends."""
        if self.download_dialog is dlg and dlg.job is None:
            self.download_dialog = None
        self.window.refresh_models()

    def show_failure(self, failure: Any) -> None:
        """Replace the download button with what failed and Retry / Use a mirror… / Import a file."""
        from app.model_manager import failure_text

        self.failure = failure
        name = self.recommendation[0].name if self.recommendation is not None else ""
        self.failure_label.setText(self.tr("The download of %1 failed: %2.").replace("%1", name)
                                   .replace("%2", failure_text(failure).rstrip(".")))
        self.failure_label.setVisible(True)
        if failure.resumable:
            self.retry_button.setText(self.tr("Retry (resumes)"))
            self.retry_button.setAccessibleName(self.tr("Retry the download; it continues where it stopped"))
        else:
            self.retry_button.setText(self.tr("Retry"))
            self.retry_button.setAccessibleName(self.tr("Retry the download"))
        self.start_button.setVisible(False)
        for b in (self.retry_button, self.mirror_button, self.import_button):
            b.setVisible(True)
        self.retry_button.setFocus()

    def clear_failure(self) -> None:
        self.failure = None
        self.failure_label.clear()
        self.failure_label.setVisible(False)
        for b in (self.retry_button, self.mirror_button, self.import_button):
            b.setVisible(False)
        self.start_button.setVisible(True)

    def choose_mirror(self) -> None:
        """Pick another hub or a Hugging Face mirror; the choice is saved and Retry uses it."""
        from app.mirror_dialog import MirrorDialog

        dlg = MirrorDialog(self.window, self)
        dlg.accepted.connect(lambda: self._mirror_chosen(dlg))
        self.mirror_dialog = dlg
        dlg.open()

    def _mirror_chosen(self, dlg: Any) -> None:
        if self.failure is not None:
            self.failure_label.setText(self.failure_label.text() + "\n" + self.tr("Downloads now come from %1: "
                                                                                 "press Retry.")
                                       .replace("%1", dlg.chosen_label()))
        self.retry_button.setFocus()

    def import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Import a model file"), "",
                                              self.tr("Models (*.gguf *.ternary)"))
        if path:
            self.window.import_model(path)


def _fits_gpu(f: Any, hw: Hardware) -> bool:
    from app.core.model_fit import fit

    return fit(f, hw) == FITS_GPU
