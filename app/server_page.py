"""The two network pages of Settings: "Local server" (serve the loaded model over the OpenAI and
Anthropic APIs) and "Remote backends" (chat with a model another machine serves).

Why a module of their own: the settings dialog keeps one file per concern; these pages only show
and edit :class:`app.core.settings_model.ServerSettings` / ``AppSettings.remotes`` and the keys in
the keyring (:mod:`app.core.secrets`). Starting, stopping and listing are the window's
(:meth:`app.main_window.MainWindow.sync_server`, ``refresh_remote_models``).
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.secrets import SERVER_KEY, clear_key, get_key, remote_key_name, set_key
from app.core.settings_model import ServerSettings, check_remote

log = logging.getLogger(__name__)


def _row(*widgets: QWidget, stretch: int = 0) -> QWidget:
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    for i, w in enumerate(widgets):
        lay.addWidget(w, 1 if i == stretch else 0)
    return row


class ServerPage(QWidget):
    """Settings → Local server."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window = window
        form = QFormLayout(self)
        self.enabled = QCheckBox(self.tr("Serve the loaded model to other programs (OpenAI and Anthropic APIs)"))
        self.enabled.setAccessibleName(self.tr("Local server on"))
        form.addRow(self.enabled)
        self.host = QLineEdit()
        self.host.setAccessibleName(self.tr("Server address"))
        self.host.setPlaceholderText("127.0.0.1")
        self.host.setToolTip(self.tr("127.0.0.1: only this computer can connect. Another address (e.g. 0.0.0.0) "
                                     "lets other computers connect and needs an API key."))
        form.addRow(self.tr("Address"), self.host)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setAccessibleName(self.tr("Server port"))
        form.addRow(self.tr("Port"), self.port)
        self.key_status = QLabel()
        self.key_status.setAccessibleName(self.tr("API key status"))
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText(self.tr("type a new key"))
        self.key_edit.setAccessibleName(self.tr("New API key"))
        self.key_save = QPushButton(self.tr("Save"))
        self.key_save.setAccessibleName(self.tr("Save the API key in the keyring"))
        self.key_save.clicked.connect(self.save_key)
        self.key_remove = QPushButton(self.tr("Remove"))
        self.key_remove.setAccessibleName(self.tr("Remove the API key"))
        self.key_remove.clicked.connect(self.remove_key)
        form.addRow(self.tr("API key"), _row(self.key_status, self.key_edit, self.key_save, self.key_remove, stretch=1))
        self.url_edit = QLineEdit()
        self.url_edit.setReadOnly(True)
        self.url_edit.setAccessibleName(self.tr("Server URL"))
        self.copy_button = QPushButton(self.tr("Copy"))
        self.copy_button.setAccessibleName(self.tr("Copy the server URL"))
        self.copy_button.clicked.connect(self.copy_url)
        form.addRow(self.tr("URL"), _row(self.url_edit, self.copy_button))
        self.state = QLabel()
        self.state.setWordWrap(True)
        self.state.setAccessibleName(self.tr("Server state"))
        form.addRow("", self.state)
        self.problem_label = QLabel()
        self.problem_label.setObjectName("inlineError")
        self.problem_label.setWordWrap(True)
        self.problem_label.setVisible(False)
        form.addRow("", self.problem_label)
        note = QLabel(self.tr("Clients use the URL above with /v1 (OpenAI) or /v1/messages (Anthropic). The key is "
                              "kept in the system keyring, never in the settings file. API requests and your own "
                              "chat take turns on the model."))
        note.setWordWrap(True)
        form.addRow("", note)
        self.host.textChanged.connect(self._refresh)
        self.port.valueChanged.connect(self._refresh)
        self.enabled.toggled.connect(self._refresh)

    # -- values ---------------------------------------------------------------------------------
    def load(self, s: ServerSettings) -> None:
        self.enabled.setChecked(s.enabled)
        self.host.setText(s.host)
        self.port.setValue(s.port)
        self._refresh()

    def values(self) -> ServerSettings:
        return ServerSettings(enabled=self.enabled.isChecked(), host=self.host.text().strip() or "127.0.0.1",
                              port=int(self.port.value()))

    def problems(self) -> list[str]:
        s = self.values()
        if s.validate():
            return [self.tr("The address must be a host name or IP address such as 127.0.0.1.")]
        if s.enabled and not s.loopback and get_key(SERVER_KEY) is None:
            return [self.tr("Set an API key first: a server on %1 can be reached from other computers.")
                    .replace("%1", s.host)]
        return []

    def _refresh(self, *_: object) -> None:
        s = self.values()
        self.url_edit.setText(s.url + "/v1")
        self.key_status.setText(self.tr("stored: ••••••••") if get_key(SERVER_KEY) else self.tr("none"))
        server = self.window.server
        if server.running:
            self.state.setText(self.tr("Running at %1, serving %2.").replace("%1", server.url)
                               .replace("%2", server.model_id))
        elif self.window.server_error:
            self.state.setText(self.tr("Not running: %1").replace("%1", self.window.server_error))
        else:
            self.state.setText(self.tr("Not running.") + (" " + self.tr("It starts when a local model is loaded.")
                                                          if s.enabled else ""))
        problems = self.problems()
        self.problem_label.setText(problems[0] if problems else "")
        self.problem_label.setVisible(bool(problems))

    # -- actions --------------------------------------------------------------------------------
    def copy_url(self) -> None:
        QGuiApplication.clipboard().setText(self.url_edit.text())

    def save_key(self) -> None:
        value = self.key_edit.text().strip()
        if not value:
            self.state.setText(self.tr("Type a key first."))
            return
        in_keyring = set_key(SERVER_KEY, value)
        self.key_edit.clear()
        self._refresh()
        self.state.setText(self.tr("API key saved in the system keyring.") if in_keyring else
                           self.tr("No secure keyring is available: the key is kept in memory until the app closes."))
        self._restart_if_running()

    def remove_key(self) -> None:
        clear_key(SERVER_KEY)
        self._refresh()
        self._restart_if_running()

    def _restart_if_running(self) -> None:
        """A running server takes the new key at once (it is restarted with it)."""
        if self.window.server.running:
            self.window.sync_server()
            self._refresh()


class RemotesPage(QWidget):
    """Settings → Remote backends: name, base URL and optional key of each OpenAI-compatible server."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window = window
        self.remotes: dict[str, str] = {}
        lay = QVBoxLayout(self)
        intro = QLabel(self.tr("Chat with a model served by another machine: another Ternary Chat, llama-server, "
                               "vLLM, SGLang, Ollama or any OpenAI-compatible server. Its models appear in the "
                               "model picker."))
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.list = QListWidget()
        self.list.setAccessibleName(self.tr("Remote backends"))
        self.list.currentItemChanged.connect(self._on_selected)
        lay.addWidget(self.list, 1)
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setAccessibleName(self.tr("Remote name"))
        self.name_edit.setPlaceholderText(self.tr("e.g. workstation"))
        self.url_edit = QLineEdit()
        self.url_edit.setAccessibleName(self.tr("Remote address"))
        self.url_edit.setPlaceholderText("http://192.168.1.20:8731")
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setAccessibleName(self.tr("Remote API key"))
        self.key_edit.setPlaceholderText(self.tr("optional; kept in the system keyring"))
        form.addRow(self.tr("Name"), self.name_edit)
        form.addRow(self.tr("Address"), self.url_edit)
        form.addRow(self.tr("API key"), self.key_edit)
        lay.addLayout(form)
        self.add_button = QPushButton(self.tr("Add or update"))
        self.add_button.clicked.connect(self.add_remote)
        self.remove_button = QPushButton(self.tr("Remove"))
        self.remove_button.setAccessibleName(self.tr("Remove the remote"))
        self.remove_button.clicked.connect(self.remove_remote)
        self.refresh_button = QPushButton(self.tr("List models"))
        self.refresh_button.setAccessibleName(self.tr("List the remote's models again"))
        self.refresh_button.clicked.connect(self.refresh_models)
        lay.addWidget(_row(self.add_button, self.remove_button, self.refresh_button, QWidget(), stretch=3))
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setAccessibleName(self.tr("Remote message"))
        lay.addWidget(self.message)
        window.remoteModelsListed.connect(self._on_listed)  # a bound slot: disconnected when the page goes

    def _on_listed(self, _name: str) -> None:
        self._fill()

    def load(self, remotes: dict[str, str]) -> None:
        self.remotes = dict(remotes)
        self._fill()

    def _fill(self) -> None:
        current = self.list.currentItem().data(256) if self.list.currentItem() else None
        self.list.clear()
        listed = self.window.remote_models
        errors = self.window.remote_errors
        for name, url in self.remotes.items():
            if name in errors:
                state = self.tr("error: %1").replace("%1", errors[name])
            elif name in listed:
                state = self.tr("%1 models").replace("%1", str(len(listed[name])))
            else:
                state = self.tr("not listed yet (Apply, then List models)")
            item = QListWidgetItem(f"{name} — {url} — {state}")
            item.setData(256, name)
            self.list.addItem(item)
            if name == current:
                self.list.setCurrentItem(item)

    def _on_selected(self, item: QListWidgetItem | None, _prev: object = None) -> None:
        if item is None:
            return
        name = item.data(256)
        self.name_edit.setText(name)
        self.url_edit.setText(self.remotes.get(name, ""))
        self.key_edit.clear()

    def add_remote(self) -> bool:
        """Add (or change) the remote typed in the fields; its key goes to the keyring now, the rest on Apply."""
        name, url = self.name_edit.text().strip(), self.url_edit.text().strip()
        problem = check_remote(name, url)
        if problem:
            self.message.setText(problem)
            return False
        self.remotes[name] = url
        key = self.key_edit.text().strip()
        if key:
            in_keyring = set_key(remote_key_name(name), key)
            self.key_edit.clear()
            note = "" if in_keyring else " " + self.tr("No secure keyring is available: the key is kept in memory "
                                                       "until the app closes.")
        else:
            note = ""
        self.message.setText(self.tr("%1 added: click Apply or OK to list its models.").replace("%1", name) + note)
        self._fill()
        return True

    def remove_remote(self) -> None:
        item = self.list.currentItem()
        name = item.data(256) if item is not None else self.name_edit.text().strip()
        if name in self.remotes:
            del self.remotes[name]
            clear_key(remote_key_name(name))
            self.message.setText(self.tr("%1 removed.").replace("%1", name))
            self._fill()

    def refresh_models(self) -> None:
        names = [n for n in self.remotes if n in self.window.settings.remotes]
        if names:
            self.window.refresh_remote_models(names)
            self.message.setText(self.tr("Listing the models…"))
        else:
            self.message.setText(self.tr("Click Apply first."))
