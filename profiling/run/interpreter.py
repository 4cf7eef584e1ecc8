"""The worker's Python (`--python PATH`): the user's environment, with their torch and their model's
dependencies, while the runner, the CLI and the window stay in branchscope's own.

That interpreter does not have branchscope installed, and nothing is installed into it: the worker
starts as `PATH -I -c BOOTSTRAP ROOT ARGS...`, where the bootstrap makes `branchscope` a package
whose `__path__` is ROOT, the folder holding branchscope's `profiling/` (the repository in an
editable install, site-packages/branchscope in a wheel's), then runs the worker module as
`__main__`. `-I` stays: nothing from the current folder, PYTHONPATH or the user's site-packages
slips in.

Before a run touches its folder, `check(path)` asks that interpreter, in a short probe under a
timeout (`PATH -I -c PROBE ROOT`), what it is: its Python version (3.10 or newer), whether its GIL
is on, torch and its version, and whether what the worker imports there (`WORKER_NEEDS`, and the
worker module itself through the bootstrap) is importable. What is missing is said in one line
(`InterpreterError`, which the runner turns into `error: …` and exit 2). A probe that passed is
kept for the rest of the process (a sweep asks once).

No torch here: the runner imports this; the probe imports torch in the other process.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from branchscope.profiling.run.processes import Containment
from branchscope.profiling.run.protocol import WORKER_MODULE
from branchscope.profiling.trace.records import MAX_ANSWER_BYTES, MalformedAnswer, decode_answer

#: The oldest Python the worker runs on (pyproject's requires-python).
PYTHON_OLDEST = (3, 10)
#: The oldest torch the worker's engines need: torch.export non-strict (2.3) and
#: `_ExperimentalConfig(profile_all_threads=True)` for threads mode (2.7); pyproject's lower bound.
TORCH_OLDEST = "2.7"
#: The newest torch a run was tried with (docs/environment.md's table). pyproject has no upper bound:
#: a newer torch runs, with one warning naming the tested range (`untested_torch_warning`).
TORCH_NEWEST_TESTED = "2.14.1"
#: What the worker imports besides torch and the standard library, with the oldest version of each
#: it works with (pyproject's dependencies). isal is optional there (gzip is the fallback).
WORKER_NEEDS = {"msgspec": "0.18", "psutil": "5.9", "numpy": "1.26"}
#: The modes' registry, whose `unavailable_here` the probe calls (each mode's `check` of that torch).
_MODES_MODULE = "branchscope.profiling.run.modes"
#: Seconds the probe may take (it imports torch: a CUDA build on a busy machine takes a while).
PROBE_TIMEOUT_S = 120.0
#: Marks the probe's answer among whatever importing torch prints.
_ANSWER = "branchscope-probe: "
#: The end of the probe's stderr kept for the message when it does not answer.
_STDERR_KEEP = 64 * 1024

#: Makes `branchscope` the package of the folder sys.argv[1] names (removed from sys.argv), without
#: installing anything: its subpackages are then found there as they would be installed.
_PACKAGE = (
    "import sys, importlib.machinery, importlib.util\n"
    "spec = importlib.machinery.ModuleSpec('branchscope', None, is_package=True)\n"
    "spec.submodule_search_locations.append(sys.argv.pop(1))\n"
    "sys.modules['branchscope'] = importlib.util.module_from_spec(spec)\n"
)
#: `python -I -c BOOTSTRAP ROOT ARGS...`: the worker as `__main__`, with ARGS as its arguments.
BOOTSTRAP = _PACKAGE + f"import runpy\nrunpy.run_module({WORKER_MODULE!r}, run_name='__main__', alter_sys=True)\n"

#: `python -I -c PROBE ROOT`: one line `_ANSWER + JSON`. Written for any Python 3 (even one too old
#: to run the worker, which it only names), and the GIL read after the imports (a free-threaded
#: Python turns it back on for an extension that does not declare itself safe without it).
PROBE = (
    _PACKAGE
    + "import json, importlib\n"
    + f"needs = {list(WORKER_NEEDS)!r}\n"
    + f"oldest = {PYTHON_OLDEST!r}\n"
    + "answer = {'python': '%d.%d.%d' % tuple(sys.version_info[:3]), 'executable': sys.executable,\n"
    "          'torch': None, 'torch_error': None, 'missing': {}, 'versions': {}, 'worker_error': None,\n"
    "          'mode_problems': {}}\n"
    "def why(exc):\n"
    "    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__\n"
    "if tuple(sys.version_info[:2]) >= oldest:\n"
    "    for name in needs:\n"
    "        try:\n"
    "            answer['versions'][name] = str(getattr(importlib.import_module(name), '__version__', ''))\n"
    "        except Exception as exc:\n"
    "            answer['missing'][name] = why(exc)\n"
    "    try:\n"
    "        import torch\n"
    "        answer['torch'] = str(torch.__version__)\n"
    "    except Exception as exc:\n"
    "        answer['torch_error'] = why(exc)\n"
    "    if not answer['missing']:\n"
    "        try:\n"
    f"            importlib.import_module({WORKER_MODULE!r})\n"
    "        except ImportError as exc:\n"
    "            answer['missing'][exc.name or '?'] = why(exc)\n"
    "        except Exception as exc:\n"
    "            answer['worker_error'] = '%s: %s' % (type(exc).__name__, why(exc))\n"
    "        else:\n"
    f"            answer['mode_problems'] = importlib.import_module({_MODES_MODULE!r}).unavailable_here()\n"
    "gil = getattr(sys, '_is_gil_enabled', None)\n"
    "answer['gil'] = bool(gil()) if gil is not None else True\n"
    f"sys.stdout.write({_ANSWER!r} + json.dumps(answer) + '\\n')\n"
)


class ProbeAnswer(msgspec.Struct, kw_only=True):
    """The probe's answer (the JSON after `_ANSWER`), decoded strictly (`records.decode_answer`):
    a field of the wrong type is a malformed answer, not a guess."""

    python: str
    executable: str | None = None
    torch: str | None = None
    torch_error: str | None = None
    missing: dict[str, str] = {}
    versions: dict[str, str] = {}
    worker_error: str | None = None
    gil: bool = True
    #: Why each mode that cannot run with that torch cannot (`modes.unavailable_here`): {name: line}.
    mode_problems: dict[str, str] = {}


class InterpreterError(Exception):
    """The interpreter cannot run the worker; the message is one line, naming the path and what is wrong."""


@dataclass(frozen=True)
class Interpreter:
    """The Python a run's worker runs under, as its probe found it."""

    #: The path the worker is started with (absolute; symbolic links kept: a venv's python is one).
    executable: Path
    #: Its version, "3.11.7".
    python: str
    #: torch's version there ("2.14.1+cu130").
    torch: str
    #: Whether its GIL is on once the worker's modules are imported (False: a free-threaded Python).
    gil: bool
    #: Why each mode that cannot run there cannot (fork without TorchScript): {name: one line}.
    mode_problems: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: "/x/bin/python (Python 3.11.7, torch 2.14.1, GIL on)"."""
        return f"{self.executable} (Python {self.python}, torch {self.torch}, GIL {'on' if self.gil else 'off'})"


def package_root() -> Path:
    """The folder whose `profiling/` is `branchscope.profiling`: the repository of an editable
    install, site-packages/branchscope of a wheel's."""
    import branchscope.profiling

    return Path(branchscope.profiling.__file__).resolve().parent.parent


def locate(python: Path | str) -> Path:
    """`--python`'s value as the path to start: a path made absolute (symbolic links kept, or a
    venv's python would lose its venv), or a bare name (python3.12) looked up in PATH's absolute
    folders (never the current one). Unchecked: `check` says what is wrong with it."""
    text = os.fspath(python)
    if os.sep not in text:
        folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]
        found = shutil.which(text, path=os.pathsep.join(folders))
        if found:
            return Path(found)
    return Path(os.path.abspath(text))


def worker_command(python: Path, argv: list[str], module: str = WORKER_MODULE) -> list[str]:
    """The worker under `python` (see the module docstring), with `argv` as its arguments; `module`:
    another worker module of branchscope's (the paired worker), run the same way."""
    bootstrap = BOOTSTRAP if module == WORKER_MODULE else _PACKAGE + (
        f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return [os.fspath(python), "-I", "-c", bootstrap, os.fspath(package_root()), *argv]


_checked: dict[tuple[Path, int, int], Interpreter] = {}


def check(python: Path | str, timeout: float = PROBE_TIMEOUT_S) -> Interpreter:
    """What `python` is (see the module docstring), or InterpreterError saying in one line why the
    worker cannot run there. A probe that passed is kept for the process's life."""
    path = locate(python)
    flag = f"--python {python}"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InterpreterError(f"{flag}: no such file") from None
    except OSError as exc:
        raise InterpreterError(f"{flag}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise InterpreterError(f"{flag}: is a folder, not a Python executable (its bin/python, perhaps?)")
    if not os.access(path, os.X_OK):
        raise InterpreterError(f"{flag}: is not executable")
    key = (path, st.st_ino, st.st_mtime_ns)
    if key in _checked:
        return _checked[key]
    answer = _probe(path, flag, timeout)
    found = _judge(path, flag, answer)
    _checked[key] = found
    return found


def modes_unavailable(python: Path | str | None) -> dict[str, str]:
    """Why each mode that cannot run under `python` (None: this process's own) cannot, {name: one
    line}, from that interpreter's probe (`check`: once per interpreter and process), so that the
    window, a sweep and `speedup` leave such a mode out before any run; InterpreterError as `check`."""
    return check(python if python is not None else sys.executable).mode_problems


def _probe(path: Path, flag: str, timeout: float) -> ProbeAnswer:
    """Runs the probe as a child contained like a worker (`processes.Containment`: its group, the
    run's token, a cgroup where one can be made, orphans reaped), reads its stdout up to the answer
    line (never to the end of a pipe that something it started may hold), then stops it and all it
    started. The answer decoded, or InterpreterError saying in one line what happened."""
    command = [os.fspath(path), "-I", "-c", PROBE, os.fspath(package_root())]
    # cwd "/": the caller's folder may be gone (importing torch then aborts), and nothing there is read.
    with Containment() as contained:
        try:
            proc = contained.spawn(command, env=dict(os.environ), cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise InterpreterError(f"{flag}: cannot be run ({exc.strerror or exc})") from None
        reading = _AnswerReader(proc)
        try:
            answer = reading.read(timeout)
        finally:
            reading.close()
        returncode = proc.poll()
    if answer is not None:
        try:
            return decode_answer(answer, ProbeAnswer, "the probe's answer")
        except MalformedAnswer as exc:
            raise InterpreterError(f"{flag}: {exc}") from None
    if returncode is None:
        raise InterpreterError(f"{flag}: did not answer within {timeout:g} s (importing torch there hangs?)")
    last = reading.stderr.decode("utf-8", "replace").strip().splitlines()
    how = f"exit code {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"
    held = "; a process it started kept its output open and was stopped" if reading.held else ""
    raise InterpreterError(
        f"{flag}: is not a Python that can run the worker ({how}" + (f": {last[-1]}" if last else "") + f"){held}"
    )


class _AnswerReader:
    """The probe's stdout read line by line up to the line that starts with `_ANSWER` (at most
    MAX_ANSWER_BYTES of it kept), its stderr's end kept, both without blocking: the probe's own exit
    ends the reading once what it wrote is read, whoever else holds the pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.pipes = {proc.stdout.fileno(): proc.stdout, proc.stderr.fileno(): proc.stderr}
        self.out_fd = proc.stdout.fileno()
        for fd in self.pipes:
            os.set_blocking(fd, False)
        self.open = set(self.pipes)
        self.stdout = b""
        self.stderr = b""
        #: The probe exited but its pipes stayed open: something it started holds them.
        self.held = False

    def read(self, timeout: float) -> bytes | None:
        """The answer (the JSON after `_ANSWER`, possibly cut at the bound), or None once the probe
        exited without one or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None
            answer = self._drain()
            if answer is not None:
                return answer
            if exited or not self.open:
                if not exited:  # it closed both pipes but runs on: its exit says the rest, within the timeout
                    try:
                        self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        pass
                self.held = bool(self.open) and exited
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            select.select(list(self.open), [], [], min(left, 0.05))

    def _drain(self) -> bytes | None:
        """Reads what is there now; the answer once its line is complete (or past the bound)."""
        for fd in list(self.open):
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    self.open.discard(fd)
                    if fd == self.out_fd and self.stdout.startswith(_ANSWER.encode()):
                        return self.stdout[len(_ANSWER) :]  # the answer's last line, without its newline
                    break
                if fd != self.out_fd:
                    self.stderr = (self.stderr + chunk)[-_STDERR_KEEP:]
                    continue
                answer = self._lines(chunk)
                if answer is not None:
                    return answer
        return None

    def _lines(self, chunk: bytes) -> bytes | None:
        mark = _ANSWER.encode()
        self.stdout += chunk
        while b"\n" in self.stdout:
            line, self.stdout = self.stdout.split(b"\n", 1)
            if line.startswith(mark):
                return line[len(mark) :]
        if len(self.stdout) > MAX_ANSWER_BYTES + len(mark):
            if self.stdout.startswith(mark):
                return self.stdout[len(mark) :]  # too large: decode_answer says so
            self.stdout = b""  # a line too long to be the answer: whatever importing torch printed
        return None

    def close(self) -> None:
        for pipe in self.pipes.values():
            pipe.close()


def _judge(path: Path, flag: str, answer: ProbeAnswer) -> Interpreter:
    python = answer.python or "?"
    if _version(python)[:2] < PYTHON_OLDEST:
        oldest = ".".join(map(str, PYTHON_OLDEST))
        raise InterpreterError(f"{flag}: is Python {python}; branchscope's worker needs Python {oldest} or newer")
    missing, versions = answer.missing, answer.versions
    old = [f"{name} {versions[name]} (needs {low}+)" for name, low in WORKER_NEEDS.items()
           if versions.get(name) and _version(versions[name]) < _version(low)]  # fmt: skip
    torch = answer.torch
    if not torch:
        message = f"{flag}: torch is not importable there ({answer.torch_error or 'no torch'})"
        if missing or old:
            message += "; also missing: " + ", ".join([*missing, *old])
        raise InterpreterError(message)
    if missing or old:
        raise InterpreterError(
            f"{flag}: branchscope's worker needs {', '.join([*missing, *old])} there (torch {torch} is); "
            f"install {'them' if len(missing) + len(old) > 1 else 'it'} into that environment"
        )
    if answer.worker_error:
        raise InterpreterError(f"{flag}: branchscope's worker cannot be imported there ({answer.worker_error})")
    return Interpreter(executable=path, python=python, torch=torch, gil=answer.gil, mode_problems=answer.mode_problems)


def _version(text: str) -> tuple[int, ...]:
    """The leading numbers of a version ("2.14.1+cu130" → (2, 14, 1); "3.13.0rc1" → (3, 13, 0))."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def torch_older_than_oldest(torch: str) -> bool:
    """Whether a torch version is older than the oldest branchscope's engines need (`TORCH_OLDEST`)."""
    return _version(torch) < _version(TORCH_OLDEST)


def untested_torch_warning(torch: str | None) -> str | None:
    """The one warning line for a torch newer than the newest tested (`TORCH_NEWEST_TESTED`), or
    None (no torch known, or one in the tested range). A local build of the newest tested
    ("2.14.1+cu130") is that version; a pre-release of the next ("2.15.0a0") is newer."""
    if not torch or _version(torch)[:3] <= _version(TORCH_NEWEST_TESTED):
        return None
    return (
        f"torch {torch} is newer than the newest tested ({TORCH_OLDEST}–{TORCH_NEWEST_TESTED}); it runs, but a "
        "change of torch's may break discovery, a mode or the trace: if so, try it under torch "
        f"{TORCH_NEWEST_TESTED} (--python)"
    )


__all__ = [
    "BOOTSTRAP",
    "PROBE",
    "PYTHON_OLDEST",
    "TORCH_NEWEST_TESTED",
    "TORCH_OLDEST",
    "WORKER_NEEDS",
    "Interpreter",
    "InterpreterError",
    "check",
    "locate",
    "modes_unavailable",
    "package_root",
    "worker_command",
]
