"""The prediction from a branch tree and sequential times: known answers on built trees."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from branchscope.profiling.trace.prediction import (
    ASSUMPTIONS,
    StepSamples,
    branch_times_from_trace,
    lpt_makespan,
    parse_prediction,
    predict,
    prediction_json,
    prediction_text,
    region_text,
    thread_counts,
)
from branchscope.profiling.trace.records import BranchRecord, RunRecord, encode_record, read_run_record
from tests.builders.runs import write_run_json


def _tree(*spec: tuple[str, str, str | None]) -> list[BranchRecord]:
    """Branches from (name, region, parent)."""
    return [BranchRecord(name=n, region=r, parent=p, depth=r.count(".")) for n, r, p in spec]


def test_lpt_is_longest_first_where_the_given_order_would_do_worse() -> None:
    # In the given order (1, 1, 2) list scheduling ends at 3; longest first at 2.
    assert lpt_makespan([1.0, 1.0, 2.0], 2) == 2.0
    assert lpt_makespan([1.0, 1.0, 2.0], 1) == 4.0
    assert lpt_makespan([], 3) == 0.0
    b = _tree(("a", "1", None), ("b", "1", None), ("c", "1", None))
    pred = predict(b, {"a": 1.0, "b": 1.0, "c": 2.0}, 4.0, source="test")
    assert pred is not None
    assert pred.regions[0].bound_by_threads["2"] == 2.0  # in the given order it would be 4/3


def test_lpt_never_beats_the_lower_bound() -> None:
    rng = random.Random(7)
    for _ in range(200):
        times = [rng.uniform(0.1, 10.0) for _ in range(rng.randint(1, 9))]
        for k in (1, 2, 3, 4, 8):
            m = lpt_makespan(times, k)
            assert m >= max(max(times), sum(times) / k) - 1e-9
            assert m <= sum(times) + 1e-9


def test_two_equal_branches_give_two_on_two_threads_and_still_two_on_four() -> None:
    pred = predict(_tree(("a", "1", None), ("b", "1", None)), {"a": 10.0, "b": 10.0}, 20.0, source="test")
    assert pred is not None
    assert pred.by_threads == {"2": 2.0, "4": 2.0}
    assert pred.serial_ms == 0.0
    assert pred.branch_ms == {"a": 10.0, "b": 10.0}  # what it is made of, for the gap explained
    (region,) = pred.regions
    assert (region.region, region.work_ms, region.longest_branch_ms) == ("1", 20.0, 10.0)
    assert region.bound_by_threads == {"2": 2.0, "4": 2.0}


def test_one_long_branch_bounds_the_region_at_work_over_longest() -> None:
    b = _tree(("long", "1", None), ("s1", "1", None), ("s2", "1", None))
    pred = predict(b, {"long": 30.0, "s1": 10.0, "s2": 10.0}, 50.0, source="test")
    assert pred is not None
    assert pred.by_threads["2"] == pytest.approx(50 / 30, abs=1e-4)
    assert pred.by_threads["4"] == pytest.approx(50 / 30, abs=1e-4)
    assert pred.regions[0].longest_branch == "long"
    text = prediction_text(pred)
    assert text.startswith("could be at most 1.67× on 2 threads, 1.67× on 4: long alone is 60% of region 1")
    assert ASSUMPTIONS in text and "from test" in text
    assert region_text(pred.regions[0]).startswith("at most 1.67× on 2 threads")


def test_serial_parts_between_regions_bound_the_step_as_amdahl_says() -> None:
    b = _tree(("a", "1", None), ("b", "1", None), ("c", "2", None), ("d", "2", None))
    pred = predict(b, {"a": 10.0, "b": 10.0, "c": 10.0, "d": 10.0}, 60.0, source="test")
    assert pred is not None
    assert pred.serial_ms == 20.0
    assert pred.by_threads["2"] == 1.5  # 60 / (20 + 10 + 10)
    assert pred.by_threads["4"] == 1.5
    assert [r.bound_by_threads["2"] for r in pred.regions] == [2.0, 2.0]
    assert "33% of the step runs outside the regions" in prediction_text(pred)


def test_a_nested_region_shortens_its_branch_by_its_own_makespan() -> None:
    # Region 1: A (40 ms, of which region 1.1: A1 and A2, 15 ms each; 10 ms its own) and B (20 ms).
    b = _tree(("A", "1", None), ("B", "1", None), ("A1", "1.1", "A"), ("A2", "1.1", "A"))
    pred = predict(b, {"A": 40.0, "B": 20.0, "A1": 15.0, "A2": 15.0}, 60.0, source="test")
    assert pred is not None
    assert pred.serial_ms == 0.0  # the nested region's work is inside A's
    # On 4 threads A takes 10 + 15 = 25 ms (A1 and A2 side by side), B 20 ms beside it: 25 ms.
    assert pred.by_threads["4"] == 2.4
    # On 2 threads the rule alone would say 25 ms too, but 60 ms of work on 2 threads takes 30 ms.
    assert pred.by_threads["2"] == 2.0
    outer, inner = pred.regions
    assert (outer.region, inner.region) == ("1", "1.1")
    assert outer.work_ms == 60.0 and outer.bound_by_threads == {"2": 2.0, "4": 2.4}
    assert inner.work_ms == 30.0 and inner.bound_by_threads["2"] == 2.0
    # On one thread per region nothing is gained.
    one = predict(b, {"A": 40.0, "B": 20.0, "A1": 15.0, "A2": 15.0}, 60.0, source="test", threads=(1,))
    assert one is not None and one.by_threads == {"1": 1.0}


def test_more_branches_than_four_ask_for_more_thread_counts() -> None:
    assert thread_counts(2) == (2, 4)
    assert thread_counts(5) == (2, 4, 8)
    names = [f"b{i}" for i in range(6)]
    pred = predict(_tree(*((n, "1", None) for n in names)), dict.fromkeys(names, 5.0), 30.0, source="test")
    assert pred is not None
    assert pred.by_threads == {"2": 2.0, "4": 3.0, "8": 6.0}
    for k, v in pred.by_threads.items():
        assert 1.0 <= v <= int(k)


def test_an_unmeasured_branch_is_said_and_only_lowers_the_bound() -> None:
    b = _tree(("a", "1", None), ("b", "1", None), ("c", "1", None))
    full = predict(b, {"a": 10.0, "b": 10.0, "c": 10.0}, 30.0, source="test")
    part = predict(b, {"a": 10.0, "b": 10.0}, 30.0, source="test")
    assert full is not None and part is not None
    assert part.unmeasured == ["c"] and full.unmeasured is None
    assert part.by_threads["4"] <= full.by_threads["4"]
    assert "1 branch(es) unmeasured" in prediction_text(part)


def test_nothing_to_predict_gives_none() -> None:
    b = _tree(("a", "1", None), ("b", "1", None))
    assert predict([], {}, 10.0, source="test") is None
    assert predict(b, {}, 10.0, source="test") is None
    assert predict(b, {"a": 1.0, "b": 1.0}, 0.0, source="test") is None


def test_branch_times_come_from_a_sequential_traces_steps() -> None:
    events = [
        {"ph": "X", "name": "step 1", "ts": 0, "dur": 10_000},
        {"ph": "X", "name": "branch: a", "ts": 1_000, "dur": 3_000},
        {"ph": "X", "name": "branch: b -> c", "ts": 4_000, "dur": 5_000},
        {"ph": "X", "name": "step 2", "ts": 20_000, "dur": 12_000},
        {"ph": "X", "name": "branch: a", "ts": 21_000, "dur": 5_000},
        {"ph": "X", "name": "branch: b -> c", "ts": 26_000, "dur": 5_000},
        {"ph": "X", "name": "branch: a", "ts": 50_000, "dur": 5_000},  # outside every step
        {"ph": "i", "name": "branch: a", "ts": 2_000},
        "junk",
    ]
    samples = branch_times_from_trace(events)
    assert samples is not None
    step_ms, ms, n = samples.typical()
    assert (step_ms, n) == (11.0, 2)
    assert ms == {"a": 4.0, "b → c": 5.0}
    assert branch_times_from_trace([{"ph": "X", "name": "branch: a", "ts": 0, "dur": 1}]) is None


def test_a_step_slowed_by_other_work_moves_no_part_of_the_typical_step() -> None:
    steps = [10.0, 11.0, 40.0]  # the third step shared its core with something else
    per_step = [{"a": 4.0, "b": 5.0}, {"a": 4.5, "b": 5.5}, {"a": 20.0, "b": 15.0}]
    assert StepSamples(steps, per_step).typical() == (11.0, {"a": 4.5, "b": 5.5}, 3)
    assert StepSamples([10.0, 12.0], [{"a": 4.0}, {}]).typical() == (11.0, {"a": 2.0}, 2)  # a step without it: 0


def test_run_json_round_trips_and_old_ones_read_none(tmp_path) -> None:
    b = _tree(("a", "1", None), ("b", "1", None))
    pred = predict(b, {"a": 6.0, "b": 4.0}, 12.0, source="this run's 5 profiled steps", steps=5)
    record = RunRecord(mode="sequential", branches=b, prediction=pred, complete=True)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "run.json").write_bytes(encode_record(record))
    data = json.loads((tmp_path / "new" / "run.json").read_text())
    assert data["prediction"]["from"] == "this run's 5 profiled steps"
    assert data["prediction"]["by_threads"] == {"2": pytest.approx(12 / 8, abs=1e-4), "4": pytest.approx(12 / 8, abs=1e-4)}
    back = read_run_record(tmp_path / "new")
    assert back is not None and back.prediction == pred
    old = write_run_json(tmp_path / "old", mode="fork", interop=2, intra=1, median_ms=5.0)
    old_record = read_run_record(old)
    assert old_record is not None and old_record.complete and old_record.prediction is None
    # A field of the wrong type reads as absent, never as an error.
    data["prediction"]["regions"] = "nope"
    data["prediction"]["serial_ms"] = "1.0"
    bad = RunRecord.parse(data).prediction
    assert bad is not None and bad.regions == [] and bad.serial_ms is None


def test_a_traces_prediction_parses_with_floats_as_their_digits() -> None:
    b = _tree(("a", "1", None), ("b", "1", None))
    pred = predict(b, {"a": 6.0, "b": 4.0}, 12.0, source="x")
    raw = prediction_json(pred)
    assert raw is not None and raw["text"] == prediction_text(pred)  # type: ignore[arg-type]

    def as_digits(v):
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, dict):
            return {k: as_digits(x) for k, x in v.items()}
        if isinstance(v, list):
            return [as_digits(x) for x in v]
        return v

    assert parse_prediction(as_digits(raw)) == pred
    assert parse_prediction({"by_threads": {"2": "nan"}}) is None
    assert parse_prediction("no") is None
    assert parse_prediction({}) is None


@pytest.mark.parametrize("times", list(itertools.permutations([7.0, 5.0, 4.0, 3.0, 1.0]))[::10])
def test_the_bound_does_not_depend_on_the_order_branches_are_listed(times) -> None:
    names = ["a", "b", "c", "d", "e"]
    pred = predict(_tree(*((n, "1", None) for n in names)), dict(zip(names, times, strict=True)), 20.0, source="t")
    assert pred is not None
    assert pred.by_threads["2"] == 2.0  # 20 / LPT(7+3, 5+4+1) = 20 / 10


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_no_tree_is_given_more_than_k_threads_can_do(data) -> None:
    """However deep the nesting, a bound on k threads lies in [1, k], the step's and each region's."""
    tree, times = [("b0", "1", None)], {"b0": data.draw(st.floats(0.0, 50.0))}
    regions = {"1": None}
    for i in range(1, data.draw(st.integers(1, 12))):
        parent = data.draw(st.sampled_from([None, *(n for n, _, _ in tree)]))
        nested = [r for r, p in regions.items() if p == parent]
        region = data.draw(st.sampled_from(nested)) if nested and data.draw(st.booleans()) else None
        if region is None:  # a new region: at the top, or nested in the parent's region's id
            region = str(i + 1) if parent is None else f"{next(r for n, r, _ in tree if n == parent)}.{i}"
            regions[region] = parent
        name = f"b{i}"
        tree.append((name, region, parent))
        times[name] = data.draw(st.floats(0.0, 50.0))
    for name, _, _ in reversed(tree):  # a branch holds at least the work nested in it (children first)
        times[name] += sum(times[n] for n, _, p in tree if p == name)
    step = sum(times[n] for n, _, p in tree if p is None) + data.draw(st.floats(0.0, 50.0))
    pred = predict(_tree(*tree), times, max(step, 1e-3), source="test")
    assert pred is not None
    for k, v in pred.by_threads.items():
        assert 1.0 - 1e-3 <= v <= int(k) + 1e-3
    for r in pred.regions:
        for k, v in r.bound_by_threads.items():
            assert v <= int(k) + 1e-3
