"""Timeline drawing speed: a full repaint at 1600x900 with 10k, 1M and 10M events, and opening a
large real trace to a drawn timeline.

Targets (issue 4): with 1,000,000 events in 64 lanes a repaint takes <= 16 ms (median) zoomed out,
zoomed to 1% and to 0.01% of the span, and at most 2x the time with 10,000 events; with
10,000,000 events <= 33 ms; opening a 50 MB trace to a drawn timeline <= 2 s.

A repaint is `TimelineView.render(QImage)` offscreen, i.e. everything the widget paints (events,
names, lane labels, ruler): the view is a pyqtgraph scene (the ruler pyqtgraph's axis, the lanes
one graphics item in a ViewBox), and the ruler's cached picture is dropped before every repaint so
each one lays out its ticks again, as after a zoom. Run: QT_QPA_PLATFORM=offscreen python
benchmarks/bench_timeline.py [--quick] [--out FILE]. Prints a table and writes
benchmarks/results/timeline.json (or FILE).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from branchscope.profiling.trace.model import Lane, Trace, build_trace  # noqa: E402

WIDTH, HEIGHT = 1600, 900
LANES = 64
BIG_TRACE = ROOT.parent / "shared" / "traces" / "hta_gpu_memory_2streams.json.gz"


def synthetic_trace(n_events: int, n_lanes: int = LANES, seed: int = 0) -> Trace:
    """`n_events` CPU-op-like events in `n_lanes` lanes: top-level ops with a nested child each.

    Durations are log-normal (median ~4 µs), gaps exponential (mean ~3 µs), names drawn from 300
    operator names, a fifth of the lanes are GPU streams: the texture of a real trace, dense
    enough that zoomed out every pixel column of every lane holds many events.
    """
    rng = np.random.default_rng(seed)
    n_top = n_events // 2
    lane_of_top = np.sort(rng.integers(0, n_lanes, n_top)).astype(np.int32)
    dur = np.maximum(rng.lognormal(np.log(4000), 0.8, n_top).astype(np.int64), 200)
    gap = rng.exponential(3000, n_top).astype(np.int64) + 50
    step = dur + gap
    # start = running sum of steps within each lane
    csum = np.cumsum(step)
    first = np.searchsorted(lane_of_top, np.arange(n_lanes))
    lane_base = np.zeros(n_lanes, dtype=np.int64)
    nonempty = first < n_top
    lane_base[nonempty] = csum[first[nonempty]] - step[first[nonempty]]
    start = csum - step - lane_base[lane_of_top]
    child_dur = dur // 2
    child_start = start + dur // 4
    n_child = n_events - n_top
    starts = np.concatenate([start, child_start[:n_child]])
    durs = np.concatenate([dur, child_dur[:n_child]])
    lanes_col = np.concatenate([lane_of_top, lane_of_top[:n_child]])
    names = [f"aten::op_{i}" for i in range(300)]
    name_id = rng.integers(0, len(names), starts.size).astype(np.int32)
    n_gpu = n_lanes // 5
    lanes = []
    for i in range(n_lanes):
        if i < n_lanes - n_gpu:
            role = "main" if i == 0 else ("interop" if i <= 8 else ("autograd" if i == 9 else "other"))
            lanes.append(Lane(i, "cpu", 1, 1000 + i, f"thread {1000 + i}", role))
        else:
            lanes.append(Lane(i, "gpu", 0, 7 + i, f"stream {7 + i}", "stream", 0))
    cats = ["cpu_op", "kernel"]
    gpu_lane = np.array([ln.kind == "gpu" for ln in lanes])
    cat_id = gpu_lane[lanes_col].astype(np.int32)
    return build_trace(
        path=f"synthetic-{n_events}",
        start_ns=starts,
        dur_ns=durs,
        lane=lanes_col,
        name_id=name_id,
        cat_id=cat_id,
        names=names,
        cats=cats,
        lanes=lanes,
    )


class _NoBranches:
    names: list[str] = []

    def __init__(self, n: int):
        self.event_branch = np.full(n, -1, dtype=np.int32)


def _render_times(view, image, repeats: int) -> list[float]:
    times = []
    ruler = getattr(view, "ruler", None)  # pyqtgraph's axis keeps its ticks in a picture
    for _ in range(repeats):
        if ruler is not None:
            ruler.picture = None
        t = time.perf_counter()
        view.render(image)
        times.append((time.perf_counter() - t) * 1e3)
    return times


def _view_kind() -> str:
    from PySide6.QtWidgets import QGraphicsView

    from branchscope.widgets.timeline import TimelineView

    return "pyqtgraph GraphicsView" if issubclass(TimelineView, QGraphicsView) else "QWidget painter"


def bench_sizes(sizes: list[int], repeats: int) -> list[dict]:
    from PySide6.QtGui import QImage

    from branchscope.widgets.timeline import TimelineView

    rows = []
    image = QImage(WIDTH, HEIGHT, QImage.Format.Format_ARGB32_Premultiplied)
    for n in sizes:
        t = time.perf_counter()
        trace = synthetic_trace(n)
        t_build = time.perf_counter() - t
        view = TimelineView()
        view.resize(WIDTH, HEIGHT)
        t = time.perf_counter()
        # Synthetic traces have no branch annotations; skip the analysis to time only the view.
        view.set_trace(trace, branches=_NoBranches(len(trace)))
        t_load = time.perf_counter() - t
        # Rows compact enough that all 64 lanes are on screen.
        view.set_row_height(max(4, ((HEIGHT - 24 - 5 * 20) // LANES - 2) // 2))
        start, end = trace.span()
        span = end - start
        for label, frac in (("zoomed out", 1.0), ("1% of span", 0.01), ("0.01% of span", 0.0001)):
            centre = start + span // 2 + span // 7  # not a special place
            half = int(span * frac / 2)
            if frac == 1.0:
                view.set_time_range(start, end)
            else:
                view.set_time_range(centre - half, centre + half)
            _render_times(view, image, 2)  # warm caches (fonts, elided names)
            times = _render_times(view, image, repeats)
            rows.append(
                {
                    "events": n,
                    "view": label,
                    "median_ms": statistics.median(times),
                    "min_ms": min(times),
                    "lanes_drawn": len(view.painted_lanes),
                    "lod_levels": len(view.lod.levels),
                    "index_build_s": t_load,
                    "trace_build_s": t_build,
                }
            )
            print(f"  {n:>10,} events  {label:<14} median {rows[-1]['median_ms']:7.2f} ms", flush=True)
        del view, trace
    return rows


def bench_open(path: Path, repeats: int) -> dict | None:
    if not path.exists():
        return None
    from PySide6.QtGui import QImage

    from branchscope.profiling import load_trace
    from branchscope.widgets.timeline import TimelineView

    json_mb = len(gzip.decompress(path.read_bytes())) / 1e6
    times = []
    for _ in range(repeats):
        image = QImage(WIDTH, HEIGHT, QImage.Format.Format_ARGB32_Premultiplied)
        t = time.perf_counter()
        trace = load_trace(path)
        view = TimelineView()
        view.resize(WIDTH, HEIGHT)
        view.set_trace(trace)
        view.render(image)
        times.append(time.perf_counter() - t)
        del view, trace
    return {"file": path.name, "json_mb": json_mb, "median_s": statistics.median(times), "min_s": min(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the 10M-event case, fewer repeats")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "timeline.json")
    args = ap.parse_args()
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])  # noqa: F841
    repeats = 5 if args.quick else args.repeats
    sizes = [10_000, 1_000_000] + ([] if args.quick else [10_000_000])
    print(f"timeline repaint at {WIDTH}x{HEIGHT}, {LANES} lanes, median of {repeats} ({_view_kind()})")
    rows = bench_sizes(sizes, repeats)
    opened = bench_open(BIG_TRACE, 3)

    by = {(r["events"], r["view"]): r["median_ms"] for r in rows}
    print()
    print(
        f"{'events':>12} {'view':<15} {'median ms':>10} {'goal':>14} {'lanes':>6} {'levels':>7} {'index s':>8}"
    )
    verdicts = []
    for r in rows:
        n, view = r["events"], r["view"]
        if n == 1_000_000:
            ratio = r["median_ms"] / by[(10_000, view)]
            goal = f"<=16, {ratio:.2f}x 10k"
            ok = r["median_ms"] <= 16 and ratio <= 2
        elif n == 10_000_000:
            goal = "<=33"
            ok = r["median_ms"] <= 33
        else:
            goal, ok = "baseline", True
        verdicts.append(ok)
        r["meets_goal"] = ok
        print(
            f"{n:>12,} {view:<15} {r['median_ms']:>10.2f} {goal:>14} {r['lanes_drawn']:>6} {r['lod_levels']:>7}"
            f" {r['index_build_s']:>8.2f}" + ("" if ok else "  MISSED")
        )
    if opened:
        opened["meets_goal"] = opened["median_s"] <= 2.0
        print(
            f"\nopen {opened['file']} ({opened['json_mb']:.0f} MB of JSON) to a drawn timeline: "
            f"median {opened['median_s']:.2f} s (goal <= 2 s)" + ("" if opened["meets_goal"] else "  MISSED")
        )
    else:
        print(f"\n{BIG_TRACE} absent: open benchmark skipped")
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "size": [WIDTH, HEIGHT],
        "view": _view_kind(),
        "repeats": repeats,
        "repaint": rows,
        "open_trace": opened,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
