"""Knowledge bases: the dialog that manages them, and the chooser of a conversation's bases.

Why two dialogs: managing bases (names, files, indexing, problems) is occasional work in its own
window; choosing which bases a chat uses is a quick per-conversation decision. Both only talk to
:class:`app.knowledge.store.KnowledgeStore` on the GUI thread; indexing runs in the background
through :class:`app.knowledge_jobs.IndexRunner`, so the dialog can close while a base is indexed
and shows the progress of a run it did not start.

Files on disk are never touched: deleting a base or removing a file removes only the index.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.confirm import confirm_destructive
from app.knowledge.store import KnowledgeError, covers
from app.knowledge_jobs import IndexJob, IndexRunner

log = logging.getLogger(__name__)

PATH_ROLE = Qt.ItemDataRole.UserRole
BASE_ROLE = Qt.ItemDataRole.UserRole + 1
ROOT_ROLE = Qt.ItemDataRole.UserRole + 2  # True on items the user added (only those can be removed)
EXCLUDED_ROLE = Qt.ItemDataRole.UserRole + 3  # True on a file of an added folder that the user excluded

# Document problems whose sentence needs nothing but the file's name (see app.main_window's
# document_error_text); too_large also needs the file's size (stored with the file); the others keep
# the indexer's English line.
_NAME_ONLY_CODES = ("unsupported", "missing", "unreadable", "binary", "encrypted", "no_text", "corrupt", "empty",
                    "folder", "not_file")


def problem_text(path: Path, code: str, message: str, size: int = 0) -> str:
    """One file's problem in the interface's language (the English ``message`` when no sentence fits).

    ``size``: the file's size in bytes, for ``too_large`` (the store keeps it with the file)."""
    from app.core.documents import MAX_DOCUMENT_BYTES, MAX_UNPACKED_BYTES, DocumentError

    if code in _NAME_ONLY_CODES or (code == "too_large" and size > 0) or code == "too_large_unpacked":
        from app.errors import document_error_text

        limit = MAX_UNPACKED_BYTES if code == "too_large_unpacked" else MAX_DOCUMENT_BYTES
        return document_error_text(DocumentError(message, code, name=path.name, size_mb=size / 2**20,
                                                 limit_mb=limit / 2**20))
    if code == "vanished":
        text = QCoreApplication.translate("KnowledgeBasesDialog", "%1 disappeared while it was being indexed.")
        return text.replace("%1", path.name)
    return message or code


def report_text(report: Any) -> str:
    """What a run did, in words: "2 added, 3 unchanged, 1 updated, 0 removed · 40 passages · 1.2 s"."""
    text = (QCoreApplication.translate("KnowledgeBasesDialog",
                                       "%1 added, %2 unchanged, %3 updated, %4 removed · %5 passages · %6 s")
            .replace("%1", str(report.added)).replace("%2", str(report.unchanged))
            .replace("%3", str(report.updated)).replace("%4", str(report.removed))
            .replace("%5", str(report.passages)).replace("%6", f"{report.seconds:.1f}"))
    if report.problems:
        line = QCoreApplication.translate("KnowledgeBasesDialog",
                                          "Could not index %1 of the files; the list says why.")
        text += "\n" + line.replace("%1", str(len(report.problems)))
    skipped = getattr(report, "skipped", [])
    if skipped:
        line = QCoreApplication.translate("KnowledgeBasesDialog", "%1 files in the folders are of types that "
                                          "are not indexed (for example %2).")
        text += "\n" + line.replace("%1", str(len(skipped))).replace("%2", Path(skipped[0]).name)
    if report.cancelled:
        cancelled = QCoreApplication.translate("KnowledgeBasesDialog", "Cancelled; the files indexed so far are kept.")
        text = cancelled + "\n" + text
    return text


def installed_embedding_model(embedder: Any = None) -> str | None:
    """The name of the embedding model new runs use, or None (full-text search only).

    ``embedder``: the runner's (:data:`app.knowledge_jobs.EmbedderSource`): a handle names its file, a
    loaded model its ``model_id``; without one the installed model is looked up as the CLI does.
    """
    if embedder is not None:
        if getattr(embedder, "path", None) is not None:
            return Path(embedder.path).name
        if getattr(embedder, "model_id", ""):
            return str(embedder.model_id)
    try:
        from app.knowledge.embedder import find_embedding_model

        found = find_embedding_model()
    except Exception as exc:  # noqa: BLE001 - a broken catalog must not stop the dialog
        log.warning("embedding model lookup failed: %s", exc)
        return None
    return Path(found).name if found is not None else None


class KnowledgeBasesDialog(QDialog):
    """Create, rename and delete knowledge bases; add and remove their files and folders; index them.

    ``store``: the GUI thread's :class:`KnowledgeStore` (a file, not ``":memory:"``: jobs open it too).
    ``runner``: the window's :class:`IndexRunner` (one per window, so runs continue after this dialog
    closes); None makes one owned by this dialog. ``embedding_model``: the embedding model's name for the
    search line, "" for none, None to find it (:func:`installed_embedding_model`).
    Public for tests and callers: :meth:`select_base`, :meth:`add_paths`, :meth:`reindex`, :meth:`cancel`,
    :meth:`create_base`, :meth:`rename_base`, :meth:`delete_base`, :meth:`remove_selected`,
    :meth:`exclude_selected`, :meth:`include_selected` (all what the buttons do).
    """

    def __init__(self, store: Any, runner: IndexRunner | None = None, parent: QWidget | None = None, *,
                 embedding_model: str | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.runner = runner if runner is not None else IndexRunner(store.path, parent=self)
        self.embedding_model = (installed_embedding_model(self.runner.embedder) if embedding_model is None
                                else embedding_model or None)
        self.reports: dict[int, Any] = {}  # base id -> its last IndexReport seen here
        self.job: IndexJob | None = None  # the run whose progress is shown
        self.confirm_box: QMessageBox | None = None
        self.name_box: QInputDialog | None = None
        self.setWindowTitle(self.tr("Knowledge bases"))
        self.setAccessibleName(self.tr("Knowledge bases"))
        self.setMinimumSize(720, 460)
        lay = QVBoxLayout(self)

        self.embedding_label = QLabel(self._embedding_text())
        self.embedding_label.setWordWrap(True)
        self.embedding_label.setAccessibleName(self.tr("Search method"))
        lay.addWidget(self.embedding_label)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        left = QWidget()
        left_lay = QVBoxLayout(left)
        left_lay.setContentsMargins(0, 0, 0, 0)
        self.bases_list = QTreeWidget()
        self.bases_list.setAccessibleName(self.tr("Knowledge bases"))
        self.bases_list.setHeaderLabels([self.tr("Name"), self.tr("Files"), self.tr("Passages"), self.tr("Problems"),
                                         self.tr("Search")])
        self.bases_list.setRootIsDecorated(False)
        self.bases_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.bases_list.setMinimumWidth(300)
        self.bases_list.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.bases_list.header().setStretchLastSection(False)
        self.bases_list.header().setAccessibleName(self.tr("Columns"))
        self.bases_list.currentItemChanged.connect(lambda *_: self._show_base())
        left_lay.addWidget(self.bases_list, 1)
        row = QHBoxLayout()
        self.new_button = QPushButton(self.tr("New…"))
        self.new_button.setAccessibleName(self.tr("New knowledge base"))
        self.new_button.clicked.connect(lambda: self.create_base())
        self.rename_button = QPushButton(self.tr("Rename…"))
        self.rename_button.setAccessibleName(self.tr("Rename the knowledge base"))
        self.rename_button.clicked.connect(lambda: self.rename_base())
        self.delete_button = QPushButton(self.tr("Delete"))
        self.delete_button.setAccessibleName(self.tr("Delete the knowledge base (files on disk stay)"))
        self.delete_button.clicked.connect(lambda: self.delete_base())
        for b in (self.new_button, self.rename_button, self.delete_button):
            b.setAutoDefault(False)
            row.addWidget(b)
        left_lay.addLayout(row)
        split.addWidget(left)

        right = QWidget()
        right_lay = QVBoxLayout(right)
        right_lay.setContentsMargins(0, 0, 0, 0)
        self.base_title = QLabel()
        self.base_title.setAccessibleName(self.tr("Selected knowledge base"))
        self.base_title.setWordWrap(True)
        right_lay.addWidget(self.base_title)
        self.files_tree = QTreeWidget()
        self.files_tree.setAccessibleName(self.tr("Files and folders of the knowledge base"))
        self.files_tree.setHeaderLabels([self.tr("File"), self.tr("Status"), self.tr("Passages")])
        self.files_tree.setMinimumWidth(360)
        self.files_tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # long paths keep both ends
        header = self.files_tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.files_tree.header().setAccessibleName(self.tr("Columns"))
        self.files_tree.currentItemChanged.connect(lambda *_: self._update_buttons())
        right_lay.addWidget(self.files_tree, 3)
        self.problems_list = QListWidget()  # the reasons in full: a tree cell cuts them off
        self.problems_list.setAccessibleName(self.tr("Files that could not be indexed, and why"))
        self.problems_list.setWordWrap(True)
        self.problems_list.setMinimumHeight(60)
        right_lay.addWidget(self.problems_list, 1)
        row = QHBoxLayout()
        self.add_files_button = QPushButton(self.tr("Add files…"))
        self.add_files_button.setAccessibleName(self.tr("Add files to the knowledge base"))
        self.add_files_button.clicked.connect(self._choose_files)
        self.add_folder_button = QPushButton(self.tr("Add folder…"))
        self.add_folder_button.setAccessibleName(self.tr("Add a folder to the knowledge base"))
        self.add_folder_button.clicked.connect(self._choose_folder)
        self.remove_button = QPushButton(self.tr("Remove"))
        self.remove_button.setAccessibleName(self.tr("Remove the selected file or folder from the knowledge base"))
        self.remove_button.setToolTip(self.tr("Removes it and its passages from the index; the file on disk stays."))
        self.remove_button.clicked.connect(lambda: self.remove_selected())
        self.exclude_button = QPushButton(self.tr("Exclude"))
        self.exclude_button.setAccessibleName(self.tr("Exclude the selected file of a folder from the knowledge base"))
        self.exclude_button.setToolTip(self.tr("Leaves this file of the folder out of the index (its passages are "
                                               "removed) until you include it again; the file on disk stays."))
        self.exclude_button.clicked.connect(lambda: self._exclude_or_include())
        self.reindex_button = QPushButton(self.tr("Re-index"))
        self.reindex_button.setAccessibleName(self.tr("Re-index the knowledge base (only what changed)"))
        self.reindex_button.clicked.connect(lambda: self.reindex())
        for b in (self.add_files_button, self.add_folder_button, self.remove_button, self.exclude_button,
                  self.reindex_button):
            b.setAutoDefault(False)
            row.addWidget(b)
        right_lay.addLayout(row)
        self.report_label = QLabel()
        self.report_label.setWordWrap(True)
        self.report_label.setAccessibleName(self.tr("Last indexing result"))
        right_lay.addWidget(self.report_label)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([320, 560])
        lay.addWidget(split, 1)

        prow = QHBoxLayout()
        self.progress_label = QLabel()
        self.progress_label.setAccessibleName(self.tr("Indexing status"))
        self.progress_bar = QProgressBar()
        self.progress_bar.setAccessibleName(self.tr("Indexing progress"))
        self.cancel_button = QPushButton(self.tr("Cancel indexing"))
        self.cancel_button.setAccessibleName(self.tr("Cancel indexing (the files done are kept)"))
        self.cancel_button.setAutoDefault(False)
        self.cancel_button.clicked.connect(lambda: self.cancel())
        prow.addWidget(self.progress_label, 1)
        prow.addWidget(self.progress_bar, 1)
        prow.addWidget(self.cancel_button)
        lay.addLayout(prow)
        self.status_label = QLabel()  # answers to the user's last action (name taken, ...)
        self.status_label.setWordWrap(True)
        self.status_label.setAccessibleName(self.tr("Message"))
        lay.addWidget(self.status_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

        for keys, slot in ((QKeySequence.StandardKey.New, self.create_base), (Qt.Key.Key_F5, self.reindex)):
            QShortcut(QKeySequence(keys), self).activated.connect(lambda slot=slot: slot())
        # F2 and Delete act on the list that has the focus (an item view would take F2 for itself)
        self.bases_list.installEventFilter(self)
        self.files_tree.installEventFilter(self)

        self.runner.jobStarted.connect(self._on_job_started)
        self.runner.jobFinished.connect(self._on_job_finished)
        self.refresh()
        if self.runner.current is not None:
            self._follow(self.runner.current)
        else:
            self._show_progress_idle()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.KeyPress and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            key = event.key()
            if watched is self.bases_list and key == Qt.Key.Key_F2:
                self.rename_base()
                return True
            if watched is self.bases_list and key == Qt.Key.Key_Delete:
                self.delete_base()
                return True
            if watched is self.files_tree and key == Qt.Key.Key_Delete:
                self.remove_selected()
                return True
        return super().eventFilter(watched, event)

    # ------------------------------------------------------------------ model
    def base_stats(self, base_id: int) -> dict[str, Any]:
        """Files, passages and problems of a base, from the store."""
        files = self.store.files(base_id)
        return {"files": len(files), "passages": sum(f.passages for f in files),
                "problems": sum(1 for f in files if f.status == "error"),
                "pending": sum(1 for f in files if f.status == "pending"),
                "vectors": ", ".join(sorted(self.store.vector_models(base_id)))}

    def current_base_id(self) -> int | None:
        item = self.bases_list.currentItem()
        return None if item is None else int(item.data(0, BASE_ROLE))

    def select_base(self, base_id: int) -> None:
        for i in range(self.bases_list.topLevelItemCount()):
            item = self.bases_list.topLevelItem(i)
            if item.data(0, BASE_ROLE) == base_id:
                self.bases_list.setCurrentItem(item)
                return
        raise KeyError(f"no knowledge base with id {base_id}")

    # ------------------------------------------------------------------ view
    def _embedding_text(self) -> str:
        if self.embedding_model:
            return self.tr("Passages are found by their words (full-text search) and by meaning with the "
                           "embedding model %1.").replace("%1", self.embedding_model)
        return self.tr("Full-text search only — install Qwen3-Embedding-0.6B from Models… for better matches.")

    def _search_text(self, vectors: str | None) -> str:
        return self.tr("Words + meaning (%1)").replace("%1", vectors) if vectors else self.tr("Words")

    def refresh(self) -> None:
        """Re-read the bases from the store, keeping the selection."""
        keep = self.current_base_id()
        self.bases_list.blockSignals(True)
        self.bases_list.clear()
        select = None
        for base in self.store.bases():
            s = self.base_stats(base.id)
            item = QTreeWidgetItem([base.name, str(s["files"]), str(s["passages"]), str(s["problems"]),
                                    self._search_text(s["vectors"])])
            item.setData(0, BASE_ROLE, base.id)
            for col in (1, 2, 3):
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.bases_list.addTopLevelItem(item)
            if base.id == keep or select is None:
                select = item
        for col in (1, 2, 3, 4):
            self.bases_list.resizeColumnToContents(col)
        self.bases_list.blockSignals(False)
        if select is not None:
            self.bases_list.setCurrentItem(select)
        self._show_base()

    def _status_text(self, f: Any) -> str:
        if f.status == "indexed":
            return self.tr("indexed")
        if f.status == "error":
            return self.tr("not indexed (see why below)")
        return self.tr("pending")

    def _show_base(self) -> None:
        base_id = self.current_base_id()
        self.files_tree.clear()
        self.problems_list.clear()
        self.problems_list.setVisible(False)
        if base_id is None:
            self.base_title.setText(self.tr("No knowledge base yet: press New… to create one."))
            self.report_label.setText("")
            self._update_buttons()
            return
        base = self.store.base(base_id)
        s = self.base_stats(base_id)
        title = self.tr("%1: %2 files, %3 passages.").replace("%1", base.name).replace("%2", str(s["files"])) \
            .replace("%3", str(s["passages"]))
        if s["vectors"]:
            title += " " + self.tr("Vectors from %1.").replace("%1", s["vectors"])
        elif s["passages"]:
            title += " " + self.tr("No vectors: found by words only.")
        if s["pending"]:
            title += " " + self.tr("%1 files wait to be indexed.").replace("%1", str(s["pending"]))
        self.base_title.setText(title)
        files = self.store.files(base_id)
        excluded = self.store.excluded(base_id)
        shown_excluded: set[Path] = set()
        claimed: set[int] = set()
        for root in self.store.roots(base_id):
            root_item = QTreeWidgetItem([str(root)])
            root_item.setData(0, PATH_ROLE, str(root))
            root_item.setData(0, ROOT_ROLE, True)
            root_item.setToolTip(0, str(root))
            own = next((f for f in files if f.path == root), None)
            if own is not None:  # a file added on its own
                claimed.add(own.id)
                self._fill_file_item(root_item, own)
            else:
                inside = [f for f in files if f.id not in claimed and covers(root, f.path)]
                for f in inside:
                    claimed.add(f.id)
                    child = QTreeWidgetItem([str(f.path.relative_to(root))])
                    child.setData(0, PATH_ROLE, str(f.path))
                    child.setData(0, ROOT_ROLE, False)
                    child.setToolTip(0, str(f.path))
                    self._fill_file_item(child, f)
                    root_item.addChild(child)
                for path in excluded:
                    if covers(root, path) and path != root and path not in shown_excluded:
                        shown_excluded.add(path)
                        child = QTreeWidgetItem([str(path.relative_to(root)), self.tr("excluded"), "0"])
                        child.setData(0, PATH_ROLE, str(path))
                        child.setData(0, ROOT_ROLE, False)
                        child.setData(0, EXCLUDED_ROLE, True)
                        child.setToolTip(0, str(path))
                        child.setToolTip(1, self.tr("Left out of the index by you; “Include again” indexes it."))
                        root_item.addChild(child)
                if inside:
                    n_err = sum(1 for f in inside if f.status == "error")
                    root_item.setText(1, self.tr("folder: %1 files, %2 with problems").replace("%1", str(len(inside)))
                                      .replace("%2", str(n_err)))
                    root_item.setText(2, str(sum(f.passages for f in inside)))
                else:
                    root_item.setText(1, self.tr("pending"))
            self.files_tree.addTopLevelItem(root_item)
            root_item.setExpanded(True)
        self.files_tree.setColumnWidth(0, max(180, self.files_tree.viewport().width() * 45 // 100))
        for f in files:
            if f.status == "error":
                line = problem_text(f.path, f.error_code, f.error, f.size)
                item = QListWidgetItem(line)
                item.setToolTip(str(f.path))
                item.setData(PATH_ROLE, str(f.path))
                self.problems_list.addItem(item)
        self.problems_list.setVisible(self.problems_list.count() > 0)
        report = self.reports.get(base_id)
        self.report_label.setText(report_text(report) if report is not None else "")
        self._update_buttons()

    def _fill_file_item(self, item: QTreeWidgetItem, f: Any) -> None:
        item.setText(1, self._status_text(f))
        item.setToolTip(1, problem_text(f.path, f.error_code, f.error, f.size) if f.status == "error" else "")
        item.setText(2, str(f.passages))

    def _update_buttons(self) -> None:
        has_base = self.current_base_id() is not None
        for b in (self.rename_button, self.delete_button, self.add_files_button, self.add_folder_button,
                  self.reindex_button):
            b.setEnabled(has_base)
        item = self.files_tree.currentItem()
        self.remove_button.setEnabled(has_base and item is not None and bool(item.data(0, ROOT_ROLE)))
        excluded = item is not None and bool(item.data(0, EXCLUDED_ROLE))
        self.exclude_button.setText(self.tr("Include again") if excluded else self.tr("Exclude"))
        self.exclude_button.setAccessibleName(
            self.tr("Include the selected file in the knowledge base again") if excluded else
            self.tr("Exclude the selected file of a folder from the knowledge base"))
        # only a file (or sub-folder) inside an added folder: an added path itself is removed instead
        self.exclude_button.setEnabled(has_base and item is not None and item.parent() is not None)

    # ------------------------------------------------------------------ bases
    def _ask_name(self, title: str, label: str, text: str = "") -> str | None:
        box = QInputDialog(self)
        box.setWindowTitle(title)
        box.setLabelText(label)
        box.setTextValue(text)
        box.setAccessibleName(title)
        self.name_box = box
        ok = box.exec() == QDialog.DialogCode.Accepted
        self.name_box = None
        name = box.textValue().strip()
        return name if ok else None

    def _name_problem(self, exc: KnowledgeError, name: str) -> None:
        if exc.code == "exists":
            text = self.tr("A knowledge base named “%1” already exists.").replace("%1", name)
        elif exc.code == "invalid_name" and not name.strip():
            text = self.tr("A knowledge base needs a name.")
        elif exc.code == "invalid_name":
            text = self.tr("A knowledge base name can be at most 200 characters.")
        else:
            text = str(exc)
        self.status_label.setText(text)

    def create_base(self, name: str | None = None) -> int | None:
        """New… : asks for a name (unless given) and selects the new base; returns its id."""
        if name is None:
            name = self._ask_name(self.tr("New knowledge base"), self.tr("Name:"))
        if name is None:
            return None
        try:
            base = self.store.create_base(name)
        except KnowledgeError as exc:
            self._name_problem(exc, name)
            return None
        name = base.name
        self.status_label.setText(self.tr("Created “%1”. Add files or a folder to it.").replace("%1", name))
        self.refresh()
        self.select_base(base.id)
        return base.id

    def rename_base(self, name: str | None = None) -> None:
        base_id = self.current_base_id()
        if base_id is None:
            return
        old = self.store.base(base_id).name
        if name is None:
            name = self._ask_name(self.tr("Rename knowledge base"), self.tr("New name:"), old)
        if name is None or name == old:
            return
        try:
            self.store.rename_base(base_id, name)
        except KnowledgeError as exc:
            self._name_problem(exc, name)
            return
        name = self.store.base(base_id).name
        self.status_label.setText(self.tr("Renamed “%1” to “%2”.").replace("%1", old).replace("%2", name))
        self.refresh()

    def delete_base(self, confirm: bool = True) -> bool:
        """Delete asks first; the files on disk are not touched. True if deleted."""
        base_id = self.current_base_id()
        if base_id is None:
            return False
        name = self.store.base(base_id).name
        if confirm and not confirm_destructive(
                self, self.tr("Delete knowledge base"),
                self.tr("Delete the knowledge base “%1” and its index? The files on disk are not "
                        "touched.").replace("%1", name), self.tr("Delete")):
            return False
        self.runner.cancel(base_id)
        job = self.runner.job_for(base_id)
        if job is not None:
            job.wait(5.0)
        self.store.delete_base(base_id)
        self.reports.pop(base_id, None)
        self.status_label.setText(self.tr("Deleted “%1”; its files on disk are unchanged.").replace("%1", name))
        self.refresh()
        return True

    # ------------------------------------------------------------------ files
    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, self.tr("Add files"), str(Path.home()),
            self.tr("Documents and source code (*.txt *.md *.pdf *.docx *.html *.htm *.py *.c *.h *.cpp *.js *.ts "
                    "*.java *.go *.rs *.rb *.sh *.toml *.yaml *.yml *.json *.css);;All files (*)"))
        if paths:
            self.add_paths([Path(p) for p in paths])

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, self.tr("Add a folder"), str(Path.home()))
        if path:
            self.add_paths([Path(path)])

    def add_paths(self, paths: list[Path]) -> IndexJob | None:
        """Add files or folders to the selected base and index it (in the background)."""
        base_id = self.current_base_id()
        if base_id is None or not paths:
            return None
        self.store.add_paths(base_id, [Path(p) for p in paths])
        self.refresh()
        return self.reindex()

    def remove_selected(self) -> None:
        """Remove the selected file or folder (one the user added) and its passages; disk untouched."""
        base_id = self.current_base_id()
        item = self.files_tree.currentItem()
        if base_id is None or item is None or not item.data(0, ROOT_ROLE):
            return
        path = Path(item.data(0, PATH_ROLE))
        self._stop_run(base_id)
        self.store.remove_path(base_id, path)
        self.reports.pop(base_id, None)  # the last run's counts no longer describe the base
        self.status_label.setText(self.tr("Removed %1 from the index; the file on disk is unchanged.")
                                  .replace("%1", path.name))
        self.refresh()

    def _stop_run(self, base_id: int) -> None:
        """Cancel and wait for the base's run: it may be writing the passages of a file being removed."""
        if self.runner.job_for(base_id) is not None:
            self.runner.cancel(base_id)
            job = self.runner.job_for(base_id)
            if job is not None:
                job.wait(5.0)

    def _exclude_or_include(self) -> None:
        item = self.files_tree.currentItem()
        if item is not None and item.data(0, EXCLUDED_ROLE):
            self.include_selected()
        else:
            self.exclude_selected()

    def exclude_selected(self) -> bool:
        """Exclude the selected file of an added folder: its passages go, indexing skips it (kept in the
        store, so it stays excluded after a restart). True if excluded."""
        base_id = self.current_base_id()
        item = self.files_tree.currentItem()
        if base_id is None or item is None or item.parent() is None or item.data(0, EXCLUDED_ROLE):
            return False
        path = Path(item.data(0, PATH_ROLE))
        self._stop_run(base_id)
        try:
            self.store.exclude_path(base_id, path)
        except KnowledgeError as exc:
            self.status_label.setText(self.tr("Only a file inside an added folder can be excluded; an added file is "
                                              "removed with Remove.") if exc.code == "not_in_folder" else str(exc))
            return False
        self.reports.pop(base_id, None)  # the last run's counts no longer describe the base
        self.status_label.setText(self.tr("Excluded %1: its passages were removed from the index; the file on "
                                          "disk is unchanged.").replace("%1", path.name))
        self.refresh()
        self._select_path(path)
        return True

    def include_selected(self) -> IndexJob | None:
        """Include an excluded file again and index it (in the background)."""
        base_id = self.current_base_id()
        item = self.files_tree.currentItem()
        if base_id is None or item is None or not item.data(0, EXCLUDED_ROLE):
            return None
        path = Path(item.data(0, PATH_ROLE))
        self.store.include_path(base_id, path)
        self.status_label.setText(self.tr("%1 is included again and is being indexed.").replace("%1", path.name))
        self.refresh()
        return self.reindex()

    def _select_path(self, path: Path) -> None:
        """Make the file list's item for ``path`` current (after a refresh rebuilt the list)."""
        for i in range(self.files_tree.topLevelItemCount()):
            top = self.files_tree.topLevelItem(i)
            for item in (top, *(top.child(j) for j in range(top.childCount()))):
                if item.data(0, PATH_ROLE) == str(path):
                    self.files_tree.setCurrentItem(item)
                    return

    def reindex(self) -> IndexJob | None:
        """Re-index the selected base: only new, changed and removed files do work."""
        base_id = self.current_base_id()
        if base_id is None:
            return None
        return self.runner.index(base_id)

    def cancel(self) -> None:
        """Cancel the run shown (the files it finished stay indexed)."""
        if self.job is not None:
            self.job.cancel()
            self.progress_label.setText(self.tr("Cancelling after the current file…"))

    # ------------------------------------------------------------------ progress
    def _base_name(self, base_id: int) -> str:
        base = self.store.base(base_id)
        if base is None:
            return "?"
        return base.name if base.conversation_id is None else self.tr("the chat's attachments")

    def _follow(self, job: IndexJob) -> None:
        self.job = job
        job.progress.connect(self._on_progress)
        self.progress_label.setText(self.tr("Indexing “%1”…").replace("%1", self._base_name(job.base_id)))
        self.progress_bar.setRange(0, 0)
        self.progress_bar.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        if job.last_progress is not None:
            self._on_progress(job.last_progress)

    def _show_progress_idle(self) -> None:
        self.job = None
        self.progress_bar.setVisible(False)
        self.cancel_button.setVisible(False)

    def _on_job_started(self, job: IndexJob) -> None:
        self._follow(job)

    def _on_progress(self, p: Any) -> None:
        if self.job is None or (self.sender() is not None and self.sender() is not self.job):
            return
        name = self._base_name(self.job.base_id)
        if getattr(p, "phase", "files") == "embedding":
            self.progress_bar.setRange(0, max(p.to_embed, 1))
            self.progress_bar.setValue(min(p.embedded, p.to_embed))
            self.progress_label.setText(
                self.tr("Cancelling after the current file…") if self.job.cancelled else
                self.tr("“%1”: computing search vectors, %2 of %3 passages").replace("%1", name)
                .replace("%2", str(p.embedded)).replace("%3", str(p.to_embed)))
            return
        self.progress_bar.setRange(0, max(p.total_files, 1))
        self.progress_bar.setValue(min(p.done_files, p.total_files))
        text = self.tr("Indexing “%1”: %2 of %3 files, %4 passages").replace("%1", name) \
            .replace("%2", str(p.done_files)).replace("%3", str(p.total_files)).replace("%4", str(p.passages))
        if p.current:
            text += " · " + Path(p.current).name
        if self.job.cancelled:
            text = self.tr("Cancelling after the current file…")
        self.progress_label.setText(text)

    def _on_job_finished(self, job: IndexJob) -> None:
        if job.report is not None:
            self.reports[job.base_id] = job.report
        if job is self.job:
            try:
                job.progress.disconnect(self._on_progress)
            except (RuntimeError, TypeError):
                pass
            if job.report is not None:
                done = self.tr("“%1” indexed.").replace("%1", self._base_name(job.base_id))
                if job.report.cancelled:
                    done = self.tr("Indexing “%1” was cancelled.").replace("%1", self._base_name(job.base_id))
                self.progress_label.setText(done)
            else:
                self.progress_label.setText(self.tr("Indexing “%1” failed: %2")
                                            .replace("%1", self._base_name(job.base_id)).replace("%2", job.error))
            self._show_progress_idle()
        if self.store.base(job.base_id) is not None:
            self.refresh()

    def done(self, result: int) -> None:
        """Closing leaves runs going on the window's runner; a runner of this dialog's own stops."""
        if self.runner.parent() is self:
            self.runner.shutdown()
        try:
            self.runner.jobStarted.disconnect(self._on_job_started)
            self.runner.jobFinished.disconnect(self._on_job_finished)
        except (RuntimeError, TypeError):
            pass
        super().done(result)


class ChooseBasesDialog(QDialog):
    """Tick the knowledge bases a conversation answers from; OK saves the choice in the store."""

    def __init__(self, store: Any, conversation_id: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.conversation_id = conversation_id
        self.setWindowTitle(self.tr("Knowledge bases for this chat"))
        self.setAccessibleName(self.tr("Choose knowledge bases for this chat"))
        self.setMinimumSize(360, 280)
        lay = QVBoxLayout(self)
        intro = QLabel(self.tr("Questions in this chat are answered from the ticked knowledge bases, with "
                               "citations. Files attached to the chat are always used."))
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.list = QListWidget()
        self.list.setAccessibleName(self.tr("Knowledge bases to use"))
        chosen = set(store.conversation_bases(conversation_id))
        for base in store.bases():
            files = store.files(base.id)
            item = QListWidgetItem(self.tr("%1 (%2 files, %3 passages)").replace("%1", base.name)
                                   .replace("%2", str(len(files))).replace("%3", str(sum(f.passages for f in files))))
            item.setData(BASE_ROLE, base.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if base.id in chosen else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)
        lay.addWidget(self.list, 1)
        self.empty_label = QLabel(self.tr("No knowledge bases yet. Create one in Knowledge bases…"))
        self.empty_label.setWordWrap(True)
        self.empty_label.setVisible(self.list.count() == 0)
        lay.addWidget(self.empty_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def chosen_ids(self) -> list[int]:
        return [int(self.list.item(i).data(BASE_ROLE)) for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.CheckState.Checked]

    def set_checked(self, base_id: int, checked: bool) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(BASE_ROLE) == base_id:
                self.list.item(i).setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
                return
        raise KeyError(f"no knowledge base with id {base_id}")

    def accept(self) -> None:
        self.store.set_conversation_bases(self.conversation_id, self.chosen_ids())
        super().accept()


def fill_bases_menu(menu: QMenu, store: Any, conversation_id: int) -> list[QAction]:
    """Fill ``menu`` with one checkable action per knowledge base; toggling one saves the choice at once.

    For a menu button beside the chat (quicker than :class:`ChooseBasesDialog`); call it from the menu's
    ``aboutToShow`` so the list is current. Returns the actions (their data is the base id).
    """
    menu.clear()
    chosen = set(store.conversation_bases(conversation_id))
    actions: list[QAction] = []

    def save() -> None:
        store.set_conversation_bases(conversation_id, [int(a.data()) for a in actions if a.isChecked()])

    for base in store.bases():
        action = QAction(base.name, menu)
        action.setCheckable(True)
        action.setChecked(base.id in chosen)
        action.setData(base.id)
        action.toggled.connect(lambda _on: save())
        menu.addAction(action)
        actions.append(action)
    if not actions:
        empty = QAction(QCoreApplication.translate("KnowledgeBasesDialog", "No knowledge bases yet"), menu)
        empty.setEnabled(False)
        menu.addAction(empty)
    return actions
