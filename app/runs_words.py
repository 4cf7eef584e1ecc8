"""What the runs list says in words, without Qt: which run each one is compared with and why, the
speedup column's cells and header, a run in one sentence, and the sentence said when a change of
baseline moves other runs' speedups.

`RunsInWords` is mixed into `app.runs.Runs`: it reads the list through `Runs`'s own methods
(which baseline, the speedup, its parts), so what is compared with what is decided in one place
and said here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from branchscope.app.run_entry import Entry
from branchscope.profiling.run.modes import MODES
from branchscope.profiling.trace.parts import parts_sentence, parts_short

if TYPE_CHECKING:
    from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord


class RunsInWords:
    """The words of `Runs` (see the module docstring)."""

    if TYPE_CHECKING:  # what it reads of `Runs`
        _entries: list[Entry]
        _baselines: dict[str | None, Entry]

        def index_of(self, entry: Entry | None) -> int: ...
        def baseline_of(self, k: int) -> int | None: ...
        def _baseline_of(self, entry: Entry) -> Entry | None: ...
        def is_baseline(self, k: int) -> bool: ...
        def speedup(self, k: int) -> float | None: ...
        def within_noise(self, k: int) -> bool | None: ...
        def busy_comparison(self, k: int) -> bool: ...
        def parts(self, k: int) -> SpeedupPartsRecord | None: ...

    def baseline_name(self, b: int) -> str:
        """How a row is named as a baseline: "#3 sequential 1×1"."""
        e = self._entries[b]
        name = f"#{b + 1} " + (e.mode or e.label)
        if e.threads:
            name += f" {e.threads[0]}×{e.threads[1]}"
        return name

    def baseline_text(self, k: int) -> str | None:
        """Which run entry k is compared with, when it ran and why that one, e.g. "#3 sequential
        1×1, run at 15:02 in this session (the model's latest sequential 1×1 run)"; None without one."""
        b = self.baseline_of(k)
        if b is None:
            return None
        base = self._entries[b]
        if self._baselines.get(base.model_key) is base:
            why = "set by you"
        elif base.sweep is not None:
            why = "its sweep's sequential 1×1 cell"
        else:
            why = "the model's latest sequential 1×1 run of this session"
        where = f"from disk ({base.trace_path.parent.name})" if base.from_disk else "in this session"
        return f"{self.baseline_name(b)}, run {when_text(base.when)} {where} ({why})"

    def no_baseline_text(self, k: int) -> str:
        """Why entry k has no baseline, and what would give it one."""
        e = self._entries[k]
        if e.sweep is not None:
            return f"no baseline: no sequential 1×1 cell of its sweep ({e.sweep.name}) is listed"
        old = [i for i, o in enumerate(self._entries) if o.from_disk and o.sequential_1x1 and o.model_key == e.model_key]
        if old:
            return (
                f"no baseline this session: {self.baseline_name(old[-1])} is from another session or from disk "
                "(right-click it, Set as baseline, to compare with it anyway)"
            )
        return "no baseline this session: no sequential 1×1 run of this model to compare with yet"

    def header_text(self) -> str:
        """What the speedup column's header says: the one baseline its speedups are against
        ("speedup vs #3 sequential 1×1"), that there are several, or that there is none."""
        bases = {self.baseline_of(k) for k in range(len(self._entries)) if self._entries[k].stats is not None}
        named = sorted(b for b in bases if b is not None)
        if not named:
            return "speedup (no baseline this session)" if bases else "speedup"
        if len(named) == 1 and None not in bases:
            return f"speedup vs {self.baseline_name(named[0])}"
        return "speedup vs " + ", ".join(self.baseline_name(b) for b in named) + (" (some: none)" if None in bases else "")


    def speedup_text(self, k: int) -> str:
        """The speedup column's cell: "baseline", "1.43×", "1.43× (within noise)", "… machine busy", "–";
        a run with parts says them short first, with a baseline or without (they need none), where a
        narrow column still shows their start: "1.67× (1.65× plan × 1.01× threads)", "1.65× plan ×
        1.01× threads"."""
        s = self.speedup(k)
        parts = self.parts(k)
        if self.is_baseline(k):
            head, notes = "baseline", ["machine busy"] if self._entries[k].busy else []
        elif s is None:
            return "–" if parts is None else parts_short(parts)
        else:
            head = f"{s:.2f}×"
            notes = [n for n, on in (("within noise", self.within_noise(k)), ("machine busy", self.busy_comparison(k))) if on]
        if parts is not None:
            notes.insert(0, parts_short(parts))
        return head + (f" ({', '.join(notes)})" if notes else "")

    def parts_text(self, k: int) -> str | None:
        """Entry k's parts in a sentence naming the runs they come from: "fork 2×1 over sequential
        1×1, in parts: 1.67× = 1.65× from TorchScript's plan × 1.01× from 2 threads (#1 and #2)"."""
        parts = self.parts(k)
        if parts is None:
            return None
        e = self._entries[k]
        threads = e.threads or (None, None)
        rows = [x for x in (parts.sequential, parts.one_thread) if x is not None]
        return parts_sentence(e.mode, threads[0], threads[1], parts) + f" ({' and '.join(f'#{x + 1}' for x in rows)})"

    def summary_line(self, k: int) -> str:
        """Entry k in one sentence a class follows: what ran on what, and how it compares with
        its baseline, e.g. "4 branches on 2 inter-op threads: 1.90× faster than sequential 1×1,
        within noise: no"."""
        e = self._entries[k]
        n = e.branch_count
        what = f"{n} branch{'es' if n != 1 else ''}" if n else "the model"
        threads = e.threads
        mode = MODES.get(e.mode) if e.mode else None
        if mode is not None and (n or not mode.traits.baseline) and (threads or "{interop}" not in mode.traits.runs_as):
            what += " " + mode.traits.runs_text(threads[0] if threads else 1)
        elif e.mode and mode is None:
            what += f" ({e.mode})"
        if threads:
            what += f", {threads[1]} intra-op thread{'s' if threads[1] != 1 else ''} each"
        b = self.baseline_of(k)
        if e.stats is None:
            if e.run is None and not n:  # a trace from elsewhere
                return "a trace opened from disk: its own step times without the profiler are not in it, so no speedup"
            return f"{what}: no step times without the profiler in this run, so no speedup"
        if b is None:
            return f"{what}: median step {e.stats.median:.2f} ms; {self.no_baseline_text(k)}"
        if b == k:
            return f"{what}: median step {e.stats.median:.2f} ms, the baseline of this model's speedups"
        base = self._entries[b]
        name = base.mode or base.label
        if base.threads:
            name += f" {base.threads[0]}×{base.threads[1]}"
        s = self.speedup(k)
        if s is None:
            return what
        how = f"{s:.2f}× faster than" if s >= 1 else f"{1 / s:.2f}× slower than"
        noise = self.within_noise(k)
        line = f"{what}: {how} {name} (#{b + 1}), within noise: {'yes' if noise else 'no'}"
        if self.busy_comparison(k):
            who = " and ".join(w for w, x in (("this run", e), ("its baseline", base)) if x.busy)
            line += f"; machine busy while {who} timed {'their' if ' and ' in who else 'its'} steps"
        return line

    def busy_details(self, k: int) -> list[str]:
        """What run.json says of the load while entry k and its baseline timed their steps, one line
        for each that ran on a busy machine (the summary line says "machine busy" once)."""
        e = self._entries[k]
        b = self._baseline_of(e)
        pairs = (("this run", e), ("the baseline", b)) if b is not None and b is not e else (("this run", e),)
        return [f"machine busy: {who}'s {load_words(x)}" for who, x in pairs if x is not None and x.busy]

    def _moved_text(self, before: dict[Entry, Entry]) -> str | None:
        """The runs still listed whose baseline a change moved, in one sentence (None: none moved)."""
        moved: dict[Entry | None, list[Entry]] = {}
        for e, old in before.items():
            if self.index_of(e) < 0:
                continue
            new = self._baseline_of(e)
            if new is not old:
                moved.setdefault(new, []).append(e)
        if not moved:
            return None
        parts = []
        for new, entries in moved.items():
            olds = sorted({self.index_of(before[e]) for e in entries})
            was = ", ".join(f"#{o + 1}" if o >= 0 else "a run taken out" for o in olds)
            n = f"{len(entries)} run{'s' if len(entries) != 1 else ''}"
            if new is None:
                parts.append(f"{n} no longer compared (before: against {was})")
            else:
                parts.append(f"speedups of {n} now against {self.baseline_name(self.index_of(new))} (before: {was})")
        return "; ".join(parts)


def when_text(t: float, now: float | None = None) -> str:
    """"at 15:02" today, else "on 25 Nov at 14:10" (local time)."""
    now = time.time() if now is None else now
    local, today = time.localtime(t), time.localtime(now)
    if local[:3] == today[:3]:
        return time.strftime("at %H:%M", local)
    return time.strftime("on %d %b %Y at %H:%M", local)


def load_words(e: Entry) -> str:
    """What run.json says of the machine's load while entry `e` ran, in a few words."""
    load = e.run.load if e.run is not None else None
    if load is None:
        return "load not measured"
    return load.text().removeprefix("machine: ")
