"""A parallel run's speedup in its parts, from runs measured apart: the one finder every view uses.

A fork or threads run M I×J (I ≥ 2, M's traits a `branch_pool`) can beat sequential for two
reasons: its *plan* (running the model as M's plan on one thread: for fork, TorchScript's
interpreter) and its *parallel* part (the I threads). Where the runs at hand include, beside M I×J,
sequential 1×J and M 1×J of the same model, the same J, on the same cores and processes, the
speedup splits as `branchscope speedup` splits it paired (`records.SpeedupPartsRecord`):

    plan = sequential 1×J ÷ M 1×J,  parallel = M 1×J ÷ M I×J,  whole = sequential 1×J ÷ M I×J

each a ratio of the runs' unprofiled medians (not paired, so with no interval: `ci95` None).

**Which runs count** (`speedup_parts`): runs with a median step (finite, above 0) that were not
starved of cores (`starved.is_starved`: their times name nothing); of several runs of one
configuration, the last listed (the latest, in the runs list). A sequential, a streams or a
1×J run has no parts; nor has a parallel run whose sequential 1×J or M 1×J is missing.

The plan's words are the mode's own (`PartRun.plan_by`: run.json's `plan_by`, a sweep cell's, or
`ModeTraits.plan_title` where the registry can be read); the sentence is `pairing.parts_text`'s.

Qt-free and torch-free: `compare`, the advice, the runs list and the compare view all call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from branchscope.profiling.trace.mode_traits import ModeTraits, baseline_mode, traits_of
from branchscope.profiling.trace.pairing import parts_text
from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord, SpeedupValueRecord

#: A configuration: (mode, inter-op threads, intra-op threads).
Config = tuple[str, int, int]


def part_configs(
    mode: str | None, interop: int | None, intra: int | None, traits: ModeTraits | None = None
) -> tuple[Config, Config] | None:
    """(sequential 1×J, M 1×J): what the speedup of M I×J is split against, paired (`branchscope
    speedup`) or not (`speedup_parts`); None for a run whose branches do not run side by side (its
    traits, `traits` where the run says them, else the table's)."""
    if mode is None or intra is None or not traits_of(mode, traits).side_by_side(interop):
        return None
    return (baseline_mode(), 1, intra), (mode, 1, intra)


@dataclass(frozen=True)
class PartRun:
    """One run as the parts finder reads it: its configuration, its unprofiled median step and what
    ties it to the others. Runs count together only where `model`, `cores` and `ranks` are equal
    (`model` is a key: a view may fold more into it, the runs list its sweep). `index` is its place
    among what was compared (None: its place in the list given), which the parts name."""

    mode: str | None
    interop: int | None
    intra: int | None
    median_ms: float | None
    model: str | None = None
    cores: int | None = None
    ranks: int = 1
    plan_by: str | None = None
    starved: bool = False
    index: int | None = None
    #: Its mode's traits where the run says them (None: the table's).
    mode_traits: ModeTraits | None = None

    @property
    def usable(self) -> bool:
        """Known configuration, a median step, not starved of cores."""
        ms = self.median_ms
        return (
            self.mode is not None and self.interop is not None and self.intra is not None
            and ms is not None and math.isfinite(ms) and ms > 0 and not self.starved
        )  # fmt: skip

    def key(self, mode: str | None, interop: int | None, intra: int | None) -> tuple:
        """What a run of configuration `mode` `interop`×`intra`, beside this one, must match."""
        return (self.model, self.cores, self.ranks, mode, interop, intra)


def _value(ratio: float) -> SpeedupValueRecord:
    return SpeedupValueRecord(median=round(ratio, 4), ci95=None)


def speedup_parts(runs: Sequence[PartRun]) -> list[SpeedupPartsRecord | None]:
    """Each run's parts (see the module docstring), None where it has none; `sequential` and
    `one_thread` name the sequential 1×J and M 1×J runs used by their `index`."""
    latest: dict[tuple, int] = {}
    for i, r in enumerate(runs):
        if r.usable:
            latest[r.key(r.mode, r.interop, r.intra)] = i
    out: list[SpeedupPartsRecord | None] = []
    for r in runs:
        wanted = part_configs(r.mode, r.interop, r.intra, r.mode_traits) if r.usable else None
        seq, one = (None, None) if wanted is None else (latest.get(r.key(*config)) for config in wanted)
        if seq is None or one is None:
            out.append(None)
            continue
        s, o = runs[seq], runs[one]
        assert s.median_ms is not None and o.median_ms is not None and r.median_ms is not None
        out.append(
            SpeedupPartsRecord(
                plan=_value(s.median_ms / o.median_ms),
                parallel=_value(o.median_ms / r.median_ms),
                whole=_value(s.median_ms / r.median_ms),
                plan_by=r.plan_by,
                sequential=seq if s.index is None else s.index,
                one_thread=one if o.index is None else o.index,
            )
        )
    return out


def parts_sentence(mode: str | None, interop: int | None, intra: int | None, parts: SpeedupPartsRecord) -> str:
    """A run's parts with what they are over: "fork 2×1 over sequential 1×1, in parts: 1.35× =
    1.40× from TorchScript's plan × 0.96× from 2 threads"."""
    return f"{mode} {interop}×{intra} over {baseline_mode()} 1×{intra}, in parts: {parts_text(parts, interop or 0)}"


def parts_short(parts: SpeedupPartsRecord) -> str:
    """The parts for a table's cell: "1.40× plan × 0.96× threads"."""
    return parts_text(parts, 0, short=True)
