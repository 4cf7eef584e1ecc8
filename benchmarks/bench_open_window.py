"""Opening a large trace in the window: time to a drawn timeline, memory, responsiveness, frames.

For each trace (default: the generated 200 MB trace of `bench_load_trace.py`, and the 1 GB one too
with `--huge`; made in `--work` when missing), a fresh subprocess builds the `MainWindow` offscreen
at 1600x1000 (its settings, runs folder and caches in a temporary folder), calls
`open_in_background([path])` as File > Open does, and runs the Qt event loop until the loader's
`loaded` (or `failed`), then until the timeline has painted the trace once. It reports, beside
the JSON's size and events (its "ph" keys counted) and the events on the timeline:

- open_s: seconds from the open call to the end of that first paint; split into read_s (until
  `loaded` reaches the GUI thread: reading and indexing in the loader's thread), show_s (the
  window's slot listing and showing the trace, in the GUI thread) and first_paint_s;
- peak_rss_ratio: peak RSS growth during it (VmHWM after, reset before through /proc/self/clear_refs,
  minus VmRSS before; or, when larger, its RSS plus its children's USS sampled every 20 ms in a
  second, untimed run: the reader's forked child) divided by the JSON's size;
- max_event_loop_gap_ms: the longest gap between ticks of a 10 ms QTimer meanwhile (how long the
  window could not react), with the loader's phase when it ended ("show": the window's slot),
  and the longest before `loaded` (max_gap_reading_ms); whether the progress bar showed meanwhile;
- frame ms, zoomed out, to 1% and to 0.01% of the span: the median of 15 full repaints of the
  timeline view into a QImage, its ruler's ticks laid out again each time (as `bench_timeline.py`
  does); and of 15 pans by 0.1% of the range with the whole workspace (timeline and charts, which
  follow its axis) rendered after each: what the user waits for while dragging.

Goals (issue 13): the 1 GB trace opens within 20 s, peak RSS growth <= 2x the JSON, frames <= 33 ms.
Run: `.venv/bin/python benchmarks/bench_open_window.py [--quick | --huge] [TRACE ...]`. Prints a
table and writes benchmarks/results/open_window.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_load_trace import generated_trace, json_size, run_sampled

ROOT = Path(__file__).resolve().parent.parent
SIZE = (1600, 1000)
ZOOMS = {"zoomed out": 1.0, "1% of span": 0.01, "0.01% of span": 0.0001}
OPEN_GOAL_S, MEMORY_GOAL, FRAME_GOAL_MS = 20.0, 2.0, 33.0
HUGE_BYTES = 900_000_000  # the open-time goal is for the 1 GB trace
TIMEOUT_S = 500


def json_events(path: Path) -> int:
    """Events in the JSON (each has one "ph" key), counted without parsing it."""
    count, tail = 0, b""
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rb") as f:
        while chunk := f.read(1 << 24):
            count += (tail + chunk).count(b'"ph"')
            tail = chunk[-3:]
    return count


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _median_ms(draw, repeats: int = 15) -> float:
    """Median time of `draw(k)` over `repeats` calls, after two that warm caches (fonts, names)."""
    times = []
    for k in range(repeats + 2):
        t = time.perf_counter()
        draw(k)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times[2:])


def _frames(win, lo: int, hi: int) -> dict:
    """Frame times with [lo, hi] of the trace's clock shown (see the module docstring)."""
    from PySide6.QtGui import QImage

    from branchscope.app.pages.run_page import RunPage

    workspace = win.page(RunPage).workspace
    timeline = workspace.panel("timeline")
    timeline.set_time_range(lo, hi)
    image = QImage(timeline.size(), QImage.Format.Format_ARGB32_Premultiplied)
    whole = QImage(workspace.size(), QImage.Format.Format_ARGB32_Premultiplied)
    step = max(1, (hi - lo) // 1000)

    def repaint(_k: int) -> None:
        timeline.ruler.picture = None  # pyqtgraph's axis keeps its ticks in a picture
        timeline.render(image)

    def pan(k: int) -> None:
        timeline.set_time_range(lo + step * (k % 2), hi + step * (k % 2))
        workspace.render(whole)

    return {"timeline_ms": _median_ms(repaint), "workspace_pan_ms": _median_ms(pan)}


def child(path: str, tmp: Path) -> dict:
    """In a fresh process: open `path` in a window as the user does, and measure (module docstring).
    The window's settings, runs and caches go to `tmp`, never the user's."""
    os.environ.update(QT_QPA_PLATFORM="offscreen", XDG_CACHE_HOME=str(tmp), XDG_CONFIG_HOME=str(tmp))
    from PySide6.QtCore import QEvent, QObject, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from branchscope.app.main_window import MainWindow
    from branchscope.app.pages.run_page import RunPage
    from branchscope.app.run_controller import RunController

    app = QApplication([])
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    controller = RunController(runs_dir=tmp / "runs")
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False, kept_runs=False)
    win.auto_baseline = False
    win.resize(*SIZE)
    win.show()
    for _ in range(20):  # shown, laid out and painted once, empty
        app.processEvents()
        time.sleep(0.01)
    timeline = win.page(RunPage).timeline
    state: dict = {"phase": "start", "error": None, "drawn": None, "bar": False}
    ticks: list[tuple[float, str]] = []
    timer = QTimer()
    timer.setInterval(10)

    def tick() -> None:
        ticks.append((time.perf_counter(), state["phase"]))
        state["bar"] = state["bar"] or win.load_progress.isVisible()

    timer.timeout.connect(tick)

    def read(_result=None) -> None:  # what the loader read (or why it failed) reached the GUI thread
        state["phase"], state["read"] = "show", time.perf_counter()

    def shown(error=None) -> None:  # after the window's own slot: the trace is listed and shown
        state["error"], state["shown"] = error, time.perf_counter()
        if error is not None:
            app.quit()

    def after_paint() -> None:
        if state["drawn"] is None and timeline.trace is not None and timeline.painted_lanes:
            state["drawn"] = time.perf_counter()
            app.quit()

    class PaintWatch(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 (Qt API)
            if event.type() == QEvent.Type.Paint and state["phase"] == "show":
                QTimer.singleShot(0, after_paint)  # runs once this paint has ended
            return False

    watch = PaintWatch()
    timeline.viewport().installEventFilter(watch)
    win.loader.progress.connect(lambda phase, _fraction: state.update(phase=phase))
    list_opened = win._list_opened  # the loader's `done` for what the user opens: put it between ours, to time it

    def timed_list_opened(opened):
        read()
        count = list_opened(opened)
        shown()
        return count

    win._list_opened = timed_list_opened
    win.loader.failed.connect(read)
    win.loader.failed.connect(shown)
    QTimer.singleShot(TIMEOUT_S * 1000, app.quit)

    with open("/proc/self/clear_refs", "w") as f:  # restart the peak (VmHWM) from the RSS now
        f.write("5")
    rss_before = _status_kb("VmRSS")
    timer.start()
    t0 = time.perf_counter()
    ticks.append((t0, "start"))
    win.open_in_background([path])
    app.exec()
    timer.stop()
    peak = _status_kb("VmHWM")
    if state["error"] is not None or state["drawn"] is None:
        return {"error": state["error"] or f"no timeline drawn within {TIMEOUT_S} s"}
    ticks.append((state["drawn"], "show"))
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(ticks, ticks[1:])]
    gap, gap_phase = max(gaps)

    trace = timeline.trace
    start, end = trace.span()
    centre, frames = start + (end - start) // 2 + (end - start) // 7, {}  # not a special place
    for label, frac in ZOOMS.items():
        half = int((end - start) * frac / 2)
        frames[label] = _frames(win, *((start, end) if frac == 1.0 else (centre - half, centre + half)))
    return {
        "timeline_events": len(trace),
        "open_s": state["drawn"] - t0,
        "read_s": state["read"] - t0,
        "show_s": state["shown"] - state["read"],
        "first_paint_s": state["drawn"] - state["shown"],
        "peak_rss_growth_bytes": (peak - rss_before) * 1024,
        "rss_before_kb": rss_before,
        "max_event_loop_gap_ms": gap * 1e3,
        "max_gap_phase": gap_phase,
        "max_gap_reading_ms": max(g for g, phase in gaps if phase != "show") * 1e3,
        "progress_bar_shown": state["bar"],
        "timeline_size": [timeline.width(), timeline.height()],
        "frame_ms": frames,
    }


def bench_one(path: Path) -> dict:
    print(f"opening {path} in the window...", flush=True)
    cmd = [sys.executable, __file__, "--child", str(path)]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)  # timed: nothing else running
    if out.returncode != 0:
        return {"trace": path.name, "error": f"child failed: {out.stderr.strip()[-2000:]}"}
    row = {"trace": path.name, "json_bytes": json_size(path), "events": json_events(path)}
    row.update(json.loads(out.stdout.strip().splitlines()[-1]))
    if "error" in row:
        return row
    # Once more for memory only, sampled every 20 ms: the reader's forked child holds memory too
    # (see run_sampled), and the sampler's reads of /proc would slow the timed run.
    try:
        sampled_out, sampled = run_sampled(cmd, interval=0.02, env=env)
    except subprocess.CalledProcessError as exc:
        return {**row, "error": f"child failed: {exc.stderr.strip()[-2000:]}"}
    again = json.loads(sampled_out.strip().splitlines()[-1])
    growth = max(row["peak_rss_growth_bytes"], again.get("peak_rss_growth_bytes", 0),
                 sampled - again.get("rss_before_kb", 0) * 1024)  # fmt: skip
    row["peak_rss_growth_bytes"] = growth
    row["peak_rss_ratio"] = growth / row["json_bytes"]
    return row


def report(rows: list[dict]) -> None:
    print(f"\n{'trace':<26}{'JSON MB':>8}{'events':>11}{'open s':>8}{'read s':>8}{'show s':>8}{'RSS/JSON':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['trace']:<26}  failed: {r['error']}")
            continue
        print(
            f"{r['trace']:<26}{r['json_bytes'] / 1e6:>8.0f}{r['events']:>11,}{r['open_s']:>8.2f}{r['read_s']:>8.2f}"
            f"{r['show_s']:>8.2f}{r['peak_rss_ratio']:>9.2f}"
        )
        print(
            f"  event loop blocked at most {r['max_event_loop_gap_ms']:.0f} ms (in {r['max_gap_phase']}),"
            f" {r['max_gap_reading_ms']:.0f} ms while reading; progress bar shown: {r['progress_bar_shown']}"
        )
        w, h = r["timeline_size"]
        print(f"  frames, median of 15: timeline repaint ({w}x{h}) / workspace pan")
        for label, f in r["frame_ms"].items():
            print(f"    {label:<15}{f['timeline_ms']:7.2f} ms / {f['workspace_pan_ms']:7.2f} ms")
    print()
    for r in rows:
        if "error" in r:
            continue
        worst = max(max(f.values()) for f in r["frame_ms"].values())
        goals = [
            (f"peak RSS growth {r['peak_rss_ratio']:.2f}x the JSON", r["peak_rss_ratio"] <= MEMORY_GOAL, "<= 2x"),
            (f"slowest frame {worst:.1f} ms", worst <= FRAME_GOAL_MS, f"<= {FRAME_GOAL_MS:g} ms"),
        ]
        if r["json_bytes"] >= HUGE_BYTES:
            goals.insert(0, (f"open {r['open_s']:.1f} s", r["open_s"] <= OPEN_GOAL_S, f"<= {OPEN_GOAL_S:g} s"))
        for text, ok, goal in goals:
            print(f"{r['trace']}: {text} (goal {goal}): {'met' if ok else 'NOT met'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="trace files (default: the generated 200 MB trace)")
    ap.add_argument("--huge", action="store_true", help="the generated 1 GB trace too")
    ap.add_argument("--quick", action="store_true", help="the generated 200 MB trace only")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "branchscope-bench"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "open_window.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="bench-open-window-") as tmp:
            print(json.dumps(child(args.child, Path(tmp))))
        return 0
    paths = [Path(t) for t in args.traces]
    if not paths:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        sizes = (200, 1000) if args.huge and not args.quick else (200,)
        paths = [generated_trace(work, mb) for mb in sizes]
    rows = [bench_one(path) for path in paths]
    report(rows)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine, "size": SIZE, "traces": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
