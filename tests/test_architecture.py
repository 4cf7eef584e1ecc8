"""The house rules that the import contracts (pyproject's [tool.importlinter], run by `make test`)
cannot state: no import cycles at all, an installed wheel with one top-level name, and the light
entry points staying light at run time; torch a range for the user's environment, pinned for ours."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("branchscope.app", "branchscope.widgets", "branchscope.profiling")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), function-level imports included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        # Iterative Tarjan: (module, iterator over the modules it imports).
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles_anywhere_function_level_imports_included():
    graph = grimp.build_graph(*PACKAGES)
    assert len(graph.modules) > 40  # the whole tree was found, not an empty graph
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_name(tmp_path):
    """Built and unpacked outside the repo: `branchscope.profiling` imports, `app` and `profiling` do not."""
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("branchscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"branchscope"}
    assert "branchscope/assets/demos/inception.py" in names
    # Every package of the checkout is in the wheel (pyproject lists them one by one).
    packages = {f"branchscope/{p.parent.relative_to(ROOT).as_posix()}/__init__.py"
                for top in ("app", "widgets", "profiling", "assets") for p in (ROOT / top).rglob("__init__.py")}  # fmt: skip
    assert packages - set(names) == set()
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # -S: no site processing, so the editable install's import hook (a .pth file) stays off; the
    # venv's site-packages still provides numpy and the like.
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "import branchscope.profiling, branchscope.profiling.run.model_source as m\n"
        "assert branchscope.profiling.__file__.startswith(sys.argv[1]), branchscope.profiling.__file__\n"
        "assert [d.name for d in m.list_demos()], 'no demos in the wheel'\n"
        "import branchscope.profiling.run.interpreter as i, pathlib\n"  # --python's bootstrap finds profiling/ there
        "assert i.package_root() == pathlib.Path(sys.argv[1]).resolve() / 'branchscope', i.package_root()\n"
        "for name in ('app', 'profiling', 'widgets', 'assets'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} is importable')\n"
    )
    site = sysconfig.get_paths()["purelib"]
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(target), site], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cli_inspect_runs_without_torch_or_qt(tmp_path):
    code = (
        "import sys; from branchscope.app.cli import build_parser; build_parser();"
        "import branchscope.profiling.trace.analyses, branchscope.profiling.trace.reader;"
        "bad = [m for m in ('torch', 'PySide6') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_torch_is_a_lower_bound_and_make_pins_the_development_build():
    """`pip install .` into a user's environment keeps their torch (from the oldest the engines
    need, with no upper bound to lapse when a newer torch ships); `make` installs the local CPU
    build through constraints-dev.txt."""
    tomllib = pytest.importorskip("tomllib")
    from branchscope.profiling.run.interpreter import TORCH_OLDEST, WORKER_NEEDS

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [d for d in dependencies if re.match(r"torch\b", d)]
    assert torch == f"torch>={TORCH_OLDEST}", torch  # the runner's probe says the same; no upper bound
    for name, oldest in WORKER_NEEDS.items():  # what the probe checks in another environment
        assert f"{name}>={oldest}" in dependencies
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^CONSTRAINTS := constraints-dev\.txt$", makefile, re.M)
    assert re.search(r"^PIP_INSTALL := .* -c \$\(CONSTRAINTS\)$", makefile, re.M)
    assert re.search(r"^\$\(STAMP\): .*\$\(CONSTRAINTS\)", makefile, re.M)  # a new pin reinstalls
    assert "$(PIP_INSTALL) -e '.[test,dev]'" in makefile
    pins = [line.strip() for line in (ROOT / "constraints-dev.txt").read_text().splitlines()]
    assert "torch==2.13.0" in pins


#: Where a mode may be named: its own file, the registry, and the table of older folders' traits.
MODE_HOMES = ("profiling/run/modes/", "profiling/trace/mode_traits.py")
#: The names readers once asked for a mode by (now its traits: `profiling/trace/mode_traits.py`).
MODE_CONSTANTS = {"BASELINE_MODE", "FORK_MODE", "THREADS_MODE", "STREAMS_MODE", "SEQUENTIAL_MODE", "BRANCH_POOL_MODES"}


def _mode_tests(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of `tree` that ask whether a mode is one by name: a comparison with a mode's name (or a
    tuple of them), or with one of the old constants."""

    def names_a_mode(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_mode(e) for e in node.elts)
        return (isinstance(node, ast.Name) and node.id in MODE_CONSTANTS) or (
            isinstance(node, ast.Attribute) and node.attr in MODE_CONSTANTS
        )

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and any(names_a_mode(x) for x in (node.left, *node.comparators))
    ]


def test_no_reader_asks_for_a_mode_by_its_name():
    """A reader asks the run's mode traits (`mode_traits.ModeTraits`: its pool, the GIL, the
    baseline), never whether its mode is called "threads": a mode is its file and its registration."""
    from branchscope.profiling.run.modes import MODES

    names = {n for name, m in MODES.items() for n in (name, *m.aliases)}
    found = []
    for folder in ("app", "widgets", "profiling"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where.startswith(MODE_HOMES):
                continue
            found += [f"{where}:{line}" for line in _mode_tests(ast.parse(path.read_text()), names)]
    assert found == []


def test_the_mode_check_finds_a_test_by_name():
    tree = ast.parse('if info.mode == "threads" or run.mode in ("fork", "x") or m != BASELINE_MODE: pass')
    assert _mode_tests(tree, {"threads", "fork"}) == [1, 1, 1]
    assert _mode_tests(ast.parse('if kind == "gpu": pass'), {"threads"}) == []


#: The trace engine's openers: the modules that read a trace's events from its files.
OPENERS = {f"branchscope.profiling.trace.{m}" for m in ("sources", "merge", "rank_job", "snapshot", "reader", "opening")}
#: The openers' functions, wherever they are imported from (`branchscope.profiling` names some).
OPENER_NAMES = {"load_trace", "load_traces", "load_source", "load_many", "merge_traces", "open_view", "open_rank_job", "open_job"}


def _imported(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every `from module import name` in the file, function-level ones included."""
    tree = ast.parse(path.read_text())
    return {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def _opened_by(path: Path, modules: set[str]) -> list[str]:
    return sorted(f"{m}:{name}" for m, name in _imported(path) if m in modules or name in OPENER_NAMES)


def test_the_window_imports_no_opener():
    """The window composes; what it shows is read by its loader (app/trace_loader.py)."""
    assert _opened_by(ROOT / "app" / "main_window.py", OPENERS) == []


def test_one_loader_reads_what_the_window_shows():
    """Of the window's modules (app/, less the commands, which print what they read), only the loader
    calls the openers of events; recognising a source (`sources.open_source`) is not reading it."""
    readers = OPENERS - {"branchscope.profiling.trace.sources"}
    found = {
        path.relative_to(ROOT).as_posix(): _opened_by(path, readers)
        for path in sorted((ROOT / "app").rglob("*.py"))
        if not path.name.startswith(("cmd_", "cli"))
    }
    assert found.pop("app/trace_loader.py")  # the loader reads them
    assert {where: names for where, names in found.items() if names} == {}


def test_every_run_module_without_torch_is_held_to_it():
    """The run engine's modules that import no torch are named in the contract that keeps torch out
    of them, so that a module split off the runner or the worker cannot take torch in unseen."""
    tomllib = pytest.importorskip("tomllib")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (no_torch,) = [c for c in contracts if c.get("forbidden_modules") == ["torch"]]
    guarded = set(no_torch["source_modules"])
    for path in sorted((ROOT / "profiling" / "run").glob("*.py")):
        imports = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in imports if isinstance(n, ast.ImportFrom) and n.module}
        uses_torch = any(name == "torch" or name.startswith("torch.") for name in names)
        module = f"branchscope.profiling.run.{path.stem}"
        if path.stem != "__init__" and not uses_torch:
            assert module in guarded, f"{module} imports no torch: add it to the torch contract's source_modules"
