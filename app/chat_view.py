"""The transcript: one widget per message, Markdown rendered by Qt, thinking in a collapsible block.

Why one widget per message (not one big HTML page): a streaming reply re-renders only its own
QTextDocument, so long chats stay smooth (re-rendering the whole transcript per token is the lag
users report in web-based clients). Rendering is coalesced to at most one per ``RENDER_MS``.
Markdown (code blocks, tables, lists) goes through ``QTextDocument.setMarkdown`` (GitHub dialect).
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QKeyEvent, QTextOption
from PySide6.QtWidgets import (
    QAbstractButton,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.knowledge.answer import link_citations

RENDER_MS = 50
CITE_SCHEME = "cite"  # [n] in an answer links to cite:n (the source numbered n)
SOURCE_SCHEME = "source"  # an entry of the Sources list links to source:i (its index in the list)
QUOTE_CHARS = 140  # how much of a passage the Sources list quotes

def short_quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """The start of a passage on one line, ending in "…" when cut."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"



class ReturnPressesButton(QObject):
    """Event filter: Return/Enter on a focused button clicks it, as Space does.

    Why: outside a dialog Qt buttons ignore Return, so a keyboard user who tabs to Send (or to a
    message's Copy) and presses Enter gets nothing. Install with ``button.installEventFilter(...)``."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (event.type() == QEvent.Type.KeyPress and isinstance(obj, QAbstractButton)
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
                and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier and obj.isEnabled()):
            obj.animateClick()
            return True
        return super().eventFilter(obj, event)


RETURN_PRESSES = ReturnPressesButton()

class MarkdownView(QTextBrowser):
    """A read-only QTextBrowser that grows to fit its content (the scroll area scrolls).

    Links: ``cite:n`` and ``source:i`` are the app's own (emitted as :attr:`citationClicked` and
    :attr:`sourceClicked`); any other link opens in the desktop's handler (a browser)."""

    citationClicked = Signal(int)
    sourceClicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)  # a QTextBrowser would otherwise try to show the link's target itself
        self.anchorClicked.connect(self._on_link)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)

    def _on_link(self, url: QUrl) -> None:
        scheme, path = url.scheme(), url.path()
        if scheme in (CITE_SCHEME, SOURCE_SCHEME) and path.isdigit():
            (self.citationClicked if scheme == CITE_SCHEME else self.sourceClicked).emit(int(path))
        elif scheme in ("http", "https", "mailto", "file"):
            QDesktopServices.openUrl(url)

    def _fit(self, *_: object) -> None:
        h = int(self.document().size().height()) + 6
        if self.horizontalScrollBar().isVisible():
            h += self.horizontalScrollBar().height()
        if self.height() != h:
            self.setFixedHeight(max(h, 24))

    def resizeEvent(self, event: object) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(400, self.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        # text wraps (and wide code scrolls inside the view): a narrow window must not clip the message
        return QSize(self.fontMetrics().averageCharWidth() * 12, self.height())


class MessageWidget(QFrame):
    """One message: role header, optional thinking block, Markdown body, stats and actions."""

    copyRequested = Signal(int)
    editRequested = Signal(int)
    regenerateRequested = Signal(int)
    sourceRequested = Signal(int, int)  # message id, index in :attr:`sources`

    def __init__(self, message_id: int, role: str, content: str = "", thinking: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.content = content
        self.thinking = thinking
        self.sources: list[dict[str, Any]] = []  # as stored with the message (app.knowledge.answer.sources_to_json)
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self.setProperty("role", role)
        self.setFrameShape(QFrame.Shape.StyledPanel)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        header = QHBoxLayout()
        self.role_label = QLabel(self.tr("You") if role == "user" else self.tr("Assistant"))
        self.role_label.setObjectName("roleLabel")
        header.addWidget(self.role_label)
        header.addStretch(1)
        self.copy_button = self._action(self.tr("Copy"), self.tr("Copy this message"), self.copyRequested)
        header.addWidget(self.copy_button)
        self.edit_button = self.regen_button = None
        if role == "user":
            self.edit_button = self._action(self.tr("Edit"), self.tr("Edit this message and send it again"),
                                            self.editRequested)
            header.addWidget(self.edit_button)
        else:
            self.regen_button = self._action(self.tr("Regenerate"), self.tr("Generate this reply again"),
                                             self.regenerateRequested)
            header.addWidget(self.regen_button)
        layout.addLayout(header)

        self.thinking_toggle = QToolButton()
        self.thinking_toggle.installEventFilter(RETURN_PRESSES)
        self.thinking_toggle.setObjectName("thinkingToggle")
        self.thinking_toggle.setCheckable(True)
        self.thinking_toggle.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.thinking_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.thinking_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.thinking_toggle.setText(self.tr("Thinking"))
        self.thinking_toggle.setAccessibleName(self.tr("Show or hide the model's thinking"))
        self.thinking_toggle.toggled.connect(self._toggle_thinking)
        self.thinking_view = MarkdownView()
        self.thinking_view.setObjectName("thinkingView")
        self.thinking_view.setAccessibleName(self.tr("Model thinking"))
        self.thinking_view.setVisible(False)
        layout.addWidget(self.thinking_toggle)
        layout.addWidget(self.thinking_view)

        self.body = MarkdownView()
        self.body.setAccessibleName(self.tr("Message from you") if role == "user" else self.tr("Reply"))
        self.body.citationClicked.connect(self._on_citation)
        layout.addWidget(self.body)
        self.sources_view = MarkdownView()  # "Sources": the passages the answer was given, numbered
        self.sources_view.setObjectName("sourcesView")
        self.sources_view.setAccessibleName(self.tr("Sources of this answer"))
        self.sources_view.sourceClicked.connect(lambda i: self.sourceRequested.emit(self.message_id, i))
        self.sources_view.setVisible(False)
        layout.addWidget(self.sources_view)
        self.stats_label = QLabel()
        self.stats_label.setObjectName("statsLabel")
        self.stats_label.setWordWrap(True)
        self.stats_label.setVisible(False)
        layout.addWidget(self.stats_label)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_MS)
        self._render_timer.timeout.connect(self.render)
        self.render()

    def retranslate(self) -> None:
        """Re-set the fixed texts after a language switch (message text and stats stay as written)."""
        user = self.role == "user"
        self.role_label.setText(self.tr("You") if user else self.tr("Assistant"))
        for b, text, accessible in ((self.copy_button, self.tr("Copy"), self.tr("Copy this message")),
                                    (self.edit_button, self.tr("Edit"), self.tr("Edit this message and send it again")),
                                    (self.regen_button, self.tr("Regenerate"), self.tr("Generate this reply again"))):
            if b is not None:
                b.setText(text)
                b.setAccessibleName(accessible)
                b.setToolTip(accessible)
        self.thinking_toggle.setText(self.tr("Thinking"))
        self.thinking_toggle.setAccessibleName(self.tr("Show or hide the model's thinking"))
        self.thinking_view.setAccessibleName(self.tr("Model thinking"))
        self.body.setAccessibleName(self.tr("Message from you") if user else self.tr("Reply"))
        self.sources_view.setAccessibleName(self.tr("Sources of this answer"))
        self._render_sources()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def _action(self, text: str, accessible: str, signal: Signal) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setAccessibleName(accessible)
        b.setToolTip(accessible)
        b.setAutoRaise(True)
        b.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # reachable by Tab; a click leaves the focus where it was
        b.installEventFilter(RETURN_PRESSES)
        b.clicked.connect(lambda: signal.emit(self.message_id))
        return b

    def _toggle_thinking(self, shown: bool) -> None:
        self.thinking_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.thinking_view.setVisible(shown)

    def append(self, channel: str, text: str) -> None:
        if channel == "thinking":
            self.thinking += text
        else:
            self.content += text
        if not self._render_timer.isActive():
            self._render_timer.start()

    def set_text(self, content: str, thinking: str) -> None:
        self.content, self.thinking = content, thinking
        self.render()

    def render(self) -> None:
        self._render_timer.stop()
        if self.role == "assistant":
            self.body.setMarkdown(link_citations(self.content, set(self.cited_numbers()), CITE_SCHEME))
        else:
            self.body.setMarkdown(_escape_user(self.content))
        has_thinking = bool(self.thinking.strip())
        self.thinking_toggle.setVisible(has_thinking)
        if has_thinking:
            self.thinking_view.setMarkdown(self.thinking)

    def cited_numbers(self) -> list[int]:
        """The numbers [n] may link to: those of the passages the model was given."""
        return [int(s["n"]) for s in self.sources if s.get("used") and isinstance(s.get("n"), int)]

    def set_sources(self, sources: list[dict[str, Any]]) -> None:
        """Show the answer's sources under it and link its [n] citations to them."""
        self.sources = list(sources or [])
        self._render_sources()
        self.render()

    def _on_citation(self, number: int) -> None:
        index = next((i for i, s in enumerate(self.sources) if s.get("used") and s.get("n") == number), None)
        if index is not None:
            self.sourceRequested.emit(self.message_id, index)

    def _render_sources(self) -> None:
        """The Sources list (each entry a link to its passage) and, never silently, what was left out."""
        used = [(i, s) for i, s in enumerate(self.sources) if s.get("used")]
        left = [(i, s) for i, s in enumerate(self.sources) if not s.get("used")]
        self.sources_view.setVisible(bool(self.sources))
        if not self.sources:
            self.sources_view.clear()
            return
        parts = [f"<p><b>{html.escape(self.tr('Sources'))}</b></p>"] if used else []
        for i, s in used:
            quote = short_quote(str(s.get("quote", "")))
            parts.append(f'<p><a href="{SOURCE_SCHEME}:{i}">[{int(s.get("n", 0))}]</a> '
                         f'{html.escape(str(s.get("location", "")))}'
                         + (f" — <i>“{html.escape(quote)}”</i>" if quote else "") + "</p>")
        if left:
            links = "; ".join(f'<a href="{SOURCE_SCHEME}:{i}">{html.escape(str(s.get("location", "")))}</a>'
                              for i, s in left)
            label = html.escape(self.tr("Left out (did not fit in the context): %1")).replace("%1", links)
            parts.append(f"<p>{label}</p>")
        self.sources_view.setHtml("".join(parts))

    def set_status(self, text: str) -> None:
        self.stats_label.setText(text)
        self.stats_label.setVisible(bool(text))

    def focus_chain(self) -> list[QWidget]:
        """The message's keyboard stops in reading order: Copy, Edit or Regenerate, the thinking
        toggle and text (Tab skips them while hidden), then the message text itself."""
        return [b for b in (self.copy_button, self.edit_button, self.regen_button, self.thinking_toggle,
                            self.thinking_view, self.body, self.sources_view) if b is not None]

    def set_actions_enabled(self, enabled: bool) -> None:
        for b in (self.edit_button, self.regen_button):
            if b is not None:
                b.setEnabled(enabled)


def _escape_user(text: str) -> str:
    """User text is shown as typed: keep line breaks, do not interpret Markdown syntax."""
    specials = "\\`*_{}[]()#+-.!|<>"
    out = "".join("\\" + c if c in specials else c for c in text)
    return out.replace("\n", "  \n")


class ChatView(QScrollArea):
    """Scrollable list of :class:`MessageWidget`; follows the stream while the user is at the bottom."""

    copyRequested = Signal(int)
    editRequested = Signal(int)
    regenerateRequested = Signal(int)
    sourceRequested = Signal(int, int)  # message id, index in its sources

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setAccessibleName(self.tr("Conversation"))
        self._inner = QWidget()
        self._inner.setObjectName("chatInner")
        self._layout = QVBoxLayout(self._inner)
        self._layout.setContentsMargins(16, 16, 16, 16)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(self._inner)
        # messages wrap to the width: never a sideways scroll bar that hides the Copy/Edit buttons
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.widgets: list[MessageWidget] = []
        self._message_min_width: int | None = None
        self._follow = True
        # the widget Tab reaches after the last message's buttons (the window sets it: Attach)
        self.tab_after: QWidget | None = None
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange:
            self.setAccessibleName(self.tr("Conversation"))
        if event.type() in (QEvent.Type.LanguageChange, QEvent.Type.FontChange):
            self._message_min_width = None  # the buttons' texts or size, hence a message's minimum, changed
            self.updateGeometry()
        super().changeEvent(event)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As wide as the narrowest a message can be (its header row), so the window's minimum
        size keeps every message's buttons visible."""
        base = super().minimumSizeHint()
        if self._message_min_width is None:  # measured once per language / font: samples are not cheap
            samples = [MessageWidget(0, "assistant"), MessageWidget(0, "user")]
            self._message_min_width = max(x.minimumSizeHint().width() for x in samples)
            for x in samples:
                x.deleteLater()
        needed = self._message_min_width
        m = self._layout.contentsMargins()
        width = needed + m.left() + m.right() + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()
        return QSize(max(base.width(), width), base.height())

    def clear(self) -> None:
        for w in self.widgets:
            self._discard(w)
        self.widgets = []
        self._follow = True

    def add_message(self, message_id: int, role: str, content: str = "", thinking: str = "") -> MessageWidget:
        w = MessageWidget(message_id, role, content, thinking)
        w.copyRequested.connect(self.copyRequested)
        w.editRequested.connect(self.editRequested)
        w.regenerateRequested.connect(self.regenerateRequested)
        w.sourceRequested.connect(self.sourceRequested)
        self._layout.insertWidget(self._layout.count() - 1, w)
        previous = self.widgets[-1].focus_chain()[-1] if self.widgets else self
        self.widgets.append(w)
        self._chain(previous, w)
        self._follow = True
        return w

    def _chain(self, previous: QWidget, w: MessageWidget) -> None:
        """Put ``w``'s buttons in the Tab order after ``previous`` and before :attr:`tab_after`.

        Why by hand: a widget added later joins the end of the window's focus chain (after Send),
        so without this the buttons of a new message were out of reach in reading order.
        """
        for b in w.focus_chain():
            QWidget.setTabOrder(previous, b)
            previous = b
        if self.tab_after is not None:
            QWidget.setTabOrder(previous, self.tab_after)

    def _discard(self, w: MessageWidget) -> None:
        """Out of the layout and deleted later. Not ``setParent(None)``: that makes it a hidden top-level
        window for a moment, and deleting a window closes an open popup menu (the drop menu)."""
        self._layout.removeWidget(w)
        w.hide()
        w.deleteLater()

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self.widgets if w.message_id == message_id), None)

    def remove_from(self, message_id: int) -> None:
        keep = [w for w in self.widgets if w.message_id < message_id]
        for w in self.widgets[len(keep):]:
            self._discard(w)
        self.widgets = keep

    def _on_scroll(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 40

    def _on_range(self, _min: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)


class PromptEdit(QPlainTextEdit):
    """Input box: Enter or Ctrl+Enter sends, Shift+Enter inserts a new line, Tab / Shift+Tab move
    the focus (to Send and back), Ctrl+Tab inserts a tab character."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabChangesFocus(True)  # otherwise Tab types a tab and Send is out of the keyboard's reach

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Tab and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.insertPlainText("\t")
            return
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            self.submitted.emit()
            return
        super().keyPressEvent(event)
