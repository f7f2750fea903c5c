"""First-run page: what this computer has, which model we recommend, one click to get chatting.

Shown in place of the chat while no model is loaded and no conversation is open. Hardware
detection imports torch, so it runs on the thread pool; the page fills in when it is done.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gauges import format_bytes
from app.model_fit import FITS_GPU, Hardware, recommend


class WelcomePage(QWidget):
    def __init__(self, window: Any) -> None:
        super().__init__()
        self.window = window
        self.setObjectName("welcomePage")
        self.hardware: Hardware | None = None
        self.recommendation: tuple[Any, Any] | None = None
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
        for w in (self.title, self.subtitle, self.hardware_label, self.recommend_label):
            lay.addWidget(w)
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
            from app.main_window import run_in_background

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

            models = Catalog.load().models
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
        if self.recommendation is None:
            return
        from app.model_manager import ModelManagerDialog
        from runtime.hub.fetch import resolve_target

        m, f = self.recommendation
        dlg = ModelManagerDialog(self.window, hardware=self.hardware)
        dlg.select_key((m.id, f.file))
        job = dlg.start_download(resolve_target(m.id, dlg.catalog, f.file), (m.id, f.file))
        job.signals.done.connect(lambda result: dlg.use_selected())
        dlg.exec()
        self.window.refresh_models()


def _fits_gpu(f: Any, hw: Hardware) -> bool:
    from app.model_fit import fit

    return fit(f, hw) == FITS_GPU
