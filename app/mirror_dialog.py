"""Choose where downloads come from: Hugging Face, a Hugging Face mirror, or ModelScope.

Why a dialog of its own: after a failed download the user needs one obvious way to try
another source without finding the Downloads tab of the settings. The choice is saved in both
places the app keeps it (the app settings and the hub's own settings file, which the
downloader reads), so Retry uses it at once.
"""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

HF_MIRROR = "https://hf-mirror.com"


class MirrorDialog(QDialog):
    """Four choices; ``apply()`` validates and saves. ``window`` is the MainWindow (its settings)."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.window = window
        self.setWindowTitle(self.tr("Use a mirror"))
        self.setAccessibleName(self.tr("Choose where downloads come from"))
        lay = QVBoxLayout(self)
        intro = QLabel(self.tr("Where should models be downloaded from?"))
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.group = QButtonGroup(self)
        self.hf_radio = QRadioButton(self.tr("Hugging Face (huggingface.co)"))
        self.hf_mirror_radio = QRadioButton(self.tr("hf-mirror.com (a public mirror of Hugging Face)"))
        self.modelscope_radio = QRadioButton(self.tr("ModelScope (modelscope.cn)"))
        self.custom_radio = QRadioButton(self.tr("Another Hugging Face mirror:"))
        for b in (self.hf_radio, self.hf_mirror_radio, self.modelscope_radio, self.custom_radio):
            self.group.addButton(b)
            lay.addWidget(b)
        self.custom_edit = QLineEdit()
        self.custom_edit.setAccessibleName(self.tr("Mirror address"))
        self.custom_edit.setPlaceholderText("https://…")
        self.custom_edit.textEdited.connect(lambda _t: self.custom_radio.setChecked(True))
        lay.addWidget(self.custom_edit)
        self.error_label = QLabel()
        self.error_label.setObjectName("inlineError")
        self.error_label.setWordWrap(True)
        self.error_label.setVisible(False)
        lay.addWidget(self.error_label)
        env = os.environ.get("HF_ENDPOINT", "").strip()
        self.env_label = QLabel(self.tr("Note: HF_ENDPOINT is set to %1 in this program's environment; it "
                                        "overrides the Hugging Face choices here.").replace("%1", env))
        self.env_label.setWordWrap(True)
        self.env_label.setVisible(bool(env))
        lay.addWidget(self.env_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        lay.addWidget(buttons)
        self._select_current()

    def _select_current(self) -> None:
        """Check what the downloader will really use (the hub settings file, environment included)."""
        d = self.window.settings.downloads
        source, endpoint = d.source, (d.hf_endpoint or "").strip().rstrip("/")
        try:
            from runtime.hub.settings import HubSettings

            hub = HubSettings.load()
            source, endpoint = hub.source, hub.hf_endpoint
        except (OSError, ValueError):
            pass  # an unreadable hub settings file: the app's own settings say the rest
        if source == "modelscope":
            self.modelscope_radio.setChecked(True)
        elif endpoint in ("", "https://huggingface.co"):
            self.hf_radio.setChecked(True)
        elif endpoint == HF_MIRROR:
            self.hf_mirror_radio.setChecked(True)
        else:
            self.custom_radio.setChecked(True)
            self.custom_edit.setText(endpoint)

    def choice(self) -> tuple[str, str]:
        """(source, Hugging Face endpoint) of the checked option; raises ValueError for a bad address."""
        from runtime.hub.settings import normalize_endpoint

        if self.modelscope_radio.isChecked():
            return "modelscope", self.window.settings.downloads.hf_endpoint
        if self.hf_mirror_radio.isChecked():
            return "hf", HF_MIRROR
        if self.custom_radio.isChecked():
            text = self.custom_edit.text().strip()
            if not text:
                raise ValueError(self.tr("Type the mirror's address, for example https://hf-mirror.com."))
            try:
                return "hf", normalize_endpoint(text)
            except ValueError:
                raise ValueError(self.tr("%1 is not a web address (it must start with https:// or http://).")
                                 .replace("%1", text)) from None
        return "hf", ""

    def chosen_label(self) -> str:
        """The chosen source as the user reads it: a host name."""
        source, endpoint = self.choice()
        if source == "modelscope":
            return "modelscope.cn"
        from urllib.parse import urlsplit

        return urlsplit(endpoint).hostname if endpoint else "huggingface.co"

    def apply(self) -> bool:
        """Validate and save the choice in the app settings and the hub settings; False (with the reason
        shown) when the address is not usable."""
        try:
            source, endpoint = self.choice()
        except ValueError as exc:
            self.error_label.setText(str(exc))
            self.error_label.setVisible(True)
            return False
        d = self.window.settings.downloads
        d.source, d.hf_endpoint = source, endpoint
        self.window.save_settings()
        try:
            from runtime.hub.settings import DEFAULT_HF_ENDPOINT, DEFAULT_MODELSCOPE_ENDPOINT, HubSettings

            HubSettings(source=source, hf_endpoint=endpoint or DEFAULT_HF_ENDPOINT,
                        modelscope_endpoint=d.modelscope_endpoint or DEFAULT_MODELSCOPE_ENDPOINT,
                        models_dir=d.models_dir).save()
        except (OSError, ValueError) as exc:
            self.error_label.setText(self.tr("Could not save the download settings: %1").replace("%1", str(exc)))
            self.error_label.setVisible(True)
            return False
        return True

    def _ok(self) -> None:
        if self.apply():
            self.accept()
