"""`branchscope` (the window) and `branchscope open TRACE...`; `--screenshot OUT.png` for pictures.

Qt is imported only inside the handlers, so `branchscope inspect` and `branchscope profile` stay
Qt-free. `--screenshot` draws the window offscreen at 1600x1000, or `--size WxH` (after the run, or
after opening the traces), saves it and exits: for the docs, teaching material, and checking the
GUI where there is no display. It says the size of the picture it wrote, which is the size asked.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from branchscope.app.pages import page_keys
from branchscope.app.screenshot_size import add_size_argument, parse_size, settle_at, wrote_line

#: How long `--screenshot` waits for the run it draws.
SCREENSHOT_RUN_TIMEOUT_S = 900


#: The window's centre tabs, as `--tab` names them (MainWindow.tabs, in order): its pages' keys.
TABS = page_keys()


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("window (without a command)")
    g.add_argument("--demo", metavar="NAME", help="the demo to run first (default: inception)")
    from branchscope.profiling.run.modes import BASELINE_MODE, command_line_names

    g.add_argument("--mode", choices=command_line_names(), help=f"the mode of the first run (default: {BASELINE_MODE})")
    g.add_argument("--interop", type=int, metavar="N", help="inter-op threads of the first run")
    g.add_argument("--intra", type=int, metavar="N", help="intra-op threads of the first run")
    g.add_argument("--steps", type=int, metavar="K", help="profiled steps of the first run (default 5)")
    g.add_argument("--python", metavar="PATH", help="the Python every run's worker runs under (your environment's "
                   "bin/python, with your torch; default: the window's setting, else branchscope's own)")  # fmt: skip
    g.add_argument(
        "--screenshot",
        metavar="OUT.png",
        type=Path,
        help="draw the window offscreen at 1600x1000 (or --size) once the first run is shown, save it, and exit",
    )
    add_size_argument(g, "the window")
    add_presentation_argument(g)


def add_presentation_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--presentation", action="store_true",
        help="presentation size, for a class or a projector: text of at least 16 px (View → Presentation size)",
    )  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "open",
        help="open trace files in the window",
        description=(
            "Open traces in the window: torch.profiler or Chrome trace files (.json, .json.gz), run "
            "folders, a distributed run or a folder of rank traces, allocator snapshots, or a sweep "
            "folder. Several rank traces of one job open as one run; --screenshot draws the window "
            "offscreen to a PNG instead."
        ),
    )
    p.add_argument(
        "traces", nargs="+", metavar="PATH",
        help="torch.profiler / Chrome trace (.json, .json.gz), run folder or sweep folder",
    )  # fmt: skip
    p.add_argument(
        "--screenshot",
        metavar="OUT.png",
        type=Path,
        help="draw the window offscreen at 1600x1000 (or --size), save it, and exit",
    )
    add_size_argument(p, "the window")
    add_presentation_argument(p)
    p.add_argument(
        "--tab", choices=TABS, help="the tab to show (default: the one that fits what was opened)"
    )
    p.add_argument(
        "--zoom-step", type=int, metavar="N",
        help="show profiled step N alone on the time axis (its label \"step N\", or torch.profiler's \"ProfilerStep#N\"; the first when ranks have several)",
    )  # fmt: skip
    p.set_defaults(handler=run_open)


def display_available() -> bool:
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform.startswith(("offscreen", "minimal", "vnc", "eglfs", "linuxfb")):
        return True
    if sys.platform.startswith("linux") or "bsd" in sys.platform:
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _program() -> str:
    """How the user invoked us (`.venv/bin/branchscope` from `make run`), for hints they can paste."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "branchscope"
    return argv0 if os.path.basename(argv0) == "branchscope" else "branchscope"


def _no_display(screenshot_hint: str) -> int:
    screenshot_hint = screenshot_hint.replace("branchscope", _program(), 1)
    print(
        "branchscope: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset); "
        f"for a picture of it instead run: {screenshot_hint}",
        file=sys.stderr,
    )
    return 1


def _bad_size(args: argparse.Namespace) -> str | None:
    """Why `--size` cannot be drawn (None: it can, or it was not given)."""
    try:
        parse_size(getattr(args, "size", None))
    except ValueError as exc:
        return str(exc)
    return None


def run_default(args: argparse.Namespace) -> int:
    """The window on a demo (inception, sequential unless told otherwise), or its screenshot."""
    from branchscope.app.cli_text import fail

    if (bad := _bad_size(args)) is not None:
        return fail(bad)
    if not getattr(args, "screenshot", None) and not display_available():
        return _no_display("branchscope --screenshot window.png")
    return _run_window(args, traces=[])


def run_open(args: argparse.Namespace) -> int:
    from branchscope.app.cli_text import fail

    if (bad := _bad_size(args)) is not None:
        return fail(bad)
    if not args.screenshot and not display_available():
        return _no_display("branchscope open TRACE --screenshot window.png")
    # Refused before the window opens: missing paths, folders, and what is not a regular file
    # (a FIFO would block the open for ever, /dev/zero never ends).
    from branchscope.profiling import TraceFormatError
    from branchscope.profiling.trace.sources import open_source

    for t in args.traces:
        try:
            open_source(t)  # a trace file, a run folder, a folder of ranks, a snapshot or a sweep
        except (TraceFormatError, OSError) as exc:
            return fail(exc)
    return _run_window(args, traces=list(args.traces))


def _run_window(args: argparse.Namespace, traces: list[str]) -> int:
    screenshot: Path | None = getattr(args, "screenshot", None)
    if screenshot is not None:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    # Before Qt is loaded: a library its xcb plugin links that is missing would make it abort (134)
    # blaming xcb-cursor0; one line naming the missing libraries and their packages instead.
    from branchscope.app import xcb_check

    hint = "branchscope open TRACE --screenshot window.png" if traces else "branchscope --screenshot window.png"
    missing = xcb_check.check(hint=hint.replace("branchscope", _program(), 1))
    if missing:
        from branchscope.app.cli_text import fail

        return fail(missing)
    from PySide6.QtWidgets import QApplication

    from branchscope.app.main_window import MainWindow
    from branchscope.app.pages.compare_page import ComparePage
    from branchscope.app.pages.sweep_page import SweepPage

    app = QApplication.instance() or QApplication([sys.argv[0]])
    if screenshot is not None:
        from branchscope.app.screenshot_size import drop_offscreen_size_hint_warning

        drop_offscreen_size_hint_warning()
    # Python's cyclic collector runs in whichever thread allocates when it is due: in the trace
    # loader's thread it could destroy Qt objects of the GUI thread (cycles through pyqtgraph items
    # and their signal lambdas) while the GUI thread uses Qt. pyqtgraph's GarbageCollector turns the
    # automatic collector off and collects from a timer, in the GUI thread only.
    from pyqtgraph.util.garbage_collector import GarbageCollector

    collector = GarbageCollector(interval=1.0)  # noqa: F841 - alive as long as the window runs
    app.setApplicationName("branchscope")
    app.setOrganizationName("branchscope")
    # A picture shows what was asked for: not the runs kept from earlier windows, nor a baseline
    # run started after the one asked for; nor the answer of a probe that may come before or after
    # it is drawn (which modes the worker's Python can run: every mode is offered in a picture).
    window = MainWindow(kept_runs=screenshot is None, probe_modes=screenshot is None)
    window.auto_baseline = screenshot is None
    if getattr(args, "presentation", False):
        window.menus.set_presentation(True, remember=False)  # this window's, not kept for the next
    # An error raised in a slot or while a view paints goes to a dialog (and, for --screenshot,
    # fails the picture) instead of a traceback the window would carry on behind.
    previous_hook = sys.excepthook
    sys.excepthook = window.failures.report_exception
    window.failures.echo_tracebacks = screenshot is None
    try:
        return _show_window(app, window, args, traces, screenshot)
    finally:
        sys.excepthook = previous_hook
        # Destroy the window while Python still runs: left to PySide's cleanup at exit, pyqtgraph
        # items of the sweep heatmap call back into Python during finalisation and crash (exit 139).
        import shiboken6

        window.controller.shutdown()
        window.page(SweepPage).shutdown()
        window.page(ComparePage).shutdown()
        shiboken6.delete(window)


def _show_window(app, window, args: argparse.Namespace, traces: list[str], screenshot: Path | None) -> int:
    from PySide6.QtCore import QEventLoop, QTimer

    from branchscope.app.pages.run_page import RunPage
    from branchscope.profiling.run.modes import BASELINE_MODE

    size = parse_size(getattr(args, "size", None))
    if screenshot is not None:
        window.resize(*size)
    window.show()

    if traces:
        listed = len(window.run_list)
        opened = window.open_trace_files(traces)
        if screenshot is not None and opened < len(traces):
            box = window.message_box
            print(f"error: {box.text() if box else 'a trace could not be opened'}", file=sys.stderr)
            return 2
        if getattr(args, "zoom_step", None) is not None and not window.page(RunPage).zoom_to_step(args.zoom_step):
            print(f"error: {traces[-1]} has no profiled step {args.zoom_step} (its steps: "
                  f"{', '.join(window.page(RunPage).step_labels()) or 'none'})", file=sys.stderr)  # fmt: skip
            window.close()
            return 2
        if getattr(args, "tab", None):
            window.tabs.setCurrentIndex(TABS.index(args.tab))
        if getattr(args, "tab", None) == "compare" and len(window.run_list) - listed >= 2:
            window.compare_entries(list(range(listed, len(window.run_list))))  # what was opened, compared
    else:
        try:
            window.set_controls(
                demo=getattr(args, "demo", None) or "inception",
                mode=getattr(args, "mode", None) or BASELINE_MODE,
                interop=getattr(args, "interop", None),
                intra=getattr(args, "intra", None),
                steps=getattr(args, "steps", None),
                python=getattr(args, "python", None),
            )
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if screenshot is not None:
            outcome: dict[str, str] = {}
            loop = QEventLoop()
            window.lifecycle.opened.connect(lambda _r: loop.quit())  # its trace read, listed or not
            window.controller.failed.connect(lambda m, _d: (outcome.setdefault("error", m), loop.quit()))
            QTimer.singleShot(
                SCREENSHOT_RUN_TIMEOUT_S * 1000,
                lambda: (outcome.setdefault("error", "timed out"), loop.quit()),
            )
            if not window.start_run():  # the runs folder cannot be made: nothing ran
                window.close()
                print(f"error: {window.message_box.text() if window.message_box else 'the run cannot start'}",
                      file=sys.stderr)  # fmt: skip
                return 2
            # A runner that cannot start fails inside start_run(): then there is nothing to wait for.
            if window.controller.is_running():
                loop.exec()
            # A failed run, or one whose trace cannot be read, makes no picture (one of an empty
            # window would pass for a result in a docs build): say why on stderr and exit 1.
            failure = None
            if "error" in outcome:
                failure = f"the run failed: {outcome['error']}"
            elif not window.run_list.entries:
                box = window.message_box
                failure = box.text() if box else "the run left nothing to show"
            if failure is not None:
                window.controller.shutdown()
                window.close()
                print(f"error: {failure}", file=sys.stderr)
                return 1
        else:
            QTimer.singleShot(0, window.start_first_run)

    if screenshot is None:
        return app.exec()
    settle_at(app, window, size)
    drawn = (window.width(), window.height())
    ok = window.failures.save_screenshot(screenshot)
    window.controller.shutdown()
    window.close()
    if window.failures.messages:  # a view failed while drawing: the picture would show a broken window
        print(f"error: {window.failures.messages[0]}", file=sys.stderr)
        return 1
    if not ok:
        print(f"error: could not write {screenshot}", file=sys.stderr)
        return 1
    print(wrote_line(screenshot, drawn, size))
    return 0
