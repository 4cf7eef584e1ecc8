"""Python files a user names by path, imported: a model file (`model_source`), a mode file
(`BRANCHSCOPE_MODES`, `modes`). Each is the user's own code, run because they asked for it; nothing
is imported from the current folder by name.

No torch here (the window imports the mode registry).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class NotPythonFile(ValueError):
    """The path is no file Python can import as a module (its name or its loader says so)."""


class ModeFileError(ValueError):
    """A mode `BRANCHSCOPE_MODES` names cannot be registered (missing, raising, or no new mode): the
    command line says it in one `error:` line and exits 2 (its message is one line). Defined outside
    the registry, whose import is what raises it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


def exec_file(path: Path, name: str) -> ModuleType:
    """The module of the Python file at `path`, imported under `name`: in `sys.modules` while it
    runs, as import does, and taken out again if it raises, which it raises again."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotPythonFile(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
