"""The window's file dialogs, each opening in the folder its kind last used.

A dialog that always opened in the working folder sent the user back through the same folders every
time. Each kind of dialog (a trace, a folder, a model, a screenshot) keeps the folder it was last
used in under `lastFolder/KIND` in the window's `QSettings`, so the next window remembers it too.
The worker's --python picker needs none of this: it opens at the Python chosen last (`RunControls`,
kept as `workerPython`).
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDialog, QFileDialog, QWidget

SETTINGS_GROUP = "lastFolder"


class FileDialogs:
    """Open, save and folder dialogs over `parent` that remember their folder per kind in `settings`."""

    def __init__(self, parent: QWidget, settings: QSettings):
        self.parent = parent
        self.settings = settings

    def start_folder(self, kind: str) -> str:
        """Where a dialog of `kind` opens: the folder it was last used in, while it still exists ("" if
        none: Qt's default)."""
        folder = str(self.settings.value(f"{SETTINGS_GROUP}/{kind}", "") or "")
        return folder if folder and os.path.isdir(folder) else ""

    def remember(self, kind: str, path: str) -> None:
        """`path` was chosen in a dialog of `kind`: the folder it is in is where the next opens (for a
        folder chosen, its parent: the next run or rank folder is most often its sibling)."""
        self.settings.setValue(f"{SETTINGS_GROUP}/{kind}", os.path.dirname(os.path.abspath(path)))

    def open_files(self, kind: str, title: str, name_filter: str) -> list[str]:
        paths, _ = QFileDialog.getOpenFileNames(self.parent, title, self.start_folder(kind), name_filter)
        if paths:
            self.remember(kind, paths[0])
        return list(paths)

    def open_file(self, kind: str, title: str, name_filter: str) -> str:
        path, _ = QFileDialog.getOpenFileName(self.parent, title, self.start_folder(kind), name_filter)
        if path:
            self.remember(kind, path)
        return path

    def folder(self, kind: str, title: str) -> str:
        path = QFileDialog.getExistingDirectory(self.parent, title, self.start_folder(kind))
        if path:
            self.remember(kind, path)
        return path

    def save_file(self, kind: str, title: str, name: str, name_filter: str) -> str:
        """A file to write, offered as `name` in the folder last used."""
        folder = self.start_folder(kind)
        start = os.path.join(folder, name) if folder else name
        path, _ = QFileDialog.getSaveFileName(self.parent, title, start, name_filter)
        if path:
            self.remember(kind, path)
        return path

    def save_as(self, kind: str, title: str, name: str, filters: dict[str, str]) -> tuple[str, str]:
        """A file to write in one of `filters` (label -> ending, ".pftrace"), offered as `name` in
        the folder last used: (the path, the chosen filter's ending), ("", "") when cancelled.

        The chosen filter's ending is the dialog's default suffix, so a name typed without one
        ("mytrace") gets it before the dialog asks whether to replace a file: the question is asked
        of the file that will be written (`getSaveFileName` asks of "mytrace", and the caller then
        writes "mytrace.pftrace" unasked)."""
        folder = self.start_folder(kind)
        dialog = QFileDialog(self.parent, title, os.path.join(folder, name) if folder else name)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters(list(filters))

        def choose(label: str) -> None:
            dialog.setDefaultSuffix(filters.get(label, "").lstrip("."))

        choose(next(iter(filters)))
        dialog.filterSelected.connect(choose)
        try:
            if dialog.exec() != QDialog.DialogCode.Accepted or not dialog.selectedFiles():
                return "", ""
            path = dialog.selectedFiles()[0]
            self.remember(kind, path)
            return path, filters.get(dialog.selectedNameFilter(), next(iter(filters.values())))
        finally:
            dialog.deleteLater()
