"""Convert a .gguf file or Hugging Face folder to our .ternary format, with progress and cancel.

Why a dialog of its own: conversion reads and writes gigabytes; it runs on the thread pool
(:func:`runtime.formats.convert.convert` streams one tensor at a time and leaves no output when
cancelled) while this dialog shows the stage and bytes. The result is added to the model picker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import readable_error
from app.jobs import Job
from runtime.devices import format_bytes


def convert_work(src: str, out: str) -> Callable[[Job], Any]:
    """The work of a conversion :class:`Job`; progress is ``(stage, done, total, detail)``."""

    def work(job: Job) -> Any:
        from runtime.formats.convert import convert

        return convert(src, out, progress=lambda *p: job.report(p), cancel=job.cancel_event.is_set)
    return work


class ConvertDialog(QDialog):
    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.window = window
        self.job: Job | None = None
        self.result: Any = None
        self.error = ""
        self.setWindowTitle(self.tr("Convert to .ternary"))
        self.setAccessibleName(self.tr("Convert a model"))
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.src_edit = QLineEdit()
        self.src_edit.setAccessibleName(self.tr("Model to convert"))
        self.src_edit.textChanged.connect(self._suggest_output)
        src_row = QHBoxLayout()
        src_row.addWidget(self.src_edit, 1)
        self.pick_file = QPushButton(self.tr("File…"))
        self.pick_file.setAccessibleName(self.tr("Choose a .gguf file"))
        self.pick_file.clicked.connect(self._choose_file)
        self.pick_folder = QPushButton(self.tr("Folder…"))
        self.pick_folder.setAccessibleName(self.tr("Choose a Hugging Face folder"))
        self.pick_folder.clicked.connect(self._choose_folder)
        src_row.addWidget(self.pick_file)
        src_row.addWidget(self.pick_folder)
        form.addRow(self.tr("Source"), src_row)
        self.out_edit = QLineEdit()
        self.out_edit.setAccessibleName(self.tr("Output .ternary file"))
        form.addRow(self.tr("Output"), self.out_edit)
        lay.addLayout(form)
        self.progress = QProgressBar()
        self.progress.setAccessibleName(self.tr("Conversion progress"))
        self.progress.setRange(0, 1000)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setAccessibleName(self.tr("Conversion status"))
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        self.buttons = QDialogButtonBox()
        self.start_button = self.buttons.addButton(self.tr("Convert"), QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setAccessibleName(self.tr("Start converting"))
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel_or_close)
        lay.addWidget(self.buttons)

    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Choose a model file"), str(Path.home()),
                                              self.tr("GGUF models (*.gguf)"))
        if path:
            self.src_edit.setText(path)

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, self.tr("Choose a Hugging Face folder"), str(Path.home()))
        if path:
            self.src_edit.setText(path)

    def _suggest_output(self, text: str) -> None:
        from app.core.paths import default_models_dir

        if text.strip():
            name = Path(text.strip()).name
            stem = name[: -len(".gguf")] if name.endswith(".gguf") else name
            self.out_edit.setText(str(default_models_dir() / "converted" / f"{stem}.ternary"))

    def start(self) -> None:
        src, out = self.src_edit.text().strip(), self.out_edit.text().strip()
        if not src or not Path(src).exists():
            self.status.setText(self.tr("Choose an existing .gguf file or Hugging Face folder."))
            return
        if not out.endswith(".ternary"):
            self.status.setText(self.tr("The output must be a file name ending in .ternary."))
            return
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        self.job = Job(convert_work(src, out), self)
        self.job.progress.connect(self._on_progress)
        self.job.finished.connect(self._on_done)
        self.job.failed.connect(self._on_failed)
        self.job.cancelled.connect(self._on_cancelled)
        self.start_button.setEnabled(False)
        self.status.setText(self.tr("Starting…"))
        self.job.start()

    def _on_progress(self, report: tuple[str, int, int, str]) -> None:
        stage, done, total, detail = report
        self.progress.setValue(int(1000 * done / total) if total else 0)
        what = self.tr("Checking the source (sha256)") if stage == "hash" else self.tr("Converting")
        self.status.setText(f"{what}: {format_bytes(done)} / {format_bytes(total)} · {detail}")

    def _on_done(self, result: Any) -> None:
        self.job = None
        self.result = result
        self.progress.setValue(1000)
        err = getattr(result, "max_quantization_error", 0.0)
        self.status.setText(self.tr("Done: %1 (%2, %3 tensors, %4 s). Weights unchanged (max error %5).")
                            .replace("%1", str(result.output)).replace("%2", format_bytes(result.output_bytes))
                            .replace("%3", str(result.tensors)).replace("%4", f"{result.seconds:.1f}")
                            .replace("%5", f"{err:g}"))
        out = str(Path(result.output).resolve())
        if self.window is not None and out not in self.window.settings.local_models:
            self.window.settings.local_models.append(out)
            self.window.save_settings()
            self.window.refresh_models()
        self.cancel_button.setText(self.tr("Close"))
        self.start_button.setEnabled(True)

    def _on_failed(self, exc: BaseException) -> None:
        self.job = None
        self.error = message = readable_error(exc)
        self.status.setText(self.tr("Conversion failed: %1").replace("%1", message))
        self.start_button.setEnabled(True)

    def _on_cancelled(self) -> None:
        self.job = None
        self.status.setText(self.tr("Conversion cancelled; no output file was left behind."))
        self.progress.setValue(0)
        self.start_button.setEnabled(True)

    def cancel_or_close(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText(self.tr("Cancelling…"))
        else:
            self.reject()
