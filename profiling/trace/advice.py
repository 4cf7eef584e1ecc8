"""Which way of using the cores served a model better: intra-op threads, or running its branches
side by side (forking them, or on Python threads).

Running a model's branches side by side on a pool of threads is one way of putting several cores
to work: fork mode forks them onto torch's inter-op pool (TorchScript), threads mode submits them to
a pool of Python threads (eager PyTorch). Giving each op more intra-op threads (sequential mode, the
model's own forward) is the other.
Which wins depends on the model: on 2 cores fork 2×1 beat sequential 1×1 by 1.2–1.4× on
googlenet, CLIP and T5, yet sequential 1×2 matched or beat fork 2×1 on dla34, inception_v3,
Whisper and squeezenet. Against sequential 1×1 the fork run uses twice the threads, so that
comparison cannot tell the two ways apart; this module compares runs that use **the same number
of threads**, and says in one line which was faster, by how much, or that the two are within noise.

**Threads of a run** (`threads`, defined in `starved.py`): the most threads that compute at once,
per rank, times the ranks: sequential I×J computes with J (its inter-op pool stays idle), any other
mode I×J (fork, threads) with I×J. A fork or threads run runs its branches in parallel only from 2 inter-op threads on: 1×J runs them
one after another on the one pool thread, so it is not one of the two ways compared here.

**Which runs are paired** (`advise`): the fastest sequential run and the fastest run of a branch
pool mode (its traits' `branch_pool`: fork or threads, 2 or more inter-op threads; the line names
its way in its traits' words, `way`) of one thread count, among runs of one model on one machine (run.json's
`model`; run.json's / sweep.json's `cores`, the cores the run could use: runs whose model or cores
differ from the most common are left out).
The thread count is the cores' when both ways have a run of it, else the largest count up to
the cores both have, else the largest both have (oversubscribed, and the line says so).

**Noise** is judged as everywhere else in branchscope (`step_stats.StepStats.within_noise`): the
two runs are within noise when their unprofiled step times' interquartile ranges overlap. Sweep
cells run in several passes (`from_sweep`) are judged as the sweep's ties are
(`step_stats.within_noise_over_passes`): also within noise when the ranges of their passes' medians
overlap, so the advice never calls a pair the sweep holds within noise a win. A run without a
spread (an old sweep.json) is compared on its median alone, and the line says so.

**Starved runs** (`starved.is_starved`: run.json's, a sweep cell's or a compared run's `starved`): a
run that got, or was left by the machine's load, fewer cores than its threads could use is never
the winner or the loser. When either run of the pair was starved the line names which, gives no
ratio, and offers `branchscope speedup` (the two configurations paired, interleaved) to measure them.

**The parallel run's parts**: where the runs hold, beside the pair's fork or threads run M I×J,
sequential 1×J and M 1×J of its model (finished, not starved: `profiling/trace/parts.py`), the line
ends with its speedup over sequential 1×J in its parts ("fork 2×1 over sequential 1×1, in parts:
1.67× = 1.65× from TorchScript's plan × 1.01× from 2 threads"), the plan named in its mode's words
(`Measured.plan_by`: run.json's or the sweep cell's `plan_by`). Not where either run of the pair was
starved: that line asks for the two measured paired instead.

**The advice as an object** (`advice_record`, `records.AdviceRecord`: sweep.json's and `compare
--json`'s "advice"): the line (`text`), the `winner` (the run's mode, inter-op, intra-op threads and
its index among what was compared; null when within noise, starved or not paired), the `reason`
(a sentence beginning "faster:", "within noise:", "starved:" or "not paired:") and the `parts`
(null where the line says none).

**Runs on a busy machine** (`Measured.busy`: run.json's `load.busy`, a sweep cell's `busy`): a ratio
between runs timed while other processes took the cores measures the load as much as the model. The
line and the reason end with which of the pair ran on a busy machine ("… (sequential 1×2 ran on a busy
machine: re-run it on a quiet one)", `with_busy_note`); a starved run is the line's own to say.

Qt-free and torch-free: `branchscope sweep`, `branchscope compare`, the Sweep and Compare pages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from branchscope.profiling.trace.compare import RunSummary
from branchscope.profiling.trace.mode_traits import KnowsItsTraits, ModeTraits
from branchscope.profiling.trace.parts import PartRun, parts_sentence, speedup_parts
from branchscope.profiling.trace.step_stats import StepStats, overlaps
from branchscope.profiling.trace.sweep_records import (
    DONE,
    AdviceRecord,
    SpeedupPartsRecord,
    SweepRecord,
    WinnerRecord,
)

T = TypeVar("T")

#: How the advice names the baseline's way of using the cores (a branch pool mode's: its traits' `way`).
INTRA_WAY = "intra-op threads"
#: Why two runs are within noise, in the advice's words.
NOISE_BY_QUARTILES = "their step times' interquartile ranges"
NOISE_BY_PASSES = "the ranges of their passes' medians"


@dataclass(frozen=True)
class Measured(KnowsItsTraits):
    """One run of a model as advice reads it: its mode, thread counts and unprofiled step times.

    `spread_known` is False when only the median is known (the stats' quartiles are then the median);
    `cores` is the cores the run could use (None: unknown); `ranks` the processes of a distributed run;
    `model` what ran (None: unknown; runs of another model are never paired); `starved` whether it
    got fewer cores than its threads could use; `index` its place among what was compared; `plan_by`
    how its mode's plan is named in a speedup's parts (None: not said); `mode_traits` its mode's
    traits where the run says them (None: the table's, `mode_traits.traits_of`); `busy` whether
    other processes took the cores while it was timed (run.json's `load.busy`).
    """

    mode: str
    interop: int
    intra: int
    stats: StepStats
    cores: int | None = None
    ranks: int = 1
    spread_known: bool = True
    model: str | None = None
    #: A sweep cell's passes' unprofiled medians (empty: one run).
    pass_medians: tuple[float, ...] = ()
    starved: bool = False
    index: int | None = None
    plan_by: str | None = None
    mode_traits: ModeTraits | None = None
    busy: bool = False

    @property
    def threads(self) -> int:
        return self.traits.threads(self.interop, self.intra) * max(1, self.ranks)

    @property
    def label(self) -> str:
        return f"{self.mode} {self.interop}×{self.intra}"

    @property
    def forks(self) -> bool:
        """A run of a branch pool mode (fork, threads) that runs branches side by side (2 or more
        inter-op threads)."""
        return self.traits.side_by_side(self.interop)

    @property
    def way(self) -> str:
        """How the advice names this run's way of using the cores."""
        return self.traits.way or INTRA_WAY


    @property
    def config(self) -> str:
        """How `branchscope speedup --configs` names its configuration: "fork:2x1"."""
        return f"{self.mode}:{self.interop}x{self.intra}"

    def winner_record(self) -> WinnerRecord:
        return WinnerRecord(mode=self.mode, interop=self.interop, intra=self.intra, index=self.index)

    def part_run(self) -> PartRun:
        """This run as the parts finder reads it."""
        return PartRun(self.mode, self.interop, self.intra, self.stats.median, model=self.model, cores=self.cores,
                       ranks=self.ranks, plan_by=self.plan_by, starved=self.starved, index=self.index,
                       mode_traits=self.mode_traits)  # fmt: skip


@dataclass(frozen=True)
class Advice:
    """A sequential run and a run of a branch pool mode (`parallel`: fork or threads) of the same
    thread count, and which served the model better.

    `faster` is the mode of the faster run (sequential, or the parallel run's), or None when the two are
    within noise; `ratio` the slower median ÷ the faster (≥ 1). `winner` is the faster run unless
    either was starved of cores (`starved`)."""

    sequential: Measured
    parallel: Measured
    threads: int
    cores: int | None
    faster: str | None
    ratio: float
    #: Within noise by the passes' medians only (their quartiles apart).
    noise_by_passes: bool = False
    #: The parallel run's speedup over sequential 1×J in its parts (`parts.speedup_parts`), None
    #: where the runs do not hold its sequential 1×J and M 1×J.
    parts: SpeedupPartsRecord | None = None

    @property
    def noise_known(self) -> bool:
        return self.sequential.spread_known and self.parallel.spread_known

    @property
    def starved(self) -> tuple[Measured, ...]:
        """The runs of the pair that were starved of cores, the sequential one first."""
        return tuple(m for m in (self.sequential, self.parallel) if m.starved)

    @property
    def busy(self) -> tuple[Measured, ...]:
        """The runs of the pair that ran on a busy machine and were not starved (a starved run's
        line says more), the sequential one first."""
        return tuple(m for m in (self.sequential, self.parallel) if m.busy and not m.starved)

    @property
    def winner(self) -> Measured | None:
        """The faster run; None when the two are within noise or either was starved."""
        if self.starved or self.faster is None:
            return None
        return self.sequential if self._sequential_won else self.parallel

    @property
    def _sequential_won(self) -> bool:
        return self.faster == self.sequential.mode

    @property
    def text(self) -> str:
        """The advice in one line (see the module docstring)."""
        seq, par = self.sequential, self.parallel
        where = _where(self.threads, self.cores)
        if self.starved:
            a, b = sorted((seq, par), key=lambda m: m.stats.median)
            return (
                f"{where}, {_run_text(a)} and {_run_text(b)} name no winner: {_starved_text(self.starved)}; "
                f"measure the two paired and interleaved: branchscope speedup --configs {seq.config},{par.config}"
            )
        if self.faster is None:
            a, b = sorted((seq, par), key=lambda m: m.stats.median)
            return (
                f"{where}, {_run_text(a)} and {_run_text(b)} are within noise ({self.ratio:.2f}×, "
                f"{self._noise_rule} overlap): neither {INTRA_WAY} nor {par.way} served this model "
                "clearly better" + self._parts_text
            )
        win, lose = (seq, par) if self._sequential_won else (par, seq)
        if self._sequential_won:
            why = f"{INTRA_WAY}{' alone' if par.intra > 1 else ''} serve this model better than {par.way}"
        else:
            why = f"{par.way} serves this model better than {INTRA_WAY}{' alone' if par.intra > 1 else ''}"
        text = f"{where}, {_run_text(win)} beat {_run_text(lose)} by {self.ratio:.2f}×: {why}"
        if not self.noise_known:
            text += " (no spread to judge noise by: medians alone)"
        return text + self._parts_text

    @property
    def _parts_text(self) -> str:
        """"; fork 2×1 over sequential 1×1, in parts: 1.67× = …" (empty without parts)."""
        par, parts = self.parallel, self.shown_parts
        return "" if parts is None else f"; {parts_sentence(par.mode, par.interop, par.intra, parts)}"

    @property
    def shown_parts(self) -> SpeedupPartsRecord | None:
        """The parts the line says: none beside a starved run (the line asks for a paired measurement)."""
        return None if self.starved else self.parts

    @property
    def _noise_rule(self) -> str:
        return NOISE_BY_PASSES if self.noise_by_passes else NOISE_BY_QUARTILES

    @property
    def reason(self) -> str:
        """Why this winner, or why none, in a sentence that begins with what decided it."""
        if self.starved:
            return f"starved: {_starved_text(self.starved)}"
        win = self.winner
        if win is None:
            return f"within noise: {self._noise_rule} overlap ({self.ratio:.2f}×)"
        if not self.noise_known:
            return f"faster: {win.label} by {self.ratio:.2f}×, on the medians alone (no spread to judge noise by)"
        return f"faster: {win.label} by {self.ratio:.2f}×, beyond noise ({NOISE_BY_QUARTILES} do not overlap)"

    def record(self) -> AdviceRecord:
        """The advice as sweep.json and `compare --json` write it."""
        win = self.winner
        record = AdviceRecord(
            text=self.text, winner=None if win is None else win.winner_record(), reason=self.reason,
            parts=self.shown_parts,
        )  # fmt: skip
        return with_busy_note(record, [m.label for m in self.busy])


def with_busy_note(record: AdviceRecord, busy: Sequence[str]) -> AdviceRecord:
    """The advice with its line and reason ending with which of its runs (`busy`: their labels, as
    "sequential 1×2") ran on a busy machine: "… (sequential 1×2 ran on a busy machine: re-run it on a
    quiet one)". Unchanged when none did."""
    if not busy:
        return record
    them = "it" if len(busy) == 1 else "them"
    note = f"{' and '.join(busy)} ran on a busy machine: re-run {them} on a quiet one"
    return msgspec.structs.replace(record, text=f"{record.text} ({note})", reason=f"{record.reason}; {note}")


def _starved_text(runs: Sequence[Measured]) -> str:
    """"threads 2×1 got fewer cores than its threads could use" (or both runs, "their")."""
    names = " and ".join(m.label for m in runs)
    return f"{names} got fewer cores than {'its' if len(runs) == 1 else 'their'} threads could use (starved)"


def _where(threads: int, cores: int | None) -> str:
    if cores is not None and threads == cores:
        return f"on {cores} cores"
    if cores is not None:
        return f"with {threads} threads on {cores} core{'s' if cores != 1 else ''}"
    return f"with {threads} threads"


def ms_text(ms: float) -> str:
    """A step time, three significant digits below 10 ms, one decimal above."""
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:#.3g} ms"


def _run_text(m: Measured) -> str:
    return f"{m.label} ({ms_text(m.stats.median)})"


# ---- pairing --------------------------------------------------------------------------------
def _most_common(values: Sequence[T | None]) -> T | None:
    """The most common known value (the first of equals); None when none is known."""
    known = Counter(v for v in values if v is not None)
    return known.most_common(1)[0][0] if known else None


def _fastest(runs: Sequence[Measured]) -> Measured:
    """The lowest median (fewer inter-op threads first among equals: the plainer configuration)."""
    return min(runs, key=lambda m: (m.stats.median, m.interop, m.intra))


def _candidates(
    runs: Sequence[Measured],
) -> tuple[int | None, dict[int, list[Measured]], dict[int, list[Measured]]]:
    cores = _most_common([m.cores for m in runs])
    model = _most_common([m.model for m in runs])
    same = [
        m
        for m in runs
        if (m.cores is None or cores is None or m.cores == cores) and (m.model is None or model is None or m.model == model)
    ]
    seq: dict[int, list[Measured]] = {}
    fork: dict[int, list[Measured]] = {}
    for m in same:
        if m.traits.baseline:
            seq.setdefault(m.threads, []).append(m)
        elif m.forks:
            fork.setdefault(m.threads, []).append(m)
    return cores, seq, fork


def _thread_count(common: set[int], cores: int | None) -> int:
    if cores is not None and cores in common:
        return cores
    if cores is not None and any(t <= cores for t in common):
        return max(t for t in common if t <= cores)
    return max(common)


def advise(runs: Sequence[Measured]) -> Advice | None:
    """Which way of using the cores served the model better (see the module docstring); None when
    the runs hold no sequential run and run of a branch pool mode of the same thread count."""
    cores, seq, fork = _candidates(runs)
    common = set(seq) & set(fork)
    if not common:
        return None
    t = _thread_count(common, cores)
    s, f = _fastest(seq[t]), _fastest(fork[t])
    slow, fast = max(s.stats.median, f.stats.median), min(s.stats.median, f.stats.median)
    ratio = slow / fast if fast > 0 else float("inf")
    noise_known = s.spread_known and f.spread_known
    by_passes = (
        len(s.pass_medians) > 1
        and len(f.pass_medians) > 1
        and not (noise_known and s.stats.within_noise(f.stats))
        and overlaps((min(s.pass_medians), max(s.pass_medians)), (min(f.pass_medians), max(f.pass_medians)))
    )
    if noise_known and s.stats.within_noise(f.stats) or by_passes:
        faster = None
    elif s.stats.median == f.stats.median:
        faster = None
    else:
        faster = s.mode if s.stats.median < f.stats.median else f.mode
    parts = speedup_parts([m.part_run() for m in runs])[next(i for i, m in enumerate(runs) if m is f)]
    return Advice(s, f, t, cores, faster, ratio, noise_by_passes=by_passes, parts=parts)


def missing_text(runs: Sequence[Measured]) -> str | None:
    """Why no advice can be given, when runs of both ways are there but of different thread counts
    (fork or threads 2×1 beside sequential 1×1, say): which run would tell. None when advice can be given, or
    when the runs are not of both ways."""
    missing = _missing(runs)
    return None if missing is None else missing.text


def _missing(runs: Sequence[Measured]) -> AdviceRecord | None:
    """`missing_text` as the advice's object: no winner, the reason "not paired: …"."""
    cores, seq, fork = _candidates(runs)
    if not seq or not fork or set(seq) & set(fork):
        return None
    f = _fastest(fork[_thread_count(set(fork), cores)])
    t = f.threads
    seq_counts = sorted(seq)
    peer = f"{seq[seq_counts[0]][0].mode} 1×{f.interop * f.intra}"
    uses = ", ".join(str(n) for n in seq_counts)
    told = (
        f"{f.label} computes with {t} threads, the sequential run{'s' if sum(len(v) for v in seq.values()) > 1 else ''} "
        f"here with {uses}"
    )
    return AdviceRecord(
        text=f"which way of using the cores serves this model better is not told: {told}; "
        f"{peer} beside it would tell whether {INTRA_WAY} or {f.way} serve it better",
        reason=f"not paired: {told}",
    )


def advice_record(runs: Sequence[Measured]) -> AdviceRecord | None:
    """The advice as an object (see the module docstring), else why there is none (no winner, "not
    paired: …"), else None (the runs are not of both ways)."""
    advice = advise(runs)
    return advice.record() if advice is not None else _missing(runs)


def advice_line(runs: Sequence[Measured]) -> str | None:
    """The advice's line (`advice_record`'s text), else None."""
    record = advice_record(runs)
    return None if record is None else record.text


# ---- typed inputs from what branchscope writes ----------------------------------------------
def from_sweep(sweep: SweepRecord) -> list[Measured]:
    """A sweep's finished cells (sweep.json: their unprofiled median and spread, the sweep's cores,
    their mode's plan words, whether they ran on a busy machine)."""
    out = []
    for i, c in enumerate(sweep.cells):
        ms = c.unprofiled_median_ms
        if c.status != DONE or ms is None or c.mode is None or c.interop is None or c.intra is None:
            continue
        spread = c.unprofiled_spread_ms
        known = spread is not None and len(spread) == 4
        lo, q1, q3, hi = spread if spread is not None and known else (ms, ms, ms, ms)
        stats = StepStats(c.unprofiled_steps or 0, ms, lo, q1, q3, hi)
        out.append(Measured(c.mode, c.interop, c.intra, stats, sweep.cores, max(1, sweep.nproc or 1), known,
                            pass_medians=tuple(c.pass_medians_ms or ()), starved=c.starved, index=i,
                            plan_by=c.plan_by, mode_traits=c.mode_traits, busy=c.busy is True))  # fmt: skip
    return out


def from_summaries(summaries: Sequence[RunSummary]) -> list[Measured]:
    """Runs compared (`compare.RunSummary`: mode, threads, unprofiled step times, cores, whether it
    was starved or ran on a busy machine), each with its index among them."""
    return [
        Measured(s.mode, s.interop, s.intra, s.unprofiled, s.cores, max(1, len(s.ranks)), model=s.model,
                 starved=s.starved is True, index=k, plan_by=s.plan_by, mode_traits=s.mode_traits,
                 busy=s.busy)  # fmt: skip
        for k, s in enumerate(summaries)
        if s.mode is not None and s.interop is not None and s.intra is not None and s.unprofiled is not None
    ]
