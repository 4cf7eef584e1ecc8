"""Paired runs without a worker: --configs, which configurations share a worker, the order of
rounds, the record and speedup.json's folder rules (`profiling/run/paired.py`, `app/cmd_speedup.py`)."""

from __future__ import annotations

import json

import pytest

from branchscope.app import cli
from branchscope.profiling.run import paired
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.outcome import RunResult
from branchscope.profiling.run.paired import (
    ConfigError,
    PairedConfig,
    PairedRequest,
    SpeedupFolderError,
    check_speedup_out,
    parse_configs,
    run_paired,
    share_one_worker,
    speedup_lines,
    speedup_record,
    write_speedup,
)
from branchscope.profiling.run.paired_worker import parse_config_list, round_order
from branchscope.profiling.trace.sweep_records import (
    ACROSS_WORKERS,
    IN_ONE_WORKER,
    SPEEDUP_JSON,
    PairedConfigRecord,
    PairedTimesRecord,
    SpeedupRecord,
    is_speedup_json,
)


def test_configs_parse_in_order_with_the_baseline_first():
    configs = parse_configs("sequential:1x1, fork:2x1,threads:2x2")
    assert configs == [PairedConfig("sequential", 1, 1), PairedConfig("fork", 2, 1), PairedConfig("threads", 2, 2)]
    assert [c.label for c in configs] == ["sequential 1×1", "fork 2×1", "threads 2×2"]
    assert parse_config_list(",".join(c.argv() for c in configs)) == [
        ("sequential", 1, 1, False), ("fork", 2, 1, False), ("threads", 2, 2, False),
    ]  # fmt: skip
    one = PairedConfig("fork", 1, 1, one_at_a_time=True)
    assert parse_config_list(one.argv()) == [("fork", 1, 1, True)]
    assert parse_configs("multi-stream:1x1,sequential:1x1")[0].mode == "streams"  # an alias, by its name


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("sequential:1x1,fork:2", "'fork:2' is not MODE:IxJ"),
        ("sequential:1x1,forks:2x1", "'forks' is not one of"),
        ("sequential:1x1,fork:0x1", "'fork:0x1': thread counts must be at least 1"),
        ("sequential:1x1,sequential:1x1", "'sequential:1x1' is given twice"),
        ("fork:2x1", "at least two configurations"),
        ("sequential:1x1,,fork:2x1", "'' is not MODE:IxJ"),
    ],
)
def test_config_errors_name_the_bad_item(text, named):
    with pytest.raises(ConfigError, match="--configs") as info:
        parse_configs(text)
    assert named in str(info.value)


def test_pool_using_configurations_share_a_worker_only_when_their_threads_agree():
    assert share_one_worker(parse_configs("sequential:1x1,fork:2x1"))
    assert share_one_worker(parse_configs("sequential:1x1,sequential:1x2,fork:2x1,threads:2x1"))
    assert not share_one_worker(parse_configs("fork:1x1,fork:2x1"))  # the inter-op pool: once per process
    assert not share_one_worker(parse_configs("sequential:1x1,fork:2x1,fork:2x2"))  # pool threads read intra once
    assert PairedRequest(parse_configs("fork:1x1,fork:2x1"), RunOptions(demo="twin-mm")).round_count == paired.ROUNDS_ACROSS_WORKERS
    assert PairedRequest(parse_configs("sequential:1x1,fork:2x1"), RunOptions(demo="twin-mm")).round_count == paired.ROUNDS_IN_ONE_WORKER


def test_rounds_alternate_and_turn_round():
    assert [round_order(2, r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert round_order(3, 1) == [2, 1, 0]


def test_across_workers_runs_a_worker_per_configuration_per_round_in_turn(monkeypatch):
    """The orchestration across workers, its measuring replaced: each call's configuration and the
    median it gives back are the round's, pairs are per round."""
    calls: list[str] = []
    medians = {"fork 1×1": iter([40.0, 44.0, 48.0]), "fork 2×1": iter([20.0, 22.0, 24.0])}

    def fake_measure(options, configs, rounds, on_event, cancel):
        (config,) = configs
        calls.append(config.label)
        times = PairedTimesRecord(
            configs=[PairedConfigRecord(mode=config.mode, interop=config.interop, intra=config.intra,
                                        median_ms=next(medians[config.label]), steps_ms=[1.0] * rounds)],  # fmt: skip
            model="demo twin-mm", complete=True,
        )  # fmt: skip
        return RunResult(0, None, payload=times), times

    monkeypatch.setattr(paired, "_measure", fake_measure)
    request = PairedRequest(parse_configs("fork:1x1,fork:2x1"), RunOptions(demo="twin-mm", steps=4), rounds=3, parts=False)
    result = run_paired(request)
    assert result.ok and result.record is not None
    assert calls == ["fork 1×1", "fork 2×1", "fork 2×1", "fork 1×1", "fork 1×1", "fork 2×1"]
    record = result.record
    assert record.measured == ACROSS_WORKERS and record.order == [[0, 1], [1, 0], [0, 1]] and record.worker_steps == 4
    assert [c.steps_ms for c in record.configs] == [[40.0, 44.0, 48.0], [20.0, 22.0, 24.0]]
    assert record.speedup[0] is None and record.speedup[1] is not None
    assert record.speedup[1].median == 2.0 and record.speedup[1].distinguishable


def test_a_failed_worker_is_one_line_naming_the_round(monkeypatch):
    def failing(options, configs, rounds, on_event, cancel):
        return RunResult(3, None, message="fork mode needs TorchScript"), None

    monkeypatch.setattr(paired, "_measure", failing)
    result = run_paired(PairedRequest(parse_configs("fork:1x1,fork:2x1"), RunOptions(demo="twin-mm"), rounds=2, parts=False))
    assert result.exit_code == 3 and result.message == "round 1, fork 1×1: fork mode needs TorchScript"


def _record() -> SpeedupRecord:
    configs = [
        PairedConfigRecord(mode="sequential", interop=1, intra=1, steps_ms=[40.0, 42.0, 41.0, 43.0]),
        PairedConfigRecord(mode="fork", interop=2, intra=1, steps_ms=[20.0, 21.0, 20.5, 21.5]),
        PairedConfigRecord(mode="threads", interop=2, intra=1, steps_ms=[39.0, 43.0, 40.0, 44.0]),
    ]
    return speedup_record(configs, [[0, 1, 2], [2, 1, 0]] * 2, IN_ONE_WORKER, 4, RunOptions(demo="twin-mm"), None)


def test_the_record_holds_medians_speedups_and_a_prediction_key():
    record = _record()
    data = json.loads(json.dumps(__import__("msgspec").to_builtins(record)))
    assert {"configs", "baseline", "speedup", "prediction"} <= set(data) and data["prediction"] is None
    assert [(c["mode"], c["interop"], c["intra"], c["median_ms"], c["steps"]) for c in data["configs"]] == [
        ("sequential", 1, 1, 41.5, 4), ("fork", 2, 1, 20.75, 4), ("threads", 2, 1, 41.5, 4),
    ]  # fmt: skip
    assert data["baseline"] == 0 and data["speedup"][0] is None
    fork, threads = data["speedup"][1], data["speedup"][2]
    assert set(fork) == {"median", "ci95", "distinguishable", "parts"} and fork["distinguishable"] is True
    assert fork["parts"] is None  # no fork 1×1 measured: no parts
    assert fork["ci95"][0] <= fork["median"] == 2.0 <= fork["ci95"][1]
    assert threads["distinguishable"] is False and threads["ci95"][0] <= 1.0 <= threads["ci95"][1]
    lines = speedup_lines(record)
    assert lines[0] == "sequential 1×1: median 41.50 ms over 4 steps (baseline)"
    assert lines[1].startswith("fork 2×1: median 20.75 ms over 4 steps — 2.00× faster than sequential 1×1 (95% interval ")
    assert "threads 2×1: median 41.50 ms over 4 steps — not distinguishable from 1.0× (" in lines[2]
    assert lines[3].startswith("measured in one worker: 4 rounds")
    assert len(lines) == 4  # no prediction: nothing said of one


def test_the_lines_name_each_configuration_left_out_and_why():
    """What `speedup` could not measure (fork where TorchScript is off) is said under what it did,
    in the window's Compare page as on the CLI."""
    from branchscope.profiling.trace.sweep_records import SkippedConfigRecord

    record = _record()
    why = "fork mode needs TorchScript, and TorchScript is disabled in this torch: use threads mode"
    record.skipped = [SkippedConfigRecord(mode="fork", interop=4, intra=1, reason=why)]
    lines = speedup_lines(record)
    assert lines[3].startswith("measured in one worker") and lines[4] == f"skipped fork:4x1: {why}"


def test_the_record_says_what_the_branches_could_give_and_each_pool_configurations_share_of_it():
    from branchscope.profiling.trace.prediction import predict
    from branchscope.profiling.trace.records import BranchRecord
    from branchscope.profiling.trace.sweep_records import PairedTimesRecord

    # two branches of 30 and 10 ms in a 44 ms step: at most 44 / (4 + 30) = 1.29× on 2 threads
    branches = [BranchRecord(name="a", region="1"), BranchRecord(name="b", region="1")]
    prediction = predict(branches, {"a": 30.0, "b": 10.0}, 44.0, source="6 sequential steps measured in the worker")
    times = PairedTimesRecord(prediction=prediction)
    configs = [
        PairedConfigRecord(mode="sequential", interop=1, intra=1, steps_ms=[44.0, 44.0, 44.0, 44.0]),
        PairedConfigRecord(mode="fork", interop=2, intra=1, steps_ms=[40.0, 40.0, 40.0, 40.0]),
    ]
    record = speedup_record(configs, [[0, 1], [1, 0]] * 2, IN_ONE_WORKER, 4, RunOptions(demo="twin-mm"), times)
    assert record.prediction is not None and record.prediction["by_threads"]["2"] == pytest.approx(44 / 34, abs=1e-3)
    lines = speedup_lines(record)
    assert lines[-2].startswith("the branches could be at most 1.29× on 2 threads")
    assert lines[-1] == "fork 2×1: 1.10× measured of the 1.29× its 2 threads could give (85%)"


def test_speedup_json_is_written_and_a_foreign_one_never_replaced(tmp_path):
    out = tmp_path / "made" / "here"
    path = write_speedup(out, _record())
    assert path == out / SPEEDUP_JSON and is_speedup_json(json.loads(path.read_text()))
    assert SpeedupRecord.parse(json.loads(path.read_text())).configs[1].mode == "fork"
    write_speedup(out, _record())  # ours: replaced
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / SPEEDUP_JSON).write_text('{"mine": true}')
    with pytest.raises(SpeedupFolderError, match="is not branchscope's"):
        write_speedup(theirs, _record())
    assert (theirs / SPEEDUP_JSON).read_text() == '{"mine": true}'
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / SPEEDUP_JSON).symlink_to(path)
    with pytest.raises(SpeedupFolderError, match="not a file branchscope wrote"):
        check_speedup_out(linked)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpeedupFolderError, match="is not a folder"):
        check_speedup_out(tmp_path / "file")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--configs", "sequential:1x1,fork:2"], "error: --configs: 'fork:2' is not MODE:IxJ"),
        (["--configs", "sequential:1x1,fork:2x1", "--rounds", "1"], "error: --rounds must be at least 2, not 1"),
        (["--configs", "sequential:1x1,fork:2x1", "--nproc", "2"], "error: speedup measures one process"),
        (["--configs", "sequential:1x1,fork:2x1", "--steps", "0"], "error: --steps must be at least 1, not 0"),
    ],
)
def test_bad_arguments_are_one_error_line_and_exit_2(args, says, capsys):
    assert cli.main(["speedup", "--demo", "twin-mm", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(says) and captured.err.count("\n") == 1


def test_a_foreign_out_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / SPEEDUP_JSON).write_text("[]")
    assert cli.main(["speedup", "--demo", "twin-mm", "--configs", "sequential:1x1,fork:2x1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "is not branchscope's" in err and err.count("\n") == 1
    assert (tmp_path / SPEEDUP_JSON).read_text() == "[]"


def test_the_paired_worker_starts_as_the_worker_does_under_either_python(tmp_path):
    """Its command: branchscope's `-I -m` module, or under --python the interpreter's bootstrap
    running the paired worker's module; the configurations and rounds after the run's options; room
    for the largest intra-op count in OpenMP's team."""
    import sys
    from pathlib import Path

    from branchscope.profiling.run.paired_worker import PAIRED_WORKER_MODULE
    from branchscope.profiling.run.protocol import RunRequest

    configs = parse_configs("sequential:1x2,fork:2x1")
    req = RunRequest(mode="fork", interop=2, intra=1, out=tmp_path / "run", options=RunOptions(demo="twin-mm"))
    layout = paired._PairedWorker(req, tmp_path, configs, 7)
    command = layout.command()
    assert command[:4] == [sys.executable, "-I", "-m", PAIRED_WORKER_MODULE]
    assert command[-4:] == ["--configs", "sequential:1x2,fork:2x1", "--rounds", "7"]
    assert command[command.index("--out") + 1] == str(tmp_path.resolve())
    assert layout.env("token")["OMP_NUM_THREADS"] == "2"
    other = RunRequest(mode="fork", interop=2, intra=1, out=tmp_path / "run",
                       options=RunOptions(demo="twin-mm", python=Path(sys.executable)))  # fmt: skip
    command = paired._PairedWorker(other, tmp_path, configs, 7).command()
    assert command[1:3] == ["-I", "-c"] and f"run_module({PAIRED_WORKER_MODULE!r}" in command[3]
    assert command[-4:] == ["--configs", "sequential:1x2,fork:2x1", "--rounds", "7"]


def test_fresh_workers_measure_across_workers_where_one_could_hold_them():
    configs = parse_configs("sequential:1x1,fork:2x1")
    assert PairedRequest(configs, RunOptions(demo="twin-mm")).in_one_worker
    fresh = PairedRequest(configs, RunOptions(demo="twin-mm"), fresh_workers=True)
    assert not fresh.in_one_worker and fresh.round_count == paired.ROUNDS_ACROSS_WORKERS
    assert "--fresh-workers" in fresh.argv() and "--fresh-workers" not in PairedRequest(configs, RunOptions(demo="twin-mm")).argv()


def test_a_speedup_above_what_the_branches_could_give_is_said_to_be():
    from branchscope.profiling.trace.prediction import predict
    from branchscope.profiling.trace.records import BranchRecord
    from branchscope.profiling.trace.sweep_records import PairedTimesRecord

    branches = [BranchRecord(name="a", region="1"), BranchRecord(name="b", region="1")]
    prediction = predict(branches, {"a": 30.0, "b": 10.0}, 44.0, source="6 sequential steps measured in the worker")
    configs = [
        PairedConfigRecord(mode="sequential", interop=1, intra=1, steps_ms=[66.0, 65.0, 67.0, 66.0, 66.0, 65.5]),
        PairedConfigRecord(mode="fork", interop=2, intra=1, steps_ms=[38.0, 38.5, 37.5, 38.0, 38.2, 37.9]),
    ]
    record = speedup_record(configs, [[0, 1], [1, 0]] * 3, IN_ONE_WORKER, 6, RunOptions(demo="inception"),
                            PairedTimesRecord(prediction=prediction))  # fmt: skip
    lines = speedup_lines(record)
    assert lines[-2].startswith("fork 2×1: 1.7") and "× measured of the 1.29× its 2 threads could give" in lines[-2]
    assert lines[-1].startswith("warning: fork 2×1 measured above what its branches could give: ")
    assert "--fresh-workers" in lines[-1]


# ---------------------------------------------------------------- a speedup in its parts


def _request(text: str, **kwargs) -> PairedRequest:
    return PairedRequest(parse_configs(text), RunOptions(demo="twin-mm"), **kwargs)


def test_each_parallel_configuration_gains_what_its_parts_need_in_the_same_worker_where_it_can():
    req = _request("sequential:1x1,fork:2x1,threads:2x1")
    # fork 1×1 and threads 1×1 join the worker, one branch at a time on the 2 threads' pools
    assert req.added == [PairedConfig("fork", 1, 1, True), PairedConfig("threads", 1, 1, True)]
    assert req.configs == [*req.user_configs, *req.added] and req.in_one_worker
    assert req.argv()[-2:] == ["--configs", "sequential:1x1,fork:2x1,threads:2x1"]  # the user's, as given
    assert "--no-parts" in _request("sequential:1x1,fork:2x1", parts=False).argv()
    # Sequential 1×J of the pool's J, whatever the baseline
    assert _request("sequential:1x2,fork:2x1").added == [PairedConfig("sequential", 1, 1), PairedConfig("fork", 1, 1, True)]
    # Configurations that cannot share a worker: fork 1×J itself, in fresh workers
    req = _request("fork:2x1,fork:2x2")
    assert req.added == [
        PairedConfig("sequential", 1, 1), PairedConfig("fork", 1, 1), PairedConfig("sequential", 1, 2), PairedConfig("fork", 1, 2),
    ]  # fmt: skip
    assert not req.in_one_worker
    assert _request("sequential:1x1,fork:2x1", fresh_workers=True).added == [PairedConfig("fork", 1, 1)]
    # What the user gave is used as it is; no parts for what runs no branches side by side
    assert _request("sequential:1x1,fork:1x1,fork:2x1").added == []
    assert _request("sequential:1x1,sequential:1x2,streams:2x1,fork:1x1").added == []
    assert _request("sequential:1x1,fork:2x1", parts=False).configs == parse_configs("sequential:1x1,fork:2x1")


def test_one_at_a_time_configurations_share_a_worker_only_beside_a_pool_of_their_intra_count():
    one = PairedConfig("fork", 1, 1, True)
    assert share_one_worker([PairedConfig("sequential", 1, 1), PairedConfig("fork", 2, 1), one])
    assert not share_one_worker([PairedConfig("sequential", 1, 1), PairedConfig("fork", 2, 2), one])
    assert not share_one_worker([PairedConfig("sequential", 1, 1), one])  # no pool of its mode's to run on


def _parts_record() -> SpeedupRecord:
    configs = [
        PairedConfigRecord(mode="sequential", interop=1, intra=1, steps_ms=[40.0, 40.0, 40.0, 40.0, 40.0]),
        PairedConfigRecord(mode="fork", interop=2, intra=1, steps_ms=[20.0, 20.0, 20.0, 20.0, 20.0]),
        PairedConfigRecord(mode="fork", interop=1, intra=1, one_at_a_time=True, steps_ms=[30.0, 30.0, 30.0, 30.0, 30.0]),
    ]
    added = [PairedConfig("fork", 1, 1, True)]
    return speedup_record(configs, [[0, 1, 2], [2, 1, 0]] * 2 + [[0, 1, 2]], IN_ONE_WORKER, 5, RunOptions(demo="twin-mm"), None, added)


def test_a_parallel_speedup_is_split_into_its_plan_and_its_threads():
    record = _parts_record()
    assert [c.added for c in record.configs] == [None, None, "parts"]
    parts = record.speedup[1].parts
    assert parts is not None and parts.plan_by == "TorchScript's plan"
    assert (parts.plan.median, parts.parallel.median, parts.whole.median) == (pytest.approx(40 / 30, abs=1e-4), 1.5, 2.0)
    assert record.speedup[2].parts is None
    lines = speedup_lines(record)
    assert lines[1].startswith("fork 2×1: median 20.00 ms")
    assert lines[3].startswith("fork 1×1 (one branch at a time): median 30.00 ms over 5 steps — 1.33× faster than sequential 1×1")
    assert lines[3].endswith("(measured for the parts)")
    said = [line for line in lines if line.startswith("  in parts")]
    assert said == [
        "  in parts, over sequential 1×1: 2.00× = 1.33× [1.33–1.33] from TorchScript's plan × 1.50× [1.50–1.50] from 2 threads"
    ]
    assert any(line.startswith("parts: each parallel M I×J is split") and "all in one worker" in line for line in lines)


def test_the_bound_is_held_against_what_the_threads_gave():
    record = _parts_record()
    record.prediction = {"by_threads": {"2": 1.6, "4": 1.6}, "by_threads_ci95": {"2": [1.5, 1.7], "4": [1.5, 1.7]}}
    lines = speedup_lines(record)
    held = [line for line in lines if "threads could give" in line]
    assert held == ["fork 2×1: 1.50× from its threads (over fork 1×1) of the 1.60× [1.50–1.70] its 2 threads could give (94%)"]


def test_speedup_json_of_format_1_still_opens(tmp_path):
    old = {"paired": 1, "configs": [{"mode": "sequential", "interop": 1, "intra": 1, "steps_ms": [1.0]}],
           "speedup": [None], "baseline": 0}  # fmt: skip
    assert is_speedup_json(old) and SpeedupRecord.parse(old).configs[0].added is None
    assert is_speedup_json({**old, "paired": 2}) and not is_speedup_json({**old, "paired": 3})
