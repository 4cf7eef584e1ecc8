"""The `branchscope` command: one parser, each sub-command's options and handler in its own module.

No Qt and no torch are imported here: `inspect` and `profile` must start fast and work headless,
and the GUI modules are imported only when the window is asked for.
"""

# Nothing but os and sys (loaded by every interpreter before any code runs) before `entry()` has
# taken the current folder off sys.path: argparse, json, numpy… are imported after it.
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing first
if TYPE_CHECKING:
    import argparse


def forget_current_folder() -> None:
    """Takes the current folder off `sys.path`: '' (what `PYTHONPATH=:/x` or `python -c` puts there),
    ".", a relative entry, and the current folder by its full path. Whatever the user runs us from
    (their project, a folder of downloads), no `json.py` or `numpy.py` there is ever imported.
    Entries that cannot be resolved are taken off too."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # a current folder that was deleted
        here = None

    def unsafe(entry: str) -> bool:
        if not isinstance(entry, str) or not os.path.isabs(entry):
            return True
        try:
            return here is not None and os.path.realpath(entry) == here
        except (OSError, ValueError):
            return True

    sys.path[:] = [e for e in sys.path if not unsafe(e)]


def build_parser() -> "argparse.ArgumentParser":
    import argparse

    from branchscope.app import (
        cmd_compare,
        cmd_export,
        cmd_gui,
        cmd_inspect,
        cmd_memory,
        cmd_profile,
        cmd_speedup,
        cmd_sweep,
    )

    parser = argparse.ArgumentParser(
        prog="branchscope",
        description="Profile and visualize parallel branches, threads, streams and memory of PyTorch models.",
    )
    cmd_gui.add_window_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cmd_inspect.register(sub)
    cmd_profile.register(sub)
    cmd_compare.register(sub)
    cmd_sweep.register(sub)
    cmd_speedup.register(sub)
    cmd_memory.register(sub)
    cmd_export.register(sub)
    cmd_gui.register(sub)
    parser.set_defaults(handler=cmd_gui.run_default)
    return parser


def main(argv: list[str] | None = None) -> int:
    from branchscope.profiling.run.user_files import ModeFileError

    try:
        parser = build_parser()  # imports the mode registry, and the mode files BRANCHSCOPE_MODES names
    except ModeFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


#: The exit status when stdout's reader left before all was printed (`branchscope inspect X | head`):
#: 128 + SIGPIPE, as `cat` or `grep` give a shell there (seen only under `set -o pipefail`).
EXIT_STDOUT_CLOSED = 141


def stdout_reader_gone(fd: int | None = None) -> bool:
    """Whether stdout (or descriptor `fd`) is a pipe or socket whose reader has gone (poll says
    POLLERR or POLLHUP), so a BrokenPipeError came from printing, not from a pipe of our own to
    another process."""
    import select

    try:
        if fd is None:
            fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no stdout, or one without a descriptor
        return False


def quiet_stdout() -> None:
    """Points stdout's descriptor at /dev/null, so what is still buffered (flushed at exit) goes
    nowhere instead of raising again in the interpreter's shutdown ("Exception ignored …")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def entry() -> int:
    """The `branchscope` command (pyproject's [project.scripts]). Every sub-command that prints ends
    quietly, exit 141 (`EXIT_STDOUT_CLOSED`), when its reader closes stdout early (`| head`): no
    BrokenPipeError traceback. What a run started is stopped by its own `finally` on the way out."""
    forget_current_folder()
    exited: SystemExit | None = None  # argparse's --help and usage errors: their own exit status
    try:
        try:
            result = main()
        except SystemExit as exc:
            exited, result = exc, 0
        finally:  # what print() left in the buffer is written here, not at exit
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        quiet_stdout()
        if exited is not None:  # the same status whether its text was still buffered or not
            raise exited from None
        return EXIT_STDOUT_CLOSED
    if exited is not None:
        raise exited
    return result


if __name__ == "__main__":
    sys.exit(entry())
