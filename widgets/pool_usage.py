"""Thread-pool usage: is the inter-op pool busy, and is the machine oversubscribed?

Two bands on the shared time axis, pyqtgraph plots (`widgets.charts`):

1. the inter-op pool: how many pool threads compute at each instant (`analyses.interop_occupancy`,
   a step series) against the pool's size, drawn as a dashed line;
2. CPU use per OS thread: the runner samples every OS thread of the worker (OpenMP intra-op workers
   too, which torch.profiler never shows) and stores the samples as `cpu_sample` counters; here
   they are stacked, in cores, under a line at the machine's core count, grouped as main thread,
   inter-op pool, intra-op (OpenMP) workers and other threads (a run of ours lists which thread is
   which: `RunInfo.interop_tids`, `intra_tids`). Inter-op x intra-op threads above the core count
   is oversubscription: the stack hits the core line while threads wait, and the view says so in red;
3. threads mode with the GIL on: each branch thread's time waiting for the GIL (`analyses.gil_wait`:
   inside its branches, the part of each sample interval neither on a core nor waiting for one),
   stacked, in threads, under a line at the pool's size. Absent in other modes and without the GIL.
   In threads mode the inter-op pool is a pool of Python threads, and the bands say so.

Each series is a `StepSeriesItem`: every frame reduces it to one value per pixel column
(`widgets.series`), so the cost does not grow with the number of samples. Zoom, pan, ticks and
export (PNG, SVG, CSV: right click, Export…) are pyqtgraph's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.trace.analyses import (
    GilWait,
    StepSeries,
    cpu_sample_tracks,
    gil_wait,
    interop_occupancy,
)
from branchscope.profiling.trace.mode_traits import run_traits
from branchscope.profiling.trace.model import CounterTrack, Trace
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.widgets.charts import (
    ChartPanel,
    GutterText,
    StepSeriesItem,
    ValueAxisItem,
    line_label_opts,
    swatch,
)
from branchscope.widgets.series import (
    column_max_step,
    column_mean_step,
    column_window_mean,
    counter_as_steps,
    step_integral,
)
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.trace_cache import derived
from branchscope.widgets.units import format_duration

POOL_COLOR = QColor("#f28e2b")
POOL_PEAK_COLOR = QColor(242, 142, 43, 90)
#: The peak's colour as it shows on white (for its swatch in the gutter).
POOL_PEAK_ON_WHITE = QColor("#fad7b4")
POOL_LINE = QColor("#9c4a00")
CORE_LINE = QColor("#c0392b")
STACK_TOP = QColor("#2f3a44")
EMPTY_TEXT = QColor("#77828d")
ROLE_COLORS = {
    "main": ["#4e79a7"],
    "interop": ["#f28e2b", "#f5a55a", "#d9761a", "#f8c08a", "#c06414"],
    "intra": ["#59a14f", "#7fbf74", "#3f8a36", "#a3d39a", "#2f6e28", "#8cc084"],
    "other": ["#9c9c9c", "#b8b8b8", "#7f7f7f", "#cfcfcf"],
}
#: The CPU chart's groups, in stacking order, as its legend names them.
ROLE_TITLES = {
    "main": "main thread",
    "interop": "inter-op pool",
    "intra": "intra-op OpenMP workers",
    "other": "other threads",
}
#: Each branch thread's wait for the GIL (threads mode), shade by shade: a purple no other band uses.
GIL_COLORS = ["#8e44ad", "#b07cc6", "#6c3483", "#c39bd3", "#5b2c6f"]
#: The GIL band's name (its gutter, its legend, its series' names in a CSV export).
GIL_TITLE = "waiting for the GIL"


#: A chart with nothing to show: one line (as the workspace keeps for it).
EMPTY_HEIGHT = 28

#: The CPU chart averages each thread over this many of its sampling intervals (a moving window
#: centred on each pixel column, widened to the column when zoomed out). Single samples jitter
#: (the kernel counts CPU time in ticks, so one interval can read 0% and the next 200%), which made
#: the stack jagged and poke above the core line. Two intervals smooth that, while a sustained
#: load, and so oversubscription (the stack held at the core line for a branch's length), keeps its
#: height: an average keeps the CPU time. More (4 = 8 ms at the 2 ms sampler) blurred the steps.
SMOOTH_SAMPLES = 2


class _Thread:
    """One sampled OS thread, ready to be reduced per pixel column."""

    def __init__(self, track: CounterTrack, role: str, origin: int, color: QColor, rank: int | None = None):
        self.track = track
        #: The thread's rank when the trace holds several (its label says it).
        self.rank = rank
        self.role = role
        self.color = color
        t, v = counter_as_steps(track.ts_ns - origin, np.asarray(track.values, dtype=np.float64) / 100.0)
        self.t = t
        self.v = v
        self.cum = step_integral(t, v)
        #: Smoothing window (ns): SMOOTH_SAMPLES of this thread's median sampling interval.
        self.window = SMOOTH_SAMPLES * (float(np.median(np.diff(t))) if t.size > 1 else 0.0)

    @property
    def label(self) -> str:
        name = self.track.name or f"thread {self.track.tid}"
        return name if self.rank is None else f"rank {self.rank} · {name}"

    def columns(self, edges: np.ndarray) -> np.ndarray:
        """Cores in use per column [edges[k], edges[k+1]), smoothed over `window`."""
        return column_window_mean(self.t, self.v, edges, self.window, self.cum)


class _GilThread:
    """One branch thread's wait for the GIL, ready to be reduced per pixel column (as `_Thread`)."""

    def __init__(self, wait: GilWait, origin: int, color: QColor):
        self.wait = wait
        self.color = color
        self.t = np.asarray(wait.series.t_ns - origin, dtype=np.float64)
        self.v = np.asarray(wait.series.value, dtype=np.float64)
        self.cum = step_integral(self.t, self.v)
        #: As the CPU band's: SMOOTH_SAMPLES of the thread's median sampling interval.
        self.window = SMOOTH_SAMPLES * (float(np.median(np.diff(self.t))) if self.t.size > 1 else 0.0)

    @property
    def label(self) -> str:
        return self.wait.name or f"thread {self.wait.tid}"

    def columns(self, edges: np.ndarray) -> np.ndarray:
        """Threads waiting for the GIL per column [edges[k], edges[k+1]), smoothed over `window`."""
        return column_window_mean(self.t, self.v, edges, self.window, self.cum)


@dataclass(frozen=True)
class _PoolData:
    """What the view derives from one trace (cached with it: see `widgets.trace_cache`)."""

    cores_known: bool
    cores: int
    interop: int | None
    intra: int | None
    occupancy: StepSeries
    occ_t: np.ndarray
    occ_v: np.ndarray
    occ_cum: np.ndarray
    threads: list[_Thread]
    cpu_ymax: float
    #: threads mode with the GIL: each branch thread's wait for it (none otherwise).
    gil: list[_GilThread]
    #: What the pool is called: "inter-op pool", or "Python pool" in threads mode.
    pool_title: str


def thread_roles(trace: Trace) -> dict[tuple[int, int], str]:
    """{(pid, tid): role} of the trace's CPU threads: a run of ours lists its main thread, pool
    threads and OpenMP workers (sampled threads it does not list are "other"); other traces go by
    their lanes. Keyed by process too, so that the threads of merged ranks never mix."""
    info = trace.run_info or RunInfo()
    roles = {(ln.pid, ln.tid): ln.role for ln in trace.lanes if ln.kind == "cpu"}
    pids = {ln.pid for ln in trace.lanes if ln.kind == "cpu"} | {c.pid for c in trace.counters}
    if info.thread_roles_known:
        roles = dict.fromkeys(roles, "other")
        for pid in pids:
            roles.update(((pid, tid), "interop") for tid in info.interop_tids)
            roles.update(((pid, tid), "intra") for tid in info.intra_tids)
    if info.main_tid is not None:
        roles.update(((pid, info.main_tid), "main") for pid in pids)
    return roles


def _pool_data(trace: Trace) -> _PoolData:
    start, end = trace.span()
    info = trace.run_info or RunInfo()
    cores_known = info.cores is not None
    cores = info.cores if info.cores is not None else usable_cores()
    interop, intra = info.interop, info.intra
    occ = interop_occupancy(trace)
    occ_t = np.asarray(occ.t_ns - start, dtype=np.float64)
    occ_v = np.asarray(occ.value, dtype=np.float64)
    roles = thread_roles(trace)
    order = list(ROLE_TITLES)
    by_role: dict[str, int] = {}
    rows = []
    for tr in cpu_sample_tracks(trace):
        role = roles.get((tr.pid, tr.tid), "other")
        role = role if role in ROLE_TITLES else "other"
        rows.append((order.index(role), tr.tid, tr, role))
    threads = []
    pid_rank = {ln.pid: ln.rank for ln in trace.lanes if ln.kind == "cpu"}
    if len(set(pid_rank.values())) < 2:
        pid_rank = {}
    for _, _, tr, role in sorted(rows, key=lambda r: (r[0], r[2].pid, r[1])):
        shades = ROLE_COLORS[role]
        k = by_role.get(role, 0)
        by_role[role] = k + 1
        threads.append(_Thread(tr, role, start, QColor(shades[k % len(shades)]), pid_rank.get(tr.pid)))
    cpu_ymax = float(cores)
    if threads:
        edges = np.linspace(0.0, float(end - start), 2001)
        total = sum(th.columns(edges) for th in threads)
        cpu_ymax = max(cpu_ymax, float(np.max(total)))
    gil = [_GilThread(w, start, QColor(GIL_COLORS[k % len(GIL_COLORS)])) for k, w in enumerate(gil_wait(trace))]
    pool_title = run_traits(info).pool_title
    return _PoolData(
        cores_known, cores, interop, intra, occ, occ_t, occ_v, step_integral(occ_t, occ_v), threads, cpu_ymax,
        gil, pool_title,
    )  # fmt: skip


class PoolUsageView(ChartPanel):
    """Busy inter-op pool threads and per-thread CPU use (see the module docstring)."""

    title = "thread pool"

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.occupancy: StepSeries | None = None
        self.threads: list[_Thread] = []
        self.cores = usable_cores()
        self.interop: int | None = None
        self.intra: int | None = None
        self.cpu_ymax = 1.0
        #: Whether the core count is the trace's own (runs made by branchscope say it).
        self.cores_known = False
        self._occ_t = np.zeros(0)
        self._occ_v = np.zeros(0)
        self._occ_cum = np.zeros(0)
        #: Where the trace's first event sits on the axis (ns).
        self._shift = 0.0
        #: The series drawn, pool band first (peak, mean), then one per thread, stacked, then one per
        #: branch thread waiting for the GIL, stacked.
        self.items: list[StepSeriesItem] = []
        #: threads mode with the GIL: each branch thread's wait for it (`analyses.gil_wait`).
        self.gil_threads: list[_GilThread] = []
        #: "inter-op pool", or "Python pool" in threads mode.
        self.pool_title = ROLE_TITLES["interop"]

        self.pool_plot = self.make_plot(ValueAxisItem(integer=True), "busy inter-op threads")
        self.cpu_plot = self.make_plot(ValueAxisItem(), "CPU use per OS thread")
        self.gil_plot = self.make_plot(ValueAxisItem(), GIL_TITLE)
        self.pool_gutter = GutterText()
        self.cpu_gutter = GutterText()
        self.gil_gutter = GutterText()
        self.pool_line = pg.InfiniteLine(
            angle=0, movable=False, pen=pg.mkPen(POOL_LINE, width=1.5, style=Qt.PenStyle.DashLine),
            label="pool size", labelOpts=line_label_opts(POOL_LINE),
        )  # fmt: skip
        self.core_line = pg.InfiniteLine(
            angle=0, movable=False, pen=pg.mkPen(CORE_LINE, width=1.5, style=Qt.PenStyle.DashLine),
            label="cores", labelOpts=line_label_opts(CORE_LINE),
        )  # fmt: skip
        self.gil_line = pg.InfiniteLine(
            angle=0, movable=False, pen=pg.mkPen(GIL_COLORS[2], width=1.5, style=Qt.PenStyle.DashLine),
            label="branch threads", labelOpts=line_label_opts(GIL_COLORS[2]),
        )  # fmt: skip
        for plot, line in (
            (self.pool_plot, self.pool_line), (self.cpu_plot, self.core_line), (self.gil_plot, self.gil_line)
        ):  # fmt: skip
            line.setZValue(5)  # over the series
            plot.addItem(line, ignoreBounds=True)
        self.pool_empty = self._note(self.pool_plot, "no inter-op pool threads ran in this trace")
        self.cpu_empty = self._note(
            self.cpu_plot, "no CPU samples in this trace (runs made by branchscope have them)"
        )
        self.warning = pg.TextItem(anchor=(0, 0), fill=pg.mkBrush(255, 255, 255, 210))
        self.warning.setParentItem(self.cpu_plot.vb)
        self.warning.setPos(6, 2)
        self.warning.setZValue(10)
        self.hold_height(170)
        self._show()

    @staticmethod
    def _note(plot: pg.PlotItem, text: str) -> pg.TextItem:
        """A grey line of text at the left of a band, in the middle of its height."""
        note = pg.TextItem(text, color=EMPTY_TEXT, anchor=(0, 0.5))
        note.setParentItem(plot.vb)
        plot.vb.sigResized.connect(lambda vb: note.setPos(8, vb.height() / 2))
        return note

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, trace: Trace) -> None:
        """Build what showing `trace` takes, kept with the trace; raises with the view unchanged."""
        derived(trace, "pool_usage", lambda: _pool_data(trace))

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show `trace` with its instant `origin_ns` (default: its first event) at the axis' 0."""
        # Derived once per trace (re-selecting a run in the list must be instant), and first: if
        # it raises, the view still shows what it showed.
        d = derived(trace, "pool_usage", lambda: _pool_data(trace)) if trace is not None else None
        for item in self.items:
            vb = item.getViewBox()
            for plot in (self.pool_plot, self.cpu_plot, self.gil_plot):
                if vb is plot.vb:
                    plot.removeItem(item)
        self.items = []
        self.trace = trace
        self.threads = []
        self.gil_threads = []
        self.pool_title = ROLE_TITLES["interop"]
        self.occupancy = None
        self._occ_t = self._occ_v = self._occ_cum = np.zeros(0)
        if trace is not None:
            self.origin_ns, self._shift = self._origin(trace, origin_ns)
            self.cores_known, self.cores, self.interop, self.intra = (
                d.cores_known,
                d.cores,
                d.interop,
                d.intra,
            )
            self.occupancy = d.occupancy
            self._occ_t, self._occ_v, self._occ_cum = d.occ_t, d.occ_v, d.occ_cum
            self.threads = list(d.threads)
            self.cpu_ymax = d.cpu_ymax
            self.gil_threads = list(d.gil)
            self.pool_title = d.pool_title
            self._add_items()
        self._show()

    def _add_items(self) -> None:
        t, v, cum, shift = self._occ_t, self._occ_v, self._occ_cum, self._shift
        pool_max = self._pool_ymax()
        if t.size > 1:
            peak = StepSeriesItem(
                lambda e: column_max_step(t, v, e), (t, v), name="busy inter-op threads, at the busiest moment",
                brush=POOL_PEAK_COLOR, y_max=pool_max, shift=shift,
            )  # fmt: skip
            mean = StepSeriesItem(
                lambda e: column_mean_step(t, v, e, cum), (t, v), name="busy inter-op threads, on average",
                brush=POOL_COLOR, y_max=pool_max, shift=shift,
            )  # fmt: skip
            for item in (peak, mean):
                self.pool_plot.addItem(item)
                self.items.append(item)
        self._add_stack(
            self.cpu_plot, self.threads, lambda th: f"{th.label} ({self.role_titles[th.role]}), cores in use",
            self.cpu_ymax, shift,
        )  # fmt: skip
        self._add_stack(
            self.gil_plot, self.gil_threads, lambda g: f"{g.label} ({self.pool_title}), {GIL_TITLE}", self._gil_ymax(), shift
        )

    def _add_stack(self, plot: Any, rows: list[Any], name: Callable[[Any], str], y_max: float, shift: float) -> None:
        """One series a row (its columns, t, v and colour), each stacked on the one before, the top
        one outlined."""
        below = None
        for k, row in enumerate(rows):
            item = StepSeriesItem(
                row.columns, (row.t, row.v), name=name(row), brush=row.color, below=below,
                pen=pg.mkPen(STACK_TOP, width=1) if k == len(rows) - 1 else None, y_max=y_max, shift=shift,
            )  # fmt: skip
            plot.addItem(item)
            self.items.append(item)
            below = item

    def _gil_ymax(self) -> float:
        """The GIL band's top: its branch threads (all of them waiting at once)."""
        return float(max(1, len(self.gil_threads)))

    def _pool_ymax(self) -> float:
        cap = self.occupancy.capacity if self.occupancy is not None else 0
        return max(cap, float(self._occ_v.max()) if self._occ_v.size else 0.0, 1.0)

    # ---- what is shown ----------------------------------------------------------------------
    def has_data(self) -> bool:
        """Whether the trace has inter-op pool threads or CPU samples."""
        cap = self.occupancy.capacity if self.occupancy is not None else 0
        return self.trace is not None and (cap > 0 or self.max_busy_pool_threads > 0 or bool(self.threads))

    @property
    def no_data_text(self) -> str:
        return "no inter-op pool threads or CPU samples in this trace (runs made by branchscope have them)"

    def _bands_with_data(self) -> tuple[bool, bool]:
        """(pool band, CPU band): which have something to draw (a trace shown, else both)."""
        if self.trace is None:
            return True, True
        cap = self.occupancy.capacity if self.occupancy is not None else 0
        return cap > 0 or self.max_busy_pool_threads > 0, bool(self.threads)

    def wanted_height(self, row_height: int) -> int:
        """Height wanted in a row of `row_height` pixels: a band for each series that has data."""
        if self.trace is not None and not self.has_data():
            return EMPTY_HEIGHT
        if self.gil_threads:  # a third band
            return max(280, row_height // 3)
        if all(self._bands_with_data()):
            return max(200, row_height // 4)
        return max(110, row_height // 8)

    def _show(self) -> None:
        """Lines, notes, labels and bands for what `set_trace` left (or the one-line message).

        A band with nothing to draw takes no room: a line in the other band's gutter says why."""
        if self.trace is not None and not self.has_data():
            self.set_bands([])
            self.hold_height(EMPTY_HEIGHT)
            return
        pool_has, cpu_has = self._bands_with_data()
        self.hold_height(250 if self.gil_threads else 170 if pool_has and cpu_has else 90)
        cap = int(self.occupancy.capacity) if self.occupancy is not None else 0
        self.pool_line.setVisible(cap > 0)
        self.pool_line.setValue(cap)
        self.pool_line.label.setFormat(f"pool size {cap}")
        self.pool_empty.setVisible(False)
        self.set_y_top(self.pool_plot, self._pool_ymax(), headroom_px=18)
        self.core_line.setVisible(bool(self.threads) or self.cores_known)
        self.core_line.setValue(self.cores)
        self.core_line.label.setFormat(f"{self.cores} cores")
        self.cpu_empty.setVisible(False)
        self.set_y_top(
            self.cpu_plot, max(self.cpu_ymax, float(self.cores) if self.cores_known else 0.0, 1.0), 18
        )
        n_gil = len(self.gil_threads)
        self.gil_line.setVisible(n_gil > 0)
        self.gil_line.setValue(n_gil)
        self.gil_line.label.setFormat(f"{n_gil} branch thread{'s' if n_gil != 1 else ''}")
        self.set_y_top(self.gil_plot, self._gil_ymax(), 18)
        self._show_warning()
        self._label_bands()
        bands = []
        if pool_has:
            bands.append((self.pool_gutter, self.pool_plot))
        if cpu_has:
            bands.append((self.cpu_gutter, self.cpu_plot))
        if self.gil_threads:
            bands.append((self.gil_gutter, self.gil_plot))
        self.set_bands(bands)

    def _show_warning(self) -> None:
        if not self.oversubscribed:
            self.warning.setVisible(False)
            return
        busy = max(1, self.max_busy_pool_threads)
        self.warning.setHtml(
            f"<b style='color:{CORE_LINE.name()}'>oversubscribed: {busy} busy thread{'s' if busy > 1 else ''}"
            f" × intra-op {self.intra} = {busy * self.intra} threads on {self.cores} cores</b>"
        )
        self.warning.setVisible(True)

    def _label_bands(self) -> None:
        cap = self.occupancy.capacity if self.occupancy is not None else 0
        pool = [f"<b style='color:#1f2933'>{self.pool_title}</b>"]
        if cap > 0 or self.max_busy_pool_threads > 0:
            threads = "inter-op" if self.pool_title == ROLE_TITLES["interop"] else self.pool_title
            pool.append(f"busy {threads} threads (of {cap})")
            pool.append(
                swatch(POOL_COLOR, "on average") + "<br>" + swatch(POOL_PEAK_ON_WHITE, "at the busiest moment")
            )
        elif self.trace is not None:
            pool.append("no pool threads ran")
        pool_has, cpu_has = self._bands_with_data()
        if not cpu_has:
            pool.append(f"<span style='color:{EMPTY_TEXT.name()}'>no CPU samples (runs made by branchscope have them)</span>")
        self.pool_gutter.set_html("<br>".join(pool))
        cpu = ["<b style='color:#1f2933'>CPU use per OS thread</b>"]
        if self.interop is not None and self.intra is not None:
            color = CORE_LINE.name() if self.oversubscribed else "#5b6570"
            cpu.append(
                f"<span style='color:{color}'>{self.interop} × {self.intra} threads, {self.cores} cores</span>"
            )
        smooth = max((th.window for th in self.threads), default=0.0)
        if smooth > 0:
            window = format_duration(float(f"{smooth:.2g}")).replace(" ", "&nbsp;")  # one word
            cpu.append(f"cores in use, stacked, averaged over {window}")
        else:
            cpu.append("cores in use, stacked")
        cpu.extend(swatch(ROLE_COLORS[role][0], text) for role, text in self.legend())
        if not pool_has:
            cpu.append(f"<span style='color:{EMPTY_TEXT.name()}'>no {self.pool_title} threads ran</span>")
        self.cpu_gutter.set_html("<br>".join(cpu))
        gil = [f"<b style='color:#1f2933'>{GIL_TITLE}</b>", "branch threads asleep inside a branch, stacked"]
        gil.extend(swatch(g.color, g.label) for g in self.gil_threads[:4])
        if len(self.gil_threads) > 4:
            gil.append(f"and {len(self.gil_threads) - 4} more")
        self.gil_gutter.set_html("<br>".join(gil))

    def legend(self) -> list[tuple[str, str]]:
        """The CPU chart's groups shown, as (role, "inter-op pool (2)"): each with its thread count."""
        titles = self.role_titles
        counts = {role: sum(1 for th in self.threads if th.role == role) for role in titles}
        return [(role, f"{titles[role]} ({n})") for role, n in counts.items() if n]

    @property
    def role_titles(self) -> dict[str, str]:
        """The CPU band's groups as named for the trace shown (the inter-op threads as its mode's
        traits name its pool: threads mode's "Python pool")."""
        return {**ROLE_TITLES, "interop": self.pool_title}

    def cpu_columns(self, edges: np.ndarray) -> list[np.ndarray]:
        """Each sampled thread's cores in use per column of `edges` (ns on the axis), as drawn:
        smoothed over SMOOTH_SAMPLES sampling intervals, stacked in `threads` order."""
        return [th.columns(edges - self._shift) for th in self.threads]

    @property
    def max_busy_pool_threads(self) -> int:
        return int(self._occ_v.max()) if self._occ_v.size else 0

    @property
    def oversubscribed(self) -> bool:
        """Busy pool threads, each running ops on `intra` threads, wanted more threads than cores.

        A big pool that stays idle (a sequential run) oversubscribes nothing, so the count is the
        most pool threads seen busy at once (at least the main thread's one), not the pool's size.
        """
        if self.intra is None:
            return False
        return max(1, self.max_busy_pool_threads) * self.intra > self.cores

    # ---- hover ------------------------------------------------------------------------------
    def describe_at(self, t_rel: float) -> str:
        """What the charts say at one instant (ns on the axis): the tooltip's text."""
        if self.trace is None:
            return ""
        t = t_rel - self._shift
        lines = []
        if self.occupancy is not None and self._occ_t.size:
            k = int(np.searchsorted(self._occ_t, t, side="right")) - 1
            busy = int(self._occ_v[k]) if k >= 0 else 0
            lines.append(f"{self.pool_title}: {busy} of {self.occupancy.capacity} threads busy")
        total = 0.0
        parts = []
        for th in self.threads:
            k = int(np.searchsorted(th.t, t, side="right")) - 1
            v = float(th.v[k]) if 0 <= k < th.v.size else 0.0
            total += v
            if v >= 0.01:
                parts.append(f"  {th.label}, {self.role_titles[th.role]}: {v * 100:.0f}% of a core")
        if self.threads:
            lines.append(f"CPU: {total:.2f} of {self.cores} cores in use")
            lines.extend(parts[:16])
        waiting = []
        for g in self.gil_threads:
            k = int(np.searchsorted(g.t, t, side="right")) - 1
            v = float(g.v[k]) if 0 <= k < g.v.size else 0.0
            waiting.append(v)
        if self.gil_threads:
            lines.append(f"{GIL_TITLE}: {sum(waiting):.2f} of {len(self.gil_threads)} branch threads")
            lines.extend(f"  {g.label}: {v * 100:.0f}% of the time" for g, v in zip(self.gil_threads, waiting) if v >= 0.01)
        return "\n".join(lines)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(800, 210)
