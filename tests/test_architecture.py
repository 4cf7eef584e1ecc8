"""The import rules of ARCHITECTURE.md: app -> widgets -> profiling, Qt-free profiling, torch only in workers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: profiling modules that run inside the worker process and may import torch.
TORCH_MODULES = {"worker", "branches", "plans", "model_source"}


def _module_names(nodes) -> set[str]:
    """Top-level package names of the absolute imports among `nodes`."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _imports(path: Path) -> set[str]:
    return _module_names(ast.walk(ast.parse(path.read_text(), filename=str(path))))


def _top_level_imports(path: Path) -> set[str]:
    """Imports executed when the module is imported (module level or in a module-level try)."""
    body = ast.parse(path.read_text(), filename=str(path)).body
    tries = [sub for node in body if isinstance(node, ast.Try) for sub in ast.walk(node)]
    return _module_names(body) | _module_names(tries)


QT = {"PySide6", "pyqtgraph", "shiboken6"}


def test_profiling_never_imports_qt_widgets_or_app():
    for path in (ROOT / "profiling").glob("*.py"):
        bad = _imports(path) & (QT | {"widgets", "app"})
        assert not bad, f"{path.name} imports {bad}"


def test_only_worker_side_profiling_modules_import_torch_at_module_level():
    for path in (ROOT / "profiling").glob("*.py"):
        if path.stem in TORCH_MODULES:
            continue
        assert "torch" not in _top_level_imports(path), f"{path.name} imports torch"


def test_widgets_never_import_torch_or_app():
    for path in (ROOT / "widgets").glob("*.py"):
        bad = _imports(path) & {"torch", "app"}
        assert not bad, f"{path.name} imports {bad}"


def test_app_never_imports_torch():
    for path in (ROOT / "app").glob("*.py"):
        assert "torch" not in _imports(path), f"{path.name} imports torch"


def test_cli_inspect_runs_without_torch_or_qt():
    code = (
        "import sys; from app.cli import build_parser; build_parser();"
        "import branchscope.profiling.trace.analyses, branchscope.profiling.trace.reader;"
        "bad = [m for m in ('torch', 'PySide6') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
