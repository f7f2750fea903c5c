"""Asking before something is deleted: one question box for every dialog that deletes.

Why shared: the rule must be the same everywhere — Cancel is the default and the Escape button,
so a stray Enter keeps what would be deleted — and tests answer the box through the owner's
``confirm_box`` attribute while it is open.
"""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm_destructive(owner: QWidget, title: str, question: str, action: str) -> bool:
    """Ask ``question`` with an ``action`` button (e.g. "Delete") and Cancel; True if ``action`` was pressed.

    The box is modal and stored as ``owner.confirm_box`` while it is open (None after)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, question, parent=owner)
    yes = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    no = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(no)
    box.setEscapeButton(no)
    owner.confirm_box = box
    try:
        box.exec()
    finally:
        owner.confirm_box = None
    return box.clickedButton() is yes
