"""The main window: conversations sidebar, chat, input, model picker, gauges.

Why it is a thin controller: history, settings, documents and summarization are plain-Python
modules; the engine lives on the worker thread. This class wires them: it saves every message
as it streams (:class:`app.core.history.StreamingMessageSaver`), turns worker signals into widget
updates, and never blocks on the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QSize,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QCursor,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.attachments_bar import AttachmentsBar
from app.chat_knowledge import ChatKnowledge
from app.chat_view import RETURN_PRESSES, ChatView, MessageWidget, PromptEdit
from app.core import documents
from app.core.history import PARTIAL, HistoryStore, StreamingMessageSaver
from app.core.local_server import LocalServer, LocalServerError
from app.core.remote import COUNT_UPPER_BOUND, parse_remote_ref, remote_ref
from app.core.settings_model import AppSettings, generation_settings, model_key
from app.errors import UserError, document_error_text, error_text, readable_error
from app.gauges import GaugePanel, format_seconds
from app.jobs import Job, run_in_background
from app.summary_dialog import SummaryProgressDialog, summary_error_text
from app.worker import WorkerHost, load_engine
from runtime.devices import format_bytes
from runtime.generation import CancelToken

log = logging.getLogger(__name__)

MODEL_SUFFIXES = (".gguf", ".ternary")
GAUGE_IDLE_MS = 1000


def model_name(path: str) -> str:
    """The model's file or folder name (a remote's: "model @ remote"), for conversation records and captions."""
    ref = parse_remote_ref(path)
    if ref is not None:
        return f"{ref.model} @ {ref.name}"
    return Path(path).name or path


class ElidingComboBox(QComboBox):
    """A combo box that ends a text too long for it with "…" (Qt's own just cuts it off)."""

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        opt.currentText = self.fontMetrics().elidedText(opt.currentText, Qt.TextElideMode.ElideRight, field.width())
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)


class PageStack(QStackedWidget):
    """A stack whose minimum size is its current page's: the welcome page's wide button row must
    not make the window's minimum wider while a chat is shown (and the chat's minimum applies
    while the welcome page is shown)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.currentChanged.connect(lambda _i: self.updateGeometry())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        page = self.currentWidget()
        return page.minimumSizeHint().expandedTo(page.minimumSize()) if page is not None else QSize(0, 0)


class MainWindow(QMainWindow):
    """Top-level window. ``settings_path``/``store`` let tests and scripts use isolated files."""

    modelLoaded = Signal(dict)
    modelLoadFailed = Signal(str)  # the message shown to the user
    modelImportRefused = Signal(str)  # an imported file failed its checks; the message shown to the user
    generationFinished = Signal(int)
    dropHandled = Signal()  # a drop on the window was dealt with (its menu answered, the action started)

    def __init__(self, settings: AppSettings | None = None, store: HistoryStore | None = None,
                 loader: Callable[..., Any] = load_engine, settings_path: str | Path | None = None,
                 autoload: bool = True, knowledge_store: Any = None) -> None:
        super().__init__()
        self.settings_path = Path(settings_path) if settings_path else None
        self.settings = settings or AppSettings.load(self.settings_path)
        self.store = store or HistoryStore()
        self._knowledge_store = knowledge_store  # None: the user's, opened by ChatKnowledge
        self.knowledge: ChatKnowledge | None = None
        self.host = WorkerHost(loader, self)
        self.worker = self.host.worker
        self.conversation_id: int | None = None
        self.model_info: dict[str, Any] = {}
        self.model_path = ""
        self.loading = False
        self._pending_document: str | None = None  # a document to summarize once the model loads
        self._sticky_notice = ""  # shown until the user closes it (see show_notice)
        self.importing = ""  # the path whose import check is running
        self._status_before_import = ""
        self._load_cancel: CancelToken | None = None
        self._request_id = 0
        self._cancel: CancelToken | None = None
        self._saver: StreamingMessageSaver | None = None
        self._reply_widget: MessageWidget | None = None
        self._editing_from: int | None = None
        self._t_send = 0.0  # time.perf_counter() of the last Send / Regenerate
        self._closed = False
        self._summary_request = 0
        self._summary_cancel: CancelToken | None = None
        self._summary_dialog: SummaryProgressDialog | None = None
        self._summary_doc: documents.Document | None = None
        self._summary_saver: StreamingMessageSaver | None = None  # the summary's reply, saved as it streams
        self._summary_widget: MessageWidget | None = None
        self._summary_request_message = 0  # id of the "Summarize the document" message
        self._summary_new_conversation = False  # the chat was made for this summary
        self._tasks: list[Job] = []
        self._grounded_question = ""  # the question of the reply being answered from documents
        self._counting_noticed = False  # the loaded remote's "cannot count tokens" line was shown
        self.drop_menu: QMenu | None = None  # the "ask or summarize?" menu while it is open
        self.passage_dialog: Any = None  # the last citation's passage dialog
        self.bases_dialog: Any = None  # the chat's knowledge-base chooser while open
        self.knowledge_dialog: Any = None  # the knowledge-base manager while open
        self.last_error = ""
        self.last_summary: Any = None
        self.server = LocalServer()  # Settings → Local server; serves the loaded local model
        self.server_error = ""  # why the server last failed to start (shown in the settings page too)
        self.remote_models: dict[str, list[str]] = {}  # remote name -> its /v1/models ids (fetched in background)
        self.remote_errors: dict[str, str] = {}  # remote name -> why listing its models failed
        self._autoload = autoload  # a remote last model loads once its remote has listed its models
        try:
            self._build_and_restore(autoload)
        except BaseException:
            self.host.stop()  # a QThread destroyed while running aborts the process: no window, no message
            raise

    def _build_and_restore(self, autoload: bool) -> None:
        """Widgets, then the last conversation and model; a failure here must stop the worker thread first."""
        self.setWindowTitle(self.tr("Ternary Chat"))
        self.setAcceptDrops(True)
        self.resize(1280, 800)
        self._build()
        self.knowledge = ChatKnowledge(self.attachments_bar, self._knowledge_message, self._knowledge_store,
                                       device=self.settings.hardware.device, parent=self)
        self.knowledge.attachmentsChanged.connect(self._chain_attachments_bar)
        self._chain_attachments_bar()
        self._fit_minimums()
        self._connect_worker()
        self._shortcuts()
        self.retranslate()
        if self.knowledge.problem:  # a damaged knowledge store never stops the start: say what was done
            self.show_notice(self.knowledge.problem, sticky=True)
        self.refresh_conversations()
        self.refresh_models()
        self.refresh_remote_models()
        self._gauge_timer = QTimer(self)
        self._gauge_timer.setInterval(GAUGE_IDLE_MS)
        self._gauge_timer.timeout.connect(self._poll_gauges)
        self._gauge_timer.start()
        convs = self.store.conversations()
        if convs:
            self.open_conversation(convs[0].id)
        self._update_state()
        if autoload and self.settings.last_model and Path(self.settings.last_model).exists():
            self.load_model(self.settings.last_model)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.setObjectName("mainSplitter")
        splitter.setChildrenCollapsible(False)  # a dragged handle must not squeeze a column to nothing
        self.setCentralWidget(splitter)
        self.splitter = splitter

        # sidebar
        side = QWidget()
        side.setObjectName("sidebar")
        sl = QVBoxLayout(side)
        sl.setContentsMargins(8, 8, 8, 8)
        self.new_chat_button = QPushButton()
        self.new_chat_button.clicked.connect(self.new_conversation)
        self.search_edit = QLineEdit()
        self.search_edit.setClearButtonEnabled(True)
        self.search_edit.textChanged.connect(self.refresh_conversations)
        self.conversation_list = QListWidget()
        # long titles end in "…" (with the full title in the tooltip) instead of scrolling sideways
        self.conversation_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversation_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversation_list.setUniformItemSizes(True)
        self.conversation_list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.conversation_list.customContextMenuRequested.connect(self._conversation_menu)
        self.conversation_list.currentItemChanged.connect(self._on_conversation_selected)
        self.conversation_list.itemDoubleClicked.connect(lambda _item: self.rename_conversation())
        sl.addWidget(self.new_chat_button)
        sl.addWidget(self.search_edit)
        sl.addWidget(self.conversation_list, 1)
        self.sidebar = side
        splitter.addWidget(side)

        # center
        center = QWidget()
        cl = QVBoxLayout(center)
        cl.setContentsMargins(8, 8, 8, 8)
        top = QHBoxLayout()
        self.model_caption = model_caption = QLabel()
        self.model_combo = ElidingComboBox()
        self.model_combo.currentTextChanged.connect(self.model_combo.setToolTip)  # the full name when elided
        self.model_combo.setMinimumContentsLength(14)
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.activated.connect(self._on_model_chosen)
        model_caption.setBuddy(self.model_combo)
        self.models_button = QPushButton()
        self.models_button.clicked.connect(self.open_model_manager)
        self.settings_button = QPushButton()
        self.settings_button.clicked.connect(self.open_settings)
        top.addWidget(model_caption)
        top.addWidget(self.model_combo, 1)
        top.addWidget(self.models_button)
        top.addWidget(self.settings_button)
        cl.addLayout(top)

        self.banner = QLabel()
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.setVisible(False)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner_close = QToolButton()
        self.banner_close.setText("✕")
        self.banner_close.setVisible(False)
        self.banner_close.clicked.connect(self.close_banner)
        brow = QHBoxLayout()
        brow.addWidget(self.banner, 1)
        brow.addWidget(self.banner_close)
        cl.addLayout(brow)

        self.stack = PageStack()
        from app.welcome import WelcomePage

        self.welcome = WelcomePage(self)
        self.chat_view = ChatView()
        self.chat_view.copyRequested.connect(self.copy_message)
        self.chat_view.editRequested.connect(self.edit_message)
        self.chat_view.regenerateRequested.connect(self.regenerate)
        self.chat_view.sourceRequested.connect(self.open_source)
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(self.chat_view)
        cl.addWidget(self.stack, 1)

        self.attachments_bar = AttachmentsBar()
        self.attachments_bar.chooseBasesRequested.connect(self.choose_knowledge_bases)
        cl.addWidget(self.attachments_bar)

        inp = QHBoxLayout()
        self.attach_button = QToolButton()
        self.attach_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.attach_menu = QMenu(self)
        self.attach_files_action = self.attach_menu.addAction("", self.attach_document)
        self.attach_folder_action = self.attach_menu.addAction("", self.attach_folder)
        self.summarize_action = self.attach_menu.addAction("", self.summarize_document)
        self.attach_button.setMenu(self.attach_menu)
        self.input = PromptEdit()
        self.input.setObjectName("promptEdit")
        self.input.setMaximumHeight(96)
        self.input.setMinimumHeight(56)
        self.input.submitted.connect(self.send)
        self.send_button = QPushButton()
        self.send_button.setObjectName("sendButton")
        self.send_button.clicked.connect(self._send_or_stop)
        inp.addWidget(self.attach_button)
        inp.addWidget(self.input, 1)
        inp.addWidget(self.send_button)
        cl.addLayout(inp)
        splitter.addWidget(center)

        self.gauges = GaugePanel()  # fixed width: streaming numbers never move the chat column
        self.gauges.set_model(None)
        splitter.addWidget(self.gauges)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setStretchFactor(2, 0)
        splitter.setSizes([240, 760, self.gauges.width()])
        self.gauges.setVisible(self.settings.interface.show_performance_panel)

        self.status_label = QLabel(self.tr("No model loaded"))
        self.status_label.setAccessibleName(self.tr("Status"))
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 100)
        self.load_bar.setMaximumWidth(240)
        self.load_bar.setVisible(False)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.load_bar)

        # focus order: sidebar -> model -> chat -> input -> send
        QWidget.setTabOrder(self.new_chat_button, self.search_edit)
        QWidget.setTabOrder(self.search_edit, self.conversation_list)
        QWidget.setTabOrder(self.conversation_list, self.model_combo)
        QWidget.setTabOrder(self.model_combo, self.models_button)
        QWidget.setTabOrder(self.models_button, self.settings_button)
        QWidget.setTabOrder(self.settings_button, self.chat_view)
        QWidget.setTabOrder(self.chat_view, self.attach_button)
        QWidget.setTabOrder(self.attach_button, self.input)
        QWidget.setTabOrder(self.input, self.send_button)
        for button in (self.new_chat_button, self.models_button, self.settings_button, self.attach_button,
                       self.send_button):
            button.installEventFilter(RETURN_PRESSES)  # Enter on a focused button clicks it, as Space does
        self.chat_view.tab_after = self.attach_button  # each message's buttons go between the chat and Attach

    def _shortcuts(self) -> None:
        def action(keys: list[QKeySequence] | QKeySequence, slot: Callable[[], Any]) -> QAction:
            a = QAction(self)
            if isinstance(keys, list):
                a.setShortcuts(keys)
            else:
                a.setShortcut(keys)
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.new_action = action(QKeySequence("Ctrl+N"), self.new_conversation)
        self.search_action = action(QKeySequence("Ctrl+F"), self._focus_search)
        self.settings_action = action(QKeySequence("Ctrl+,"), self.open_settings)
        self.stop_action = action(QKeySequence("Esc"), self.stop)
        self.send_action = action(QKeySequence("Ctrl+Return"), self.send)
        self.models_action = action(QKeySequence("Ctrl+M"), self.open_model_manager)
        self.quit_action = action(QKeySequence("Ctrl+Q"), self.close)

        # Documents menu: attach (ask questions), summarize, and the knowledge bases
        self.documents_menu = self.menuBar().addMenu("")
        self.documents_menu.addAction(self.attach_files_action)
        self.documents_menu.addAction(self.attach_folder_action)
        self.documents_menu.addAction(self.summarize_action)
        self.documents_menu.addSeparator()
        self.knowledge_action = QAction(self)
        self.knowledge_action.setShortcut(QKeySequence("Ctrl+K"))
        self.knowledge_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.knowledge_action.triggered.connect(self.open_knowledge_bases)
        self.documents_menu.addAction(self.knowledge_action)

        # View menu: the Performance panel can be hidden (remembered in the settings)
        self.view_menu = self.menuBar().addMenu("")
        self.panel_action = QAction(self)
        self.panel_action.setCheckable(True)
        self.panel_action.setChecked(self.settings.interface.show_performance_panel)
        self.panel_action.setShortcut(QKeySequence("Ctrl+Shift+P"))
        self.panel_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.panel_action.toggled.connect(self.set_performance_panel_visible)
        self.view_menu.addAction(self.panel_action)

    def set_performance_panel_visible(self, shown: bool) -> None:
        """Show or hide the gauge column and remember the choice for the next start."""
        self.gauges.setVisible(shown)
        if self.panel_action.isChecked() != shown:
            self.panel_action.setChecked(shown)  # toggled again: returns at the next line
        if self.settings.interface.show_performance_panel != shown:
            self.settings.interface.show_performance_panel = shown
            self.save_settings()

    def retranslate(self) -> None:
        """Set every fixed user-visible text through ``tr()``: at start and on each language switch."""
        self.setWindowTitle(self.tr("Ternary Chat"))
        self.new_chat_button.setText(self.tr("New chat"))
        self.new_chat_button.setAccessibleName(self.tr("New chat"))
        self.new_chat_button.setToolTip(self.tr("Start a new conversation (Ctrl+N)"))
        self.search_edit.setPlaceholderText(self.tr("Search conversations (Ctrl+F)"))
        self.search_edit.setAccessibleName(self.tr("Search conversations"))
        self.conversation_list.setAccessibleName(self.tr("Conversations"))
        self.model_caption.setText(self.tr("Model:"))
        self.model_combo.setAccessibleName(self.tr("Model picker"))
        self.models_button.setText(self.tr("Models…"))
        self.models_button.setAccessibleName(self.tr("Open the model manager"))
        self.settings_button.setText(self.tr("Settings…"))
        self.settings_button.setAccessibleName(self.tr("Open settings"))
        self.settings_button.setToolTip(self.tr("Settings (Ctrl+,)"))
        self.banner.setAccessibleName(self.tr("Message"))
        self.banner_close.setAccessibleName(self.tr("Dismiss message"))
        self.attach_button.setText(self.tr("Attach…"))
        self.attach_button.setAccessibleName(self.tr("Attach documents to ask about, or summarize one"))
        self.attach_button.setToolTip(self.tr("Ask questions about documents (.txt, .md, .pdf, .docx, .html, source "
                                              "code) or summarize one; you can also drop files here"))
        self.attach_files_action.setText(self.tr("Ask questions about documents (attach to this chat)…"))
        self.attach_folder_action.setText(self.tr("Ask questions about a folder (attach to this chat)…"))
        self.summarize_action.setText(self.tr("Summarize a document…"))
        self.documents_menu.setTitle(self.tr("&Documents"))
        self.knowledge_action.setText(self.tr("Knowledge bases…"))
        self.knowledge_action.setToolTip(self.tr("Create and update knowledge bases (Ctrl+K)"))
        self.input.setAccessibleName(self.tr("Message input"))
        self.input.setPlaceholderText(self.tr("Type a message. Enter sends, Shift+Enter adds a new line."))
        self.status_label.setAccessibleName(self.tr("Status"))
        self.load_bar.setAccessibleName(self.tr("Model loading progress"))
        for a, text in ((self.new_action, self.tr("New chat")), (self.search_action, self.tr("Search")),
                        (self.settings_action, self.tr("Settings")), (self.stop_action, self.tr("Stop")),
                        (self.send_action, self.tr("Send")), (self.models_action, self.tr("Models")),
                        (self.quit_action, self.tr("Quit"))):
            a.setText(text)
        self.view_menu.setTitle(self.tr("&View"))
        self.panel_action.setText(self.tr("Show performance panel"))
        self.panel_action.setToolTip(self.tr("Show or hide the Performance panel (Ctrl+Shift+P)"))
        if self.model_info and not self.loading and not self.generating:
            self.status_label.setText(self.tr("Ready"))
        elif not self.model_info and not self.loading:
            self.status_label.setText(self.tr("No model loaded"))
        self._update_state()  # send/stop button

    def _fit_minimums(self) -> None:
        """Minimums in text units, so no font or theme makes a column unreadable or a button clip:
        ~20 characters of a conversation title, 8 lines of chat above the composer."""
        fm = self.fontMetrics()
        self.sidebar.setMinimumWidth(fm.averageCharWidth() * 20 + 16)
        self.chat_view.setMinimumHeight(fm.lineSpacing() * 8)

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        """Keep the minimum size even where nothing enforces it (X without a window manager, scripted
        resizes): below it buttons clip and the composer collapses, so grow back to the minimum."""
        super().resizeEvent(event)
        minimum = self.minimumSizeHint().expandedTo(self.minimumSize())
        size = event.size()
        if (size.width() < minimum.width() or size.height() < minimum.height()) and not self.isMaximized():
            QTimer.singleShot(0, lambda: self.resize(self.size().expandedTo(minimum)))

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        self._fit_minimums()  # the style sheet's font is known once the window is polished
        super().showEvent(event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange) and hasattr(self, "sidebar"):
            self._fit_minimums()
        if event.type() == QEvent.Type.LanguageChange and not self._closed:
            self.retranslate()
            # texts made from stored data are composed at display: rebuild them in the new language
            self.refresh_models()
            self.refresh_conversations()
            if self.conversation_id is not None and not self.generating:
                self._restatus_messages()
        super().changeEvent(event)

    def _restatus_messages(self) -> None:
        """Re-write each message's footer (stats, errors) in the current language."""
        stored = {m.id: m for m in self.store.messages(self.conversation_id)}
        for w in self.chat_view.widgets:
            m = stored.get(w.message_id)
            if m is not None:
                w.set_status(self._stats_text(m.stats, interrupted=m.status == PARTIAL))

    def _focus_search(self) -> None:
        self.search_edit.setFocus()
        self.search_edit.selectAll()

    def _connect_worker(self) -> None:
        w = self.worker
        w.loadProgress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.loadFailed.connect(self._on_load_failed)
        w.tokens.connect(self._on_tokens)
        w.notice.connect(self._on_notice)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)
        w.memory.connect(self.gauges.update_memory)
        w.tokenCount.connect(self._on_token_count)
        w.summaryProgress.connect(self._on_summary_progress)
        w.summaryDone.connect(self._on_summary_done)
        w.summaryFailed.connect(self._on_summary_failed)
        w.summaryStep.connect(self._on_summary_step)
        w.summaryTokens.connect(self._on_summary_tokens)
        w.grounded.connect(self._on_grounded)
        w.waiting.connect(self._on_waiting)

    # ------------------------------------------------------------------ banner / state
    def show_error(self, text: str) -> None:
        self.last_error = text
        self.banner.setProperty("kind", "error")
        self._show_banner(text)
        log.info("shown to user: %s", text)

    def show_notice(self, text: str, sticky: bool = False) -> None:
        """A notice in the banner. ``sticky`` ones (what happened to damaged files at start) stay until the
        user closes them: later messages show above them, and clearing those brings them back."""
        if sticky:  # several (the history's and the knowledge store's at start) are all kept
            self._sticky_notice = (self._sticky_notice + "\n\n" + text
                                   if self._sticky_notice and text not in self._sticky_notice else text)
        self.banner.setProperty("kind", "notice")
        self._show_banner(text)

    def _show_banner(self, text: str) -> None:
        if self._sticky_notice and text != self._sticky_notice:
            text = text + "\n\n" + self._sticky_notice
        self.banner.setText(text)
        self.banner.style().unpolish(self.banner)
        self.banner.style().polish(self.banner)
        self.banner.setVisible(True)
        self.banner_close.setVisible(True)
        self.banner.setAccessibleDescription(text)

    def clear_banner(self) -> None:
        """Clear the current message; a sticky notice comes back until the user closes it (✕)."""
        if self._sticky_notice:
            self.banner.setProperty("kind", "notice")
            self._show_banner(self._sticky_notice)
            return
        self.banner.setVisible(False)
        self.banner_close.setVisible(False)

    def close_banner(self) -> None:
        """The user closed the banner: sticky notices too."""
        self._sticky_notice = ""
        self.clear_banner()

    @property
    def generating(self) -> bool:
        return self._cancel is not None

    def _update_state(self) -> None:
        has_model = bool(self.model_info)
        busy = self.generating or self._summary_cancel is not None
        self.send_button.setText(self.tr("Stop") if self.generating else self.tr("Send"))
        self.send_button.setAccessibleName(self.tr("Stop generating") if self.generating else self.tr("Send message"))
        self.send_button.setEnabled(self.generating or (has_model and not busy and not self.loading))
        self.attach_button.setEnabled(not busy)  # attaching needs no model; summarizing does
        self.summarize_action.setEnabled(has_model and not busy and not self.loading)
        self.model_combo.setEnabled(not busy and not self.loading)
        for w in self.chat_view.widgets:
            w.set_actions_enabled(has_model and not busy and not self.loading)
        show_welcome = not has_model and not self.loading and self.conversation_id is None
        self.stack.setCurrentWidget(self.welcome if show_welcome else self.chat_view)
        self.attachments_bar.setVisible(not show_welcome)

    # ------------------------------------------------------------------ conversations
    def refresh_conversations(self) -> None:
        query = self.search_edit.text()
        convs = self.store.search(query) if query.strip() else self.store.conversations()
        self.conversation_list.blockSignals(True)
        self.conversation_list.clear()
        for c in convs:
            title = self.tr("New chat") if is_default_title(c.title) else c.title
            item = QListWidgetItem(title)
            # a 1-pixel width hint makes the row as wide as the list, so the delegate elides the title
            item.setSizeHint(QSize(1, self.conversation_list.fontMetrics().height() + 6))
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setToolTip(title + "\n" + time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated)))
            self.conversation_list.addItem(item)
            if c.id == self.conversation_id:
                self.conversation_list.setCurrentItem(item)
        self.conversation_list.blockSignals(False)

    def _on_conversation_selected(self, item: QListWidgetItem | None, _prev: object = None) -> None:
        if item is None:
            return
        cid = int(item.data(Qt.ItemDataRole.UserRole))
        if cid != self.conversation_id:
            if self.generating:
                self.stop()
            self.open_conversation(cid)

    def open_conversation(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self._editing_from = None
        self.chat_view.clear()
        messages = self.store.messages(conversation_id)
        for m in messages:
            if m.role == "system":
                continue
            w = self.chat_view.add_message(m.id, m.role, m.content, m.thinking)
            w.set_status(self._stats_text(m.stats, interrupted=m.status == PARTIAL))
            if m.sources:
                w.set_sources(m.sources)
        self.gauges.show_conversation_context(_context_fill(messages))
        if self.knowledge is not None:
            self.knowledge.set_conversation(conversation_id)
        for i in range(self.conversation_list.count()):
            it = self.conversation_list.item(i)
            if int(it.data(Qt.ItemDataRole.UserRole)) == conversation_id:
                self.conversation_list.blockSignals(True)
                self.conversation_list.setCurrentItem(it)
                self.conversation_list.blockSignals(False)
        self._update_state()

    def new_conversation(self) -> None:
        if self.generating:
            self.stop()
        # stored without a title: "New chat" is shown in the language in use (refresh_conversations)
        c = self.store.create_conversation("", model=model_name(self.model_path) if self.model_path else "")
        self.search_edit.clear()
        self.refresh_conversations()
        self.open_conversation(c.id)
        self.input.setFocus()

    def _current_item_id(self) -> int | None:
        item = self.conversation_list.currentItem()
        return int(item.data(Qt.ItemDataRole.UserRole)) if item else self.conversation_id

    def rename_conversation(self, conversation_id: int | None = None, title: str | None = None) -> None:
        cid = conversation_id or self._current_item_id()
        if cid is None:
            return
        if title is None:
            conv = self.store.conversation(cid)
            title, ok = QInputDialog.getText(self, self.tr("Rename conversation"), self.tr("Title:"),
                                             text=conv.title if conv and not is_default_title(conv.title)
                                             else self.tr("New chat"))
            if not ok:
                return
        if not title.strip():
            self.show_error(self.tr("A conversation title cannot be empty."))
            return
        self.store.rename_conversation(cid, title)
        self.refresh_conversations()

    def delete_conversation(self, conversation_id: int | None = None, confirm: bool = True) -> None:
        cid = conversation_id or self._current_item_id()
        if cid is None:
            return
        if confirm:
            answer = QMessageBox.question(self, self.tr("Delete conversation"),
                                          self.tr("Delete this conversation? This cannot be undone."))
            if answer != QMessageBox.StandardButton.Yes:
                return
        if cid == self.conversation_id and self.generating:
            self.stop()
        self.store.delete_conversation(cid)
        if self.knowledge is not None:
            self.knowledge.forget(cid)  # its attachments' passages go with it
        if cid == self.conversation_id:
            self.conversation_id = None
            self.chat_view.clear()
            self.gauges.show_conversation_context(0)
        self.refresh_conversations()
        convs = self.store.conversations()
        if self.conversation_id is None and convs:
            self.open_conversation(convs[0].id)
        self._update_state()

    def export_conversation(self, fmt: str, conversation_id: int | None = None, path: str | None = None) -> Path | None:
        cid = conversation_id or self._current_item_id()
        if cid is None:
            return None
        conv = self.store.conversation(cid)
        if path is None:
            suffix = ".md" if fmt == "markdown" else ".json"
            safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in conv.title).strip() or "chat"
            path, _ = QFileDialog.getSaveFileName(self, self.tr("Export conversation"), str(Path.home() / (safe + suffix)),
                                                  self.tr("Markdown (*.md)") if fmt == "markdown" else self.tr("JSON (*.json)"))
            if not path:
                return None
        try:
            out = (self.store.export_markdown if fmt == "markdown" else self.store.export_json)(cid, path)
        except OSError as exc:
            self.show_error(self.tr("Could not export: %1").replace("%1", exc.strerror or str(exc)))
            return None
        self.statusBar().showMessage(self.tr("Exported to %1").replace("%1", str(out)), 5000)
        return out

    def _conversation_menu(self, pos: Any) -> None:
        item = self.conversation_list.itemAt(pos)
        if item is None:
            return
        cid = int(item.data(Qt.ItemDataRole.UserRole))
        menu = QMenu(self)
        menu.addAction(self.tr("Rename…"), lambda: self.rename_conversation(cid))
        menu.addAction(self.tr("Export as Markdown…"), lambda: self.export_conversation("markdown", cid))
        menu.addAction(self.tr("Export as JSON…"), lambda: self.export_conversation("json", cid))
        menu.addSeparator()
        menu.addAction(self.tr("Delete…"), lambda: self.delete_conversation(cid))
        menu.exec(self.conversation_list.mapToGlobal(pos))

    def keyPressEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        if self.conversation_list.hasFocus():
            if event.key() == Qt.Key.Key_F2:
                self.rename_conversation()
                return
            if event.key() == Qt.Key.Key_Delete:
                self.delete_conversation()
                return
        super().keyPressEvent(event)

    # ------------------------------------------------------------------ models
    def available_models(self) -> list[tuple[str, str]]:
        """(label, path) of every model that can be loaded: verified store files and imports."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        try:
            from runtime.hub.catalog import Catalog
            from runtime.hub.store import ModelStore

            catalog = Catalog.load(with_memory=False)
            for item in ModelStore().installed():
                p = str(item.path)
                if catalog.role_of_file(item.filename) == "embedding":
                    continue  # an embedding model serves document search, never the chat
                if p not in seen:
                    seen.add(p)
                    out.append((f"{item.filename}  ({format_bytes(item.size)})", p))
        except Exception as exc:  # noqa: BLE001 - a broken store must not break the window
            log.warning("model store unreadable: %s", exc)
        for p in self.settings.local_models:
            if p not in seen and Path(p).exists():
                seen.add(p)
                out.append((Path(p).name + "  " + self.tr("(imported)"), p))
        for name in self.settings.remotes:
            for model in self.remote_models.get(name, []):
                out.append((f"{model}  " + self.tr("(remote: %1)").replace("%1", name), remote_ref(name, model)))
        return out

    # ------------------------------------------------------------------ remote backends
    remoteModelsListed = Signal(str)  # remote name (its models, or its error, are in remote_models / remote_errors)

    def refresh_remote_models(self, names: list[str] | None = None) -> None:
        """List each remote's models (GET /v1/models) off the GUI thread; the picker updates when they arrive."""
        from app.core.remote import RemoteClient
        from app.core.secrets import get_key, remote_key_name

        for name in names if names is not None else list(self.settings.remotes):
            url = self.settings.remotes.get(name)
            if not url:
                continue
            key = get_key(remote_key_name(name))

            def fetch(url: str = url, key: Any = key) -> list[str]:
                client = RemoteClient(url, key.reveal() if key else None)
                try:
                    return client.list_models()
                finally:
                    client.close()

            task = run_in_background(fetch, lambda models, n=name: self._on_remote_models(n, models, ""),
                                     lambda exc, n=name: self._on_remote_models(n, [], readable_error(exc)))
            self._tasks.append(task)

    def _on_remote_models(self, name: str, models: list[str], error: str) -> None:
        if self._closed:
            return
        self.remote_models[name] = models
        if error:
            self.remote_errors[name] = error
            self.show_error(self.tr("Could not list the models of the remote %1: %2").replace("%1", name)
                            .replace("%2", error))
        else:
            self.remote_errors.pop(name, None)
        self.refresh_models()
        last = parse_remote_ref(self.settings.last_model)
        if self._autoload and last is not None and last.name == name and last.model in models and not self.model_path:
            self.load_model(self.settings.last_model)  # the remote model in use when the app last closed
        self.remoteModelsListed.emit(name)

    def _remote_documents_blocked(self) -> bool:
        """Answers from documents and summaries fit text into the model's context: a remote model whose server
        does not report its context length cannot have them (said here; True = blocked)."""
        if not self.model_info.get("remote") or int(self.model_info.get("context_length") or 0) > 0:
            return False
        self.show_error(self.tr("%1 does not report its context length; questions about documents and summaries "
                                "need it to fit the text. Serve the model with Ternary Chat, vLLM or llama-server, "
                                "or use a local model.").replace("%1", str(self.model_info.get("remote_name"))))
        return True

    def _counting_notice(self) -> str:
        """The first time documents are fitted on a remote that cannot count tokens (only bound them by
        bytes, :func:`app.core.remote.byte_upper_bound`): the line that says so; "" afterwards."""
        if self._counting_noticed or self.model_info.get("token_counting") != COUNT_UPPER_BOUND:
            return ""
        self._counting_noticed = True
        return (self.tr("%1 cannot count tokens; passages are fitted by a safe upper bound.")
                .replace("%1", str(self.model_info.get("remote_name"))))

    # ------------------------------------------------------------------ local API server
    def sync_server(self) -> None:
        """Run the local API server iff it is switched on and a local model is loaded (restarted for a new one)."""
        want = self.settings.server.enabled and bool(self.model_info) and not self.model_info.get("remote") \
            and self.worker.engine is not None
        if not want:
            self.server.stop()
            self._update_server_gauge()
            return
        model_id = Path(self.model_path).stem or model_name(self.model_path)
        try:
            url = self.server.start(self.worker.engine, model_id, self.worker.lock, self.settings.server)
        except LocalServerError as exc:
            self.server_error = str(exc)
            self.settings.server.enabled = False  # the toggle goes back off: it is not running
            self.save_settings()
            self.show_error(self.tr("The local server did not start: %1").replace("%1", str(exc)))
            self._update_server_gauge()
            return
        self.server_error = ""
        self.statusBar().showMessage(self.tr("Local API server at %1").replace("%1", url), 5000)
        self._update_server_gauge()

    def _update_server_gauge(self) -> None:
        self.gauges.set_server(self.server.url, self.server.stats())

    def _on_waiting(self, request_id: int, waiting: bool) -> None:
        if request_id != self._request_id and request_id != self._summary_request:
            return
        if waiting:
            self.status_label.setText(self.tr("Waiting for an API request to finish…"))
            widget = self._live_reply_widget()
            if widget is not None:
                widget.set_status(self.tr("waiting for an API request to finish…"))
        else:
            self.status_label.setText(self.tr("Generating…"))
            widget = self._live_reply_widget()
            if widget is not None:
                widget.set_status(self.tr("generating…"))

    def refresh_models(self) -> None:
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        models = self.available_models()
        if not models:
            self.model_combo.addItem(self.tr("No models yet — open Models… to download or import one"), "")
        for label, path in models:
            self.model_combo.addItem(label, path)
        idx = self.model_combo.findData(self.model_path or self.settings.last_model)
        if idx >= 0:
            self.model_combo.setCurrentIndex(idx)
        self.model_combo.blockSignals(False)
        self.welcome.refresh()

    def _on_model_chosen(self, index: int) -> None:
        path = self.model_combo.itemData(index)
        if path and path != self.model_path:
            self.load_model(path)

    def load_options(self) -> dict[str, Any]:
        ref = parse_remote_ref(self.model_path)
        if ref is not None:
            return {"remote_url": self.settings.remotes.get(ref.name, "")}
        hw = self.settings.hardware
        return {
            "device": hw.device,
            "context_length": hw.context_length or None,
            "max_vram_bytes": hw.vram_cap_bytes,
            "kv_dtype": None if hw.kv_cache_precision == "auto" else hw.kv_cache_precision,
            "offload": hw.offload_policy,
            "decode_activations": hw.decode_precision,
        }

    def load_model(self, path: str) -> None:
        if self.generating:
            self.stop()
        self.server.stop()  # it serves the model being replaced; started again for the new one (sync_server)
        if self._load_cancel is not None:
            self._load_cancel.cancel()
        self.loading = True
        self.model_info = {}
        self.model_path = path
        self._load_cancel = CancelToken()
        self.load_bar.setValue(0)
        self.load_bar.setVisible(True)
        self.status_label.setText(self.tr("Loading %1…").replace("%1", Path(path).name))
        self.gauges.set_model(None)
        self._update_state()
        self.host.requestLoad.emit(path, self.load_options(), self._load_cancel)

    def _on_load_progress(self, stage: str, fraction: float) -> None:
        self.load_bar.setValue(int(100 * fraction))
        self.status_label.setText(self.tr("Loading: %1").replace("%1", stage))

    def _on_loaded(self, info: dict) -> None:
        if info.get("path") != self.model_path:
            return  # an older load finished after a newer one was requested
        self.loading = False
        self._load_cancel = None
        self.model_info = info
        self._counting_noticed = False
        self.load_bar.setVisible(False)
        ctx = info.get("context_length", 0)
        if info.get("remote"):
            self.status_label.setText(self.tr("%1 on the remote %2 (%3)").replace("%1", str(info.get("name")))
                                      .replace("%2", str(info.get("remote_name"))).replace("%3", str(info.get("device"))))
        else:
            self.status_label.setText(self.tr("%1 on %2 · context %3 tokens").replace("%1", str(info.get("name")))
                                      .replace("%2", str(info.get("device"))).replace("%3", str(ctx)))
        self.gauges.set_model(info)
        self.gauges.show_conversation_context(
            _context_fill(self.store.messages(self.conversation_id)) if self.conversation_id is not None else 0)
        changed = self.adopt_name_keyed_sampling()
        if self.settings.last_model != self.model_path:
            self.settings.last_model = self.model_path
            changed = True
        if changed:
            self.save_settings()
        idx = self.model_combo.findData(self.model_path)
        if idx >= 0:
            self.model_combo.setCurrentIndex(idx)
        self.clear_banner()
        self._update_state()
        self.sync_server()
        self.modelLoaded.emit(info)
        pending, self._pending_document = self._pending_document, None
        if pending is not None:
            self.summarize_file(pending)

    def adopt_name_keyed_sampling(self) -> bool:
        """Move overrides an older version stored under the bare file name to this model's path key.

        The first model of that name to be loaded takes them; another file of the same name then
        starts from its own defaults instead of sharing them. True when the settings changed.
        """
        key, legacy = model_key(self.model_path), model_name(self.model_path)
        if not key or legacy == key or legacy not in self.settings.sampling or key in self.settings.sampling:
            return False
        self.settings.sampling[key] = self.settings.sampling.pop(legacy)
        return True

    def _on_load_failed(self, path: str, error: UserError) -> None:
        message = error_text(error)
        if path != self.model_path:
            return  # an older load that was replaced (and cancelled) by a newer one
        self.loading = False
        self._load_cancel = None
        self.model_info = {}
        self.load_bar.setVisible(False)
        self.status_label.setText(self.tr("No model loaded"))
        pending, self._pending_document = self._pending_document, None
        kept = (" " + self.tr("%1 was not summarized.").replace("%1", Path(pending).name)) if pending else ""
        self.show_error(self.tr("Could not load the model: %1").replace("%1", message) + kept)
        self._update_state()
        self.modelLoadFailed.emit(message)

    def import_model(self, path: str) -> bool:
        """Check a local .gguf/.ternary file or HF folder (on the pool), then remember it and load it in place.

        Returns False when refused at once (not a model by name); True when the check started.
        """
        p = Path(path)
        if not (p.is_dir() or p.suffix.lower() in MODEL_SUFFIXES):
            self.show_error(self.tr("%1 is not a model: use a .gguf or .ternary file or a Hugging Face folder.")
                            .replace("%1", p.name))
            return False
        if p.is_dir() and not (p / "config.json").is_file():
            self.show_error(self.tr("The folder %1 has no config.json, so it is not a Hugging Face model folder.")
                            .replace("%1", p.name))
            return False
        resolved = str(p.resolve())
        self.importing = resolved
        self._status_before_import = self.status_label.text()
        self.status_label.setText(self.tr("Checking %1…").replace("%1", p.name))
        from runtime.hub.verify import check_local_model

        task = run_in_background(lambda: check_local_model(resolved),
                                 lambda problems: self._on_import_checked(resolved, problems),
                                 lambda exc: self._on_import_checked(resolved, [readable_error(exc)]))
        self._tasks.append(task)
        return True

    def _on_import_checked(self, resolved: str, problems: list[str]) -> None:
        """Only a file that passed its checks is listed and loaded: a refused one leaves the model in use."""
        if self.importing == resolved:
            self.importing = ""
            self.status_label.setText(self._status_before_import)
        if problems:
            name = Path(resolved).name
            reasons = [p[len(name) + 2:] if p.startswith(name + ": ") else p for p in problems]
            message = self.tr("%1 was not imported: %2").replace("%1", name).replace("%2", "; ".join(reasons))
            if self.model_path:
                message += " " + self.tr("The model in use stays loaded.")
            self.show_error(message)
            self.modelImportRefused.emit(message)
            return
        if resolved not in self.settings.local_models:
            self.settings.local_models.append(resolved)
            self.save_settings()
        self.refresh_models()
        self.load_model(resolved)

    # ------------------------------------------------------------------ chatting
    def sampling(self) -> Any:
        return self.settings.sampling_for(model_key(self.model_path))

    def _send_or_stop(self) -> None:
        if self.generating:
            self.stop()
        else:
            self.send()

    def send(self, text: str | None = None) -> bool:
        self._t_send = time.perf_counter()  # the time to first token counts from here
        text = self.input.toPlainText() if text is None else text
        if not text.strip():
            return False
        if self.generating or self._summary_cancel is not None:
            return False
        if not self.model_info:
            self.show_error(self.tr("Load a model first (Models… or the model picker)."))
            return False
        if self.conversation_id is None:
            c = self.store.create_conversation(_title_from(text), model=model_name(self.model_path))
            self.conversation_id = c.id
        elif self._editing_from is not None:
            self.store.delete_messages_from(self.conversation_id, self._editing_from)
            self.chat_view.remove_from(self._editing_from)
        self._editing_from = None
        conv = self.store.conversation(self.conversation_id)
        if conv and is_default_title(conv.title) and not self.store.messages(self.conversation_id):
            self.store.rename_conversation(self.conversation_id, _title_from(text))
        msg = self.store.add_message(self.conversation_id, "user", text)
        self.chat_view.add_message(msg.id, "user", text)
        self.input.clear()
        self.refresh_conversations()
        self._start_generation()
        return True

    def _history_messages(self) -> list[dict[str, str]]:
        s = self.sampling()
        msgs: list[dict[str, str]] = []
        if s.system_prompt.strip():
            msgs.append({"role": "system", "content": s.system_prompt})
        for m in self.store.messages(self.conversation_id):
            if m.role == "system":
                continue
            if m.role == "assistant" and not m.content.strip():
                continue
            msgs.append({"role": m.role, "content": m.content})
        return msgs

    def _start_generation(self) -> None:
        messages = self._history_messages()
        base_ids = self.knowledge.base_ids(self.conversation_id) if self.knowledge is not None else []
        if base_ids and messages and messages[-1]["role"] == "user":
            if self._remote_documents_blocked():
                return
            self._start_grounded(messages, base_ids)
            return
        reply = self.store.add_message(self.conversation_id, "assistant", "", status=PARTIAL)
        self.store.set_conversation_model(self.conversation_id, model_name(self.model_path))
        self._saver = StreamingMessageSaver(self.store, reply.id)
        self._reply_widget = self.chat_view.add_message(reply.id, "assistant")
        self._reply_widget.set_status(self.tr("generating…"))
        self._request_id = self.host.next_request_id()
        self._cancel = CancelToken()
        self.clear_banner()
        started_at = self._t_send or time.perf_counter()
        self._t_send = 0.0
        self.gauges.generation_started(started_at)
        self._update_state()
        self.host.requestGenerate.emit(self._request_id, messages, generation_settings(self.sampling()), self._cancel,
                                       started_at)

    def _start_grounded(self, messages: list[dict[str, str]], base_ids: list[int]) -> None:
        """Answer the last question from the chat's documents: the worker finds the passages, fits as
        many as the context allows beside the conversation, tells which (``grounded``), then streams
        the reply as usual. The stored question stays the user's text, not the prompt with passages."""
        question = messages[-1]["content"]
        self._grounded_question = question
        reply = self.store.add_message(self.conversation_id, "assistant", "", status=PARTIAL)
        self.store.set_conversation_model(self.conversation_id, model_name(self.model_path))
        self._saver = StreamingMessageSaver(self.store, reply.id)
        self._reply_widget = self.chat_view.add_message(reply.id, "assistant")
        self._reply_widget.set_status(self.tr("searching the documents…"))
        self._request_id = self.host.next_request_id()
        self._cancel = CancelToken()
        self.clear_banner()
        if self.knowledge is not None and self.knowledge.indexing():
            self.show_notice(self.tr("Still indexing: this answer uses the documents indexed so far."))
        started_at = self._t_send or time.perf_counter()
        self._t_send = 0.0
        self.gauges.generation_started(started_at)
        self._update_state()
        sampling = self.sampling()
        ctx = int(self.model_info.get("context_length") or 0)
        # room kept for the answer: the "Max new tokens" setting, else a quarter of the context (≤ 1,024)
        answer_tokens = int(sampling.max_new_tokens or min(1024, ctx // 4))
        self.host.requestGrounded.emit(self._request_id, self.knowledge.retriever(base_ids, question),
                                       messages[:-1], question, generation_settings(sampling), self._cancel,
                                       started_at, answer_tokens)

    def _on_grounded(self, request_id: int, prompt: Any) -> None:
        """The passages are chosen: store them with the reply and show them under it (before it streams)."""
        if request_id != self._request_id or self._saver is None:
            return
        sources = prompt.sources_json(self._grounded_question)
        self.store.update_message(self._saver.message_id, sources=sources)
        widget = self._live_reply_widget()
        if widget is not None:
            widget.set_sources(sources)
            widget.set_status(self.tr("generating…"))
        # the budget's notes are codes with numbers: worded in the interface's language
        note = self.knowledge.budget_note_text(prompt) if self.knowledge is not None else prompt.note
        note = "\n".join(line for line in (self._counting_notice(), note) if line)
        if note:
            self.show_notice(note)

    def open_source(self, message_id: int, index: int) -> None:
        """A citation [n] or a Sources entry was clicked: show its passage (and whether the file changed)."""
        from app.passage_dialog import PassageDialog, resolve_source

        m = self.store.message(message_id)
        if m is None or not 0 <= index < len(m.sources):
            return
        k = self.knowledge
        view = resolve_source(m.sources[index], k.store if k is not None else None,
                              k.store.bases_for_conversation(m.conversation_id) if k is not None else None)
        if self.passage_dialog is not None:
            self.passage_dialog.close()
        dlg = self.passage_dialog = PassageDialog(view, self)
        dlg.finished.connect(lambda _r, d=dlg: self._passage_dialog_closed(d))
        dlg.show()

    def _passage_dialog_closed(self, dlg: Any) -> None:
        if self.passage_dialog is dlg:
            self.passage_dialog = None
        dlg.deleteLater()

    def stop(self) -> None:
        """Esc / Stop: the engine stops within one token; the DoneEvent still arrives."""
        if self._cancel is not None:
            self._cancel.cancel()
            self.status_label.setText(self.tr("Stopping…"))
        if self._summary_cancel is not None:
            self._summary_cancel.cancel()

    def _on_token_count(self, request_id: int, n: int) -> None:
        if request_id == self._request_id:
            self.gauges.set_prompt_tokens(n)

    def _on_tokens(self, request_id: int, batch: list) -> None:
        if request_id != self._request_id or self._saver is None:
            return
        widget = self._live_reply_widget()
        for channel, text in batch:
            self._saver.append(text, channel)
            if widget is not None:
                widget.append(channel, text)
        self.gauges.pieces_received(len(batch))

    def _on_notice(self, request_id: int, message: str) -> None:
        self.show_notice(message)

    def _on_finished(self, request_id: int, result: dict) -> None:
        if request_id != self._request_id or self._saver is None:
            return
        stats = result.get("stats") or {}
        self._saver.finish(result.get("text", self._saver.content), result.get("thinking", self._saver.thinking), stats)
        widget = self._live_reply_widget()
        if widget is not None:
            widget.set_text(self._saver.content, self._saver.thinking)
            widget.set_status(self._stats_text(stats))
        self.gauges.generation_done(stats)
        self._end_generation()
        self.status_label.setText(self.tr("Ready"))
        self.generationFinished.emit(request_id)

    def _on_failed(self, request_id: int, error: UserError) -> None:
        if request_id != self._request_id:
            return
        message = error_text(error)  # stored as a code, translated when shown (also after a language switch)
        if self._saver is not None:
            self._saver.finish(stats={"finish_reason": "error", **error.to_stats()})
            widget = self._live_reply_widget()
            if widget is not None:
                widget.set_status(self.tr("Error: %1").replace("%1", message))
        self.gauges.generation_failed()
        self.show_error(self.tr("Generation failed: %1").replace("%1", message))
        self._end_generation()
        self.generationFinished.emit(request_id)

    def _live_reply_widget(self) -> MessageWidget | None:
        """The streaming reply's widget, unless the user switched conversation meanwhile."""
        w = self._reply_widget
        return w if w is not None and w in self.chat_view.widgets else None

    def _end_generation(self) -> None:
        self._cancel = None
        self._grounded_question = ""
        self._saver = None
        self._reply_widget = None
        self.refresh_conversations()
        self._update_state()

    def _stats_text(self, stats: dict[str, Any], interrupted: bool = False) -> str:
        if interrupted:
            return self.tr("Interrupted (the app closed before this reply finished)")
        if not stats:
            return ""
        if stats.get("finish_reason") == "error":
            return self.tr("Error: %1").replace("%1", error_text(UserError.from_stats(stats)))
        parts = []
        if stats.get("generated_tokens") is not None:
            parts.append(self.tr("%1 tokens").replace("%1", str(stats.get("generated_tokens"))))
        if stats.get("decode_tok_s"):
            parts.append(self.tr("%1 tok/s").replace("%1", f"{float(stats['decode_tok_s']):.1f}"))
        if stats.get("ttft_s"):  # the same figure and format as the First token gauge
            parts.append(self.tr("first token %1").replace("%1", format_seconds(float(stats["ttft_s"]))))
        reason = stats.get("finish_reason")
        if reason == "cancelled":
            parts.append(self.tr("stopped"))
        elif reason == "length":
            parts.append(self.tr("reached the length limit"))
        return " · ".join(parts)

    def copy_message(self, message_id: int) -> None:
        m = self.store.message(message_id)
        if m is not None:
            QGuiApplication.clipboard().setText(m.content)
            self.statusBar().showMessage(self.tr("Copied"), 2000)

    def edit_message(self, message_id: int) -> None:
        if self.generating:
            return
        m = self.store.message(message_id)
        if m is None:
            return
        self._editing_from = message_id
        self.input.setPlainText(m.content)
        self.input.setFocus()
        self.show_notice(self.tr("Editing: sending replaces this message and everything after it."))

    def regenerate(self, message_id: int) -> None:
        if self.generating or not self.model_info or self.conversation_id is None:
            return
        self._t_send = time.perf_counter()
        self.store.delete_messages_from(self.conversation_id, message_id)
        self.chat_view.remove_from(message_id)
        if not any(m.role == "user" for m in self.store.messages(self.conversation_id)):
            return
        self._start_generation()

    # ------------------------------------------------------------------ gauges
    def _poll_gauges(self) -> None:
        if self.model_info and not self.generating and self._summary_cancel is None:
            self.host.requestMemory.emit()
        if self.server.running:
            self._update_server_gauge()

    # ------------------------------------------------------------------ documents
    def attach_document(self) -> None:
        """Attach… > Ask questions about documents: pick files to attach to this chat."""
        paths, _ = QFileDialog.getOpenFileNames(self, self.tr("Attach documents to this chat"), str(Path.home()),
                                                self.tr("Documents and source code (*)"))
        if paths:
            self.attach_paths(paths)

    def attach_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, self.tr("Attach a folder to this chat"), str(Path.home()))
        if path:
            self.attach_paths([path])

    def summarize_document(self) -> None:
        """Attach… > Summarize a document."""
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Summarize a document"), str(Path.home()),
                                              self.tr("Documents (*.txt *.md *.pdf *.docx *.html *.htm)"))
        if path:
            self.summarize_file(path)

    def attach_paths(self, paths: list[str]) -> bool:
        """Attach files or folders to the open chat (a new chat if none) and index them in the background;
        the following questions in this chat are answered from them, with citations."""
        if self.knowledge is None or not paths:
            return False
        if self.conversation_id is None:
            # titled by the (first) file: language-neutral, like a summary's chat
            c = self.store.create_conversation(Path(paths[0]).name, model=model_name(self.model_path))
            self.conversation_id = c.id
            self.refresh_conversations()
            self.open_conversation(c.id)
        else:
            conv = self.store.conversation(self.conversation_id)
            if conv and is_default_title(conv.title) and not self.store.messages(self.conversation_id):
                self.store.rename_conversation(self.conversation_id, Path(paths[0]).name)
                self.refresh_conversations()
        started = self.knowledge.attach(self.conversation_id, [Path(p) for p in paths])
        self._update_state()
        if started:
            self.input.setFocus()
        return started

    def choose_knowledge_bases(self) -> None:
        """The attachments bar's Knowledge bases…: choose which named bases this chat answers from."""
        if self.knowledge is None:
            return
        if self.conversation_id is None:
            self.new_conversation()
        from app.knowledge_dialog import ChooseBasesDialog

        dlg = self.bases_dialog = ChooseBasesDialog(self.knowledge.store, self.conversation_id, self)
        dlg.exec()
        self.bases_dialog = None
        self.knowledge.refresh()

    def open_knowledge_bases(self) -> None:
        """Documents > Knowledge bases…: create, fill, update and delete named knowledge bases."""
        if self.knowledge is None:
            return
        if self.knowledge.runner is None:
            self.show_error(self.tr("Knowledge bases cannot be used in this session: %1")
                            .replace("%1", self.knowledge.problem))
            return
        from app.knowledge_dialog import KnowledgeBasesDialog

        dlg = self.knowledge_dialog = KnowledgeBasesDialog(self.knowledge.store, self.knowledge.runner, self)
        dlg.exec()
        self.knowledge_dialog = None
        self.knowledge.refresh()

    def _knowledge_message(self, text: str, is_error: bool) -> None:
        if is_error:
            self.show_error(text)
        else:
            self.show_notice(text)

    def _chain_attachments_bar(self) -> None:
        """Tab order: Attach, then the bar's × buttons and Knowledge bases…, then the input (the bar's
        widgets are rebuilt whenever the attachments change)."""
        previous: QWidget = self.attach_button
        for widget in self.attachments_bar.focus_chain():
            QWidget.setTabOrder(previous, widget)
            previous = widget
        QWidget.setTabOrder(previous, self.input)

    def summarize_file(self, path: str) -> None:
        if self.loading and not self.model_info:
            # "Open with" at start, or a drop while the model loads: summarize once it is loaded
            self._pending_document = path
            self.show_notice(self.tr("%1 will be summarized as soon as the model is loaded.")
                             .replace("%1", Path(path).name))
            return
        if not self.model_info:
            self.show_error(self.tr("Load a model first (Models… or the model picker)."))
            return
        if self._remote_documents_blocked():
            return
        if self.generating or self._summary_cancel is not None:
            self.show_error(self.tr("Wait for the current reply to finish (or press Esc)."))
            return
        self.status_label.setText(self.tr("Reading %1…").replace("%1", Path(path).name))
        self._summary_cancel = CancelToken()
        self._update_state()
        task = run_in_background(lambda: documents.extract_text(path), self._on_document_read,
                                 self._on_document_error)
        self._tasks.append(task)

    def _on_document_error(self, exc: BaseException) -> None:
        self._summary_cancel = None
        self._update_state()
        self.status_label.setText(self.tr("Ready"))
        if isinstance(exc, documents.DocumentError):
            self.show_error(document_error_text(exc))
        else:
            self.show_error(self.tr("Could not read the document: %1").replace("%1", str(exc)))

    def _on_document_read(self, doc: documents.Document) -> None:
        if self._summary_cancel is None or self._summary_cancel.cancelled:
            self._summary_cancel = None
            self._update_state()
            return
        self._summary_doc = doc
        self._summary_request = self.host.next_request_id()
        self._summary_saver = None
        self._summary_widget = None
        dlg = SummaryProgressDialog(doc.name, self)
        dlg.canceled.connect(self.stop)
        dlg.show()
        self._summary_dialog = dlg
        self.status_label.setText(self.tr("Summarizing %1…").replace("%1", doc.name))
        counting = self._counting_notice()
        if counting:
            self.show_notice(counting)
        # answer_tokens 0: each part's answer budget comes from the context (app.core.summarize.answer_budget),
        # never from the chat's "Max new tokens" (3000 on a 4,096-token context made 36 parts, not 11).
        self.host.requestSummarize.emit(self._summary_request, doc.text, doc.name,
                                        generation_settings(self.sampling()), self._summary_cancel, 0)

    def _summary_reply(self) -> MessageWidget | None:
        """The summary's reply in the chat, made when its first part starts: the request and an
        assistant message that each part streams into, saved as it streams (like a chat reply)."""
        doc = self._summary_doc
        if self._summary_saver is None and doc is not None:
            self._summary_new_conversation = self.conversation_id is None
            # the title is the file's name: language-neutral, so it reads the same after a language switch
            if self.conversation_id is None:
                c = self.store.create_conversation(doc.name, model=model_name(self.model_path))
                self.conversation_id = c.id
            else:
                conv = self.store.conversation(self.conversation_id)
                if conv and is_default_title(conv.title) and not self.store.messages(self.conversation_id):
                    self.store.rename_conversation(self.conversation_id, doc.name)
                    self.refresh_conversations()
            request_text = self.tr("Summarize the document %1").replace("%1", doc.name)
            um = self.store.add_message(self.conversation_id, "user", request_text)
            am = self.store.add_message(self.conversation_id, "assistant", "", status=PARTIAL)
            self._summary_request_message = um.id
            self._summary_saver = StreamingMessageSaver(self.store, am.id)
            self.chat_view.add_message(um.id, "user", request_text)
            self._summary_widget = self.chat_view.add_message(am.id, "assistant")
            self._summary_widget.set_status(self.tr("summarizing…"))
            self.refresh_conversations()
            self._update_state()
        w = self._summary_widget
        return w if w is not None and w in self.chat_view.widgets else None

    def _summary_append(self, text: str) -> None:
        widget = self._summary_reply()
        if self._summary_saver is not None:
            self._summary_saver.append(text)
        if widget is not None:
            widget.append("answer", text)

    def _on_summary_step(self, request_id: int, step: Any) -> None:
        """A generation of the summary starts or ends: a heading in the reply, and the gauges fed
        exactly as for a chat reply (live speed while it streams, the engine's numbers and a chart bar at the end)."""
        if request_id != self._summary_request:
            return
        if step.stats is not None:
            self.gauges.generation_done(step.stats)
            return
        if step.stage == "map" and step.parts > 1:
            heading = self.tr("Part %1 of %2").replace("%1", str(step.part)).replace("%2", str(step.parts))
        elif step.stage == "reduce":
            heading = (self.tr("Combining the partial summaries (step %1 of about %2)")
                       .replace("%1", str(step.step)).replace("%2", str(step.total)))
        else:
            heading = ""
        if heading:
            started = self._summary_saver is not None and self._summary_saver.content
            self._summary_append(("\n\n" if started else "") + f"**{heading}**\n\n")
        else:
            self._summary_reply()
        self.gauges.generation_started()
        self.gauges.set_prompt_tokens(int(step.prompt_tokens))

    def _on_summary_tokens(self, request_id: int, pieces: list) -> None:
        if request_id != self._summary_request:
            return
        self._summary_append("".join(pieces))
        self.gauges.pieces_received(len(pieces))

    def _on_summary_progress(self, request_id: int, p: Any) -> None:
        dlg = self._summary_dialog
        if request_id != self._summary_request or dlg is None:
            return
        dlg.show_progress(p)  # may process events (modal dialog): nothing may follow

    def _close_summary_dialog(self) -> None:
        if self._summary_dialog is not None:
            self._summary_dialog.done_with()
            self._summary_dialog.canceled.disconnect(self.stop)
            self._summary_dialog.close()
            self._summary_dialog.deleteLater()
            self._summary_dialog = None
        self._summary_cancel = None
        self.status_label.setText(self.tr("Ready"))
        self._update_state()

    def _discard_summary_reply(self) -> None:
        """Nothing was finished: take back the request and the empty reply (and a chat made for them)."""
        if self._summary_saver is None:
            return
        reply = self.store.message(self._summary_saver.message_id)
        cid = reply.conversation_id if reply is not None else self.conversation_id
        if cid is not None:
            self.store.delete_messages_from(cid, self._summary_request_message)
        self.chat_view.remove_from(self._summary_request_message)
        if self._summary_new_conversation and cid is not None and not self.store.messages(cid):
            self.store.delete_conversation(cid)
            if self.conversation_id == cid:
                self.conversation_id = None
        self._summary_saver = None
        self._summary_widget = None
        self.refresh_conversations()
        self._update_state()

    def _on_summary_done(self, request_id: int, result: Any) -> None:
        """Finished, cancelled or stopped by an error: what was done is always kept and shown."""
        if request_id != self._summary_request:
            return
        self._close_summary_dialog()
        self.last_summary = result
        coverage = self.coverage_text(result)
        failure = summary_error_text(result.failure) if result.failure is not None else ""
        if result.failure is not None:
            self.gauges.generation_failed()
        if not result.chunk_summaries:
            self._discard_summary_reply()
            if failure:
                self.show_error(self.tr("Summarizing failed: %1").replace("%1", failure))
            else:
                self.show_notice(self.tr("Summarizing was cancelled before any part was done.") + " " + coverage)
            return
        widget = self._summary_reply()
        text = result.summary if result.complete else result.partial_text(
            lambda k, n: self.tr("Part %1 of %2").replace("%1", str(k)).replace("%2", str(n)))
        body = text + "\n\n---\n*" + coverage + "*"
        stats = {"summary_chunks": result.chunks, "summary_chunks_used": result.chunks_used,
                 "summary_complete": result.complete, "document_chars": result.total_chars,
                 "used_chars": result.used_chars}
        if self._summary_saver is not None:
            self._summary_saver.finish(body, "", stats)
        if widget is not None:
            widget.set_text(body, "")
            widget.set_status("")
        self._summary_saver = None
        self._summary_widget = None
        self.refresh_conversations()
        self._update_state()
        if failure:
            self.show_error(self.tr("Summarizing stopped early: %1").replace("%1", failure) + " " + coverage)
        elif result.cancelled:
            self.show_notice(coverage)

    def coverage_text(self, result: Any) -> str:
        """How much of the document the shown text covers, always said (never silently partial)."""
        pct = f"{100 * result.fraction_used:.0f}"
        if result.complete:
            if result.chunks == 1:
                return (self.tr("The whole document was read (%1 tokens, one part).")
                        .replace("%1", str(result.total_tokens)))
            return (self.tr("The whole document was read: %1 tokens in %2 parts, summarized and combined.")
                    .replace("%1", str(result.total_tokens)).replace("%2", str(result.chunks)))
        if result.chunks > 1 and result.chunks_used == result.chunks:
            text = (self.tr("Cancelled while combining: all %1 parts were summarized; the partial summaries "
                            "are shown uncombined.") if result.cancelled else
                    self.tr("Stopped while combining: all %1 parts were summarized; the partial summaries "
                            "are shown uncombined."))
            return text.replace("%1", str(result.chunks))
        text = (self.tr("Cancelled: the summary covers %1 of %2 parts (%3% of the document).") if result.cancelled
                else self.tr("Stopped by an error: the summary covers %1 of %2 parts (%3% of the document)."))
        return text.replace("%1", str(result.chunks_used)).replace("%2", str(result.chunks)).replace("%3", pct)

    def _on_summary_failed(self, request_id: int, error: Any) -> None:
        """The summary could not start (the context is too small, no model): nothing was done."""
        if request_id != self._summary_request:
            return
        self._close_summary_dialog()
        self._discard_summary_reply()
        self.show_error(self.tr("Summarizing failed: %1").replace("%1", summary_error_text(error)))

    # ------------------------------------------------------------------ drag and drop
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            QTimer.singleShot(0, lambda: self.drop_paths(paths))  # the menu opens after the drag has ended

    def drop_paths(self, paths: list[str]) -> None:
        """Files dropped on the window: a model is imported; documents and folders get a menu —
        "Ask questions about it (attach to this chat)" (the default, highlighted) or "Summarize it".

        Called after the drop event has returned: a menu inside ``dropEvent`` would keep the file
        manager that started the drag waiting until it is answered."""
        try:
            self._drop_paths(paths)
        finally:
            self.dropHandled.emit()

    def _drop_paths(self, paths: list[str]) -> None:
        first = Path(paths[0])
        if len(paths) == 1 and (first.suffix.lower() in MODEL_SUFFIXES or (first / "config.json").is_file()):
            self.import_model(paths[0])
            return
        usable = [p for p in paths if Path(p).is_dir() or documents.is_indexable(p)]
        if not usable:
            self.handle_dropped(paths[0])  # the message that says what can be dropped
            return
        single_doc = len(usable) == 1 and Path(usable[0]).is_file() and documents.is_supported(Path(usable[0]))
        menu = self.drop_menu = QMenu(self)
        names = ", ".join(Path(p).name for p in usable[:3]) + ("…" if len(usable) > 3 else "")
        header = menu.addAction(names)
        header.setEnabled(False)
        ask = menu.addAction(self.tr("Ask questions about it (attach to this chat)") if len(usable) == 1 else
                             self.tr("Ask questions about them (attach to this chat)"))
        summarize = menu.addAction(self.tr("Summarize it")) if single_doc else None
        if summarize is not None and not self.model_info and not self.loading:
            summarize.setEnabled(False)
        menu.setDefaultAction(ask)
        menu.setActiveAction(ask)  # Enter picks it
        chosen: list[str] = []
        ask.triggered.connect(lambda: chosen.append("ask"))
        if summarize is not None:
            summarize.triggered.connect(lambda: chosen.append("summarize"))
        menu.exec(QCursor.pos())
        self.drop_menu = None
        menu.deleteLater()
        if chosen == ["ask"]:
            self.attach_paths(usable)
        elif chosen == ["summarize"]:
            self.summarize_file(usable[0])

    def handle_dropped(self, path: str) -> None:
        p = Path(path)
        if p.is_dir() or p.suffix.lower() in MODEL_SUFFIXES:
            self.import_model(path)
        elif documents.is_supported(p):
            self.summarize_file(path)
        else:
            self.show_error(self.tr("%1: drop a document (.txt, .md, .pdf, .docx, .html, source code) or a folder to "
                                    "ask questions about it or summarize it, or a model (.gguf, .ternary, folder) "
                                    "to import it.").replace("%1", p.name))

    # ------------------------------------------------------------------ dialogs
    def open_settings(self) -> None:
        from app.settings_dialog import SettingsDialog

        dlg = SettingsDialog(self)
        dlg.exec()

    def open_model_manager(self) -> None:
        from app.model_manager import ModelManagerDialog

        dlg = ModelManagerDialog(self)
        dlg.exec()
        self.refresh_models()

    def save_settings(self) -> None:
        try:
            self.settings.save(self.settings_path)
        except (OSError, ValueError) as exc:
            self.show_error(self.tr("Could not save settings: %1").replace("%1", str(exc)))

    def apply_settings(self, old: AppSettings) -> None:
        """Take new settings into use: theme now, hardware by reloading the model."""
        from app.theme import apply_theme

        if old.interface.theme != self.settings.interface.theme:
            apply_theme(self.settings.interface.theme)
        if old.interface.language != self.settings.interface.language:
            from app.translation import install_translation

            install_translation(QCoreApplication.instance(), self.settings.interface.language)  # live
        if old.remotes != self.settings.remotes:
            for name in set(self.remote_models) - set(self.settings.remotes):
                self.remote_models.pop(name, None)
            self.refresh_remote_models([n for n, url in self.settings.remotes.items() if old.remotes.get(n) != url])
            self.refresh_models()
        remote = parse_remote_ref(self.model_path) is not None
        if old.hardware != self.settings.hardware and self.model_path and not self.generating and not remote:
            self.load_model(self.model_path)
        elif old.server != self.settings.server or (self.settings.server.enabled and not self.server.running):
            self.sync_server()

    # ------------------------------------------------------------------ shutdown
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.stop()
        if self.knowledge is not None:
            self.knowledge.shutdown()  # indexing stops at the next file; what finished stays indexed
        if self._load_cancel is not None:
            self._load_cancel.cancel()
        if self._saver is not None:
            self._saver.flush()
        if self._summary_saver is not None:
            self._summary_saver.flush()
        self._gauge_timer.stop()
        self.server.stop()  # before the engine closes: API clients get their connection closed, not a crash
        self.host.stop()
        QThreadPool.globalInstance().waitForDone(5000)
        self._closed = True  # a language switch after this must not read the closed history
        self.store.close()
        super().closeEvent(event)


# Titles that mean "not named yet": empty (since titles are stored language-neutral) and the
# translated default that older versions stored in whichever language was active.
LEGACY_DEFAULT_TITLES = ("New chat", "新对话")


def is_default_title(title: str) -> bool:
    """Whether a stored title is the untitled default (shown as "New chat" in the current language)."""
    return not title.strip() or title in LEGACY_DEFAULT_TITLES


def _context_fill(messages: list[Any]) -> int:
    """Tokens the chat's last exchange used (its prompt + reply, from the stored stats); 0 if none."""
    for m in reversed(messages):
        stats = m.stats or {}
        if m.role == "assistant" and stats.get("prompt_tokens"):
            return int(stats["prompt_tokens"]) + int(stats.get("generated_tokens") or 0)
    return 0


def _title_from(text: str) -> str:
    line = " ".join(text.strip().split())
    return (line[:48] + "…") if len(line) > 48 else line
