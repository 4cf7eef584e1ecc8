"""Multi-node runs (`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`): each node's runner starts
torch.distributed.run with a c10d rendezvous; the nodes share OUT, node 0 writes the run.json of
every rank once each node's ranks are in; a node that dies is named with its ranks, and nothing of
either node is left running. Tested as two nodes on this machine, over 127.0.0.1 only (gloo)."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from branchscope.profiling.run.folder import RunFolder, RunFolderError
from branchscope.profiling.run.launch import launcher_command
from branchscope.profiling.run.nodes import NODE_DIR, NodeFailure, NodeFolder
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RUNNER_MODULE, RunRequest
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.trace.records import RunRecord
from tests.builders.runs import write_run_json
from tests.paths import ROOT
from tests.processes import mentioning, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _options(**changes: object) -> RunOptions:
    base = RunOptions(demo="ddp-local-loss", steps=2, warmup=0, nnodes=2, node_rank=0, rdzv_endpoint="127.0.0.1:29511")
    return base.replace(**changes)


def _request(out: Path, **changes: object) -> RunRequest:
    return RunRequest(mode="sequential", interop=1, intra=1, out=out, options=_options(**changes))


# ---------------------------------------------------------------- options and the launcher


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rdzv_endpoint": None}, "--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node"),
        ({"node_rank": 2}, "--node-rank must be from 0 to 1 (--nnodes 2), not 2"),
        ({"nnodes": 0, "node_rank": 0}, "--nnodes must be at least 1, not 0"),
        ({"rdzv_endpoint": "127.0.0.1"}, "--rdzv-endpoint '127.0.0.1' is not HOST:PORT (a host name or address, a port from 1 to 65535)"),
        ({"rdzv_endpoint": "127.0.0.1:70000"}, "--rdzv-endpoint '127.0.0.1:70000' is not HOST:PORT (a host name or address, a port from 1 to 65535)"),
        ({"rdzv_endpoint": "a b:29500"}, "--rdzv-endpoint 'a b:29500' is not HOST:PORT (a host name or address, a port from 1 to 65535)"),
        ({"nnodes": 1}, "--rdzv-endpoint is for a run of several nodes (--nnodes above 1)"),
    ],
)
def test_bad_node_options_are_one_line_exit_2_and_out_is_untouched(tmp_path, changes, message):
    out = tmp_path / "out"
    result = run_profile(_request(out, **changes))
    assert (result.exit_code, result.message) == (2, message)
    assert not out.exists()


def test_the_launcher_meets_at_the_c10d_endpoint_and_node_0_hosts_its_store_on_loopback(tmp_path):
    for node in (0, 1):
        cmd = launcher_command(_request(tmp_path / "out", node_rank=node, nproc=3), tmp_path / "out")
        launcher = cmd[cmd.index("torch.distributed.run") :]
        value = {flag: launcher[launcher.index(flag) + 1] for flag in ("--nnodes", "--rdzv-backend",
                 "--rdzv-endpoint", "--rdzv-conf", "--local-addr", "--nproc-per-node", "--max-restarts")}  # fmt: skip
        assert value == {
            "--nnodes": "2", "--rdzv-backend": "c10d", "--rdzv-endpoint": "127.0.0.1:29511",
            "--rdzv-conf": f"is_host={'true' if node == 0 else 'false'}", "--local-addr": "127.0.0.1",
            "--nproc-per-node": "3", "--max-restarts": "0",
        }  # fmt: skip
        assert "--standalone" not in launcher and "--node-rank" not in launcher  # c10d orders the nodes itself
    # Another host, given by the user: torch picks the store's host, and no loopback address is forced.
    remote = launcher_command(_request(tmp_path / "out", rdzv_endpoint="node0.cluster:29400"), tmp_path / "out")
    assert "--local-addr" not in remote and "--rdzv-conf" not in remote and "node0.cluster:29400" in remote


def test_the_node_options_go_through_the_runner_argv_and_not_to_the_worker(tmp_path):
    req = _request(tmp_path / "out", node_rank=1)
    argv = req.argv()
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "127.0.0.1:29511"
    assert "--nnodes" not in req.argv(worker=True) and "--rdzv-endpoint" not in req.argv(worker=True)
    single = RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="x")).argv()
    assert "--nnodes" not in single and "--node-rank" not in single  # the defaults stay unsaid


# ---------------------------------------------------------------- OUT shared by the nodes


def _part(folder: NodeFolder, rank: int) -> None:
    """A rank's complete files in `folder`'s staging folder, as its worker and runner leave them."""
    assert folder.staging is not None
    rank_dir = write_run_json(folder.staging / f"rank-{rank}", rank=rank, world_size=2, steps_ms=[1.0, 2.0])
    (rank_dir / "trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))


def test_the_nodes_share_out_node_0_takes_node_1s_ranks_and_a_single_run_waits(tmp_path):
    out = tmp_path / "out"
    node0, node1 = NodeFolder(out, 0, 2).open(), NodeFolder(out, 1, 2).open()
    try:
        with pytest.raises(RunFolderError, match="another branchscope run is writing to"):
            RunFolder(out).open()  # a run on one machine waits for the nodes
        with pytest.raises(RunFolderError, match="another branchscope runner is node 1 of a run writing to"):
            NodeFolder(out, 1, 2).open()
        _part(node0, 0)
        _part(node1, 1)
        node1.done([1])
    finally:
        node1.close()
    assert (out / NODE_DIR.format(node=1) / "stage" / "rank-1" / "run.json").is_file()  # left for node 0
    try:
        parts = node0.gather(deadline=float("inf"), cancelled=lambda: False)
        assert parts is not None and [(rec.node, [rank for rank, _ in runs]) for rec, runs in parts] == [(1, [1])]
        run = node0.commit(RunRecord(complete=True, ranks=[], nnodes=2))
    finally:
        node0.close()
    assert sorted(p.name for p in out.iterdir()) == ["node-0.json", "node-1.json", "rank-0", "rank-1", "run.json"]
    assert {"node-0.json", "node-1.json", "rank-1/run.json", "rank-1/trace.json.gz"} <= set(run.files or {})
    assert json.loads((out / "node-1.json").read_text())["status"] == "done"
    with RunFolder(out) as single:  # every file is ours: the next run on one machine replaces them
        assert single.staging is not None
        (single.staging / "trace.json.gz").write_bytes(b"x")
        single.commit(RunRecord(complete=True))
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "trace.json.gz"]


def test_node_0_names_a_node_that_failed_and_keeps_the_earlier_run(tmp_path):
    out = tmp_path / "out"
    write_run_json(out, mode="sequential", files={"run.json": 10})
    earlier = (out / "run.json").read_bytes()
    node0, node1 = NodeFolder(out, 0, 2).open(), NodeFolder(out, 1, 2).open()
    node1.set_ranks([1], 1)
    said = node1.failed("rank 1 on node 1 (h): train_step raised ValueError", 2, settle_s=0.0)
    node1.close()
    try:
        assert said.startswith("rank 1 on node 1 (h)")  # node 0 still runs, has not failed: no cause before it
        with pytest.raises(NodeFailure, match=r"^rank 1 on node 1 \(h\): train_step raised ValueError$"):
            node0.gather(deadline=float("inf"), cancelled=lambda: False)
        message = node0.failed("rank 0 on node 0 (h): Connection closed by peer", 4)
        assert message == "rank 1 on node 1 (h): train_step raised ValueError; then on node 0: rank 0 on node 0 (h): Connection closed by peer"
    finally:
        node0.close()
    assert (out / "run.json").read_bytes() == earlier and not (out / "rank-1").exists()


def test_a_node_whose_runner_is_gone_is_told_by_its_free_folder(tmp_path):
    out = tmp_path / "out"
    node0, node1 = NodeFolder(out, 0, 2).open(), NodeFolder(out, 1, 2).open()
    node1.set_ranks([2, 3], 2)
    # its runner SIGKILLed: the lock goes with its descriptor, node-1.json still says "running"
    assert node1._node_fd is not None
    os.close(node1._node_fd)
    node1._node_fd = None
    try:
        with pytest.raises(NodeFailure, match=r"^ranks 2, 3 on node 1 \(.+\) stopped: node 1's runner \(pid \d+\) ended without a word$") as found:
            node0.gather(deadline=float("inf"), cancelled=lambda: False)
        assert node0.failed(found.value.message, 4) == found.value.message  # said once, not again as its cause
    finally:
        node0.close()
        node1.close()


def test_node_0_waits_for_a_node_that_never_started_until_its_deadline_or_a_cancel(tmp_path):
    with NodeFolder(tmp_path / "out", 0, 2) as node0:
        with pytest.raises(NodeFailure, match=r"^node 1's ranks had not written their results when --timeout ran out \(it never started\)$"):
            node0.gather(deadline=0.0, cancelled=lambda: False)
        assert node0.gather(deadline=float("inf"), cancelled=lambda: True) is None


# ---------------------------------------------------------------- two nodes on this machine


#: DDP's local loss on every rank; on the node whose runner has HANG_ENV set, train_step sleeps
#: ("hang": the other node's rank waits in DDP's all-reduce) or raises ("raise"). Every rank first
#: starts a child carrying MARKER.
_MODEL = """
import os, subprocess, sys, time
import torch
from torch import nn

MARKER = {marker!r}
_ddp = {{}}


def build_model():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARKER])
    return nn.Linear(8, 8)


def example_inputs():
    return (torch.randn(4, 8),)


def train_step(model, inputs):
    ddp = _ddp.setdefault(id(model), nn.parallel.DistributedDataParallel(model))
    if os.environ.get({hang_env!r}) == "hang":
        time.sleep(600)
    if os.environ.get({hang_env!r}) == "raise":
        raise ValueError("node one fails")
    ddp(*inputs).sum().backward()
"""
_HANG_ENV = "BRANCHSCOPE_TEST_NODE_HANGS"


def _runner(req: RunRequest, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", RUNNER_MODULE, *req.argv(), "--jsonl"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})


def _model_nodes(tmp_path: Path, name: str) -> tuple[str, Path, Callable[[int], RunRequest]]:
    """`_MODEL` written as `name` with a fresh marker (its ranks' processes say it), OUT, and the
    request of node N of two meeting on a free loopback port."""
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    model = tmp_path / name
    model.write_text(_MODEL.format(marker=marker, hang_env=_HANG_ENV))
    out, endpoint = tmp_path / "out", f"127.0.0.1:{_free_port()}"

    def request(node: int) -> RunRequest:
        return _request(out, demo=None, model=model, node_rank=node, rdzv_endpoint=endpoint, timeout=300.0)

    return marker, out, request


def _last_event(stdout: bytes) -> dict:
    return json.loads(stdout.decode().strip().splitlines()[-1])



def _outputs(runners: list[subprocess.Popen[bytes]]) -> list[tuple[bytes, bytes]]:
    """Each node's runner's (stdout, stderr) once it ends; a runner still running past the guard is killed."""
    try:
        return [r.communicate(timeout=400) for r in runners]
    finally:
        for r in runners:
            if r.poll() is None:
                r.kill()
                r.wait()


@pytest.mark.slow
def test_two_nodes_on_loopback_write_one_run_of_both_ranks(tmp_path):
    out = tmp_path / "out"
    port = _free_port()
    runners = [_runner(_request(out, node_rank=node, nproc=1, rdzv_endpoint=f"127.0.0.1:{port}", timeout=300.0)) for node in (0, 1)]
    outputs = _outputs(runners)
    assert [r.returncode for r in runners] == [0, 0], [o[1].decode()[-2000:] for o in outputs]
    done0, done1 = (_last_event(o[0]) for o in outputs)
    assert done0["event"] == done1["event"] == "done"
    # node 1 says its own ranks, not complete: node 0 wrote the run
    assert [r["rank"] for r in done1["run"]["ranks"]] in ([0], [1]) and done1["run"]["complete"] is False
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True and run["nnodes"] == 2 and run["world_size"] == 2 and run["backend"] == "gloo"
    assert [r["rank"] for r in run["ranks"]] == [0, 1] and sorted(r["node"] for r in run["ranks"]) == [0, 1]
    assert run["ranks"] == done0["run"]["ranks"]
    for r in run["ranks"]:
        trace = json.loads(gzip.decompress((out / r["trace"]).read_bytes()))
        assert trace["distributedInfo"]["rank"] == r["rank"] and trace["distributedInfo"]["world_size"] == 2
        # each node sampled its rank (the rank profiled once its runner sampled it: RANK_SAMPLING)
        assert any(e.get("cat") == "cpu_sample" for e in trace["traceEvents"])
        node = json.loads((out / f"node-{r['node']}.json").read_text())
        assert node["status"] == "done" and node["ranks"] == [r["rank"]] and node["host"] == r["host"]
    assert {"node-0.json", "node-1.json", "rank-0/trace.json.gz", "rank-1/trace.json.gz"} <= set(run["files"])
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no node folder, no staging left
    assert not mentioning(str(out))


@pytest.mark.slow
def test_a_node_killed_mid_run_is_named_by_the_other_and_nothing_is_left(tmp_path):
    marker, out, request = _model_nodes(tmp_path, "ddp_hangs_on_one_node.py")
    node0 = _runner(request(0))
    node1 = _runner(request(1), env={_HANG_ENV: "hang"})
    try:
        # After the rendezvous: both ranks built their models, and node 1's rank is in its warm-up (where it hangs).
        wait_until(lambda: len(mentioning(marker)) == 2, 240, "both ranks' child processes")
        stage1 = out / NODE_DIR.format(node=1) / "stage"

        def node1_rank_warming_up() -> list[int]:
            """[its global rank] (the rendezvous, not --node-rank, orders the nodes: 0 or 1)."""
            for p in stage1.glob(".rank-*.events"):
                if b'"phase":"warmup"' in p.read_bytes().replace(b" ", b""):
                    return [int(re.findall(r"\d+", p.name)[0])]
            return []

        [rank1] = wait_until(node1_rank_warming_up, 240, "node 1's rank warming up")  # type: ignore[misc]
        node1.kill()  # no cleanup of its own: its ranks die with it; node 0 must notice and say so
        node1.wait(timeout=60)
        stdout, stderr = node0.communicate(timeout=300)
    finally:
        for r in (node0, node1):
            if r.poll() is None:
                r.kill()
                r.wait()
    assert node0.returncode in (2, 4), stderr.decode()[-2000:]
    error = _last_event(stdout)
    assert error["event"] == "error"
    assert error["message"].startswith(f"rank {rank1} on node 1 (")
    assert f"stopped: node 1's runner (pid {node1.pid}) ended without a word; then on node 0: rank {1 - rank1} on node 0 (" in error["message"]
    wait_until(lambda: not mentioning(marker) and not mentioning(str(out)), 60, "no process of either node")
    assert not (out / "run.json").exists() and not (out / "rank-0").exists()


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["profile", "--mode", "sequential", "--interop", "1", "--intra", "1", "--nnodes", "2"], "error: --nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node"),
        (["sweep", "--modes", "sequential", "--interop", "1", "--intra", "1", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29511"], "error: a sweep runs on one machine: --nnodes is for `branchscope profile`"),
        (["speedup", "--configs", "sequential:1x1,fork:2x1", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29511"],
         "error: speedup measures one process: --nnodes is not taken here"),
    ],
)  # fmt: skip
def test_only_profile_runs_several_nodes_and_a_bad_line_is_one_error_and_exit_2(tmp_path, capsys, command, says):
    from branchscope.app import cli

    out = tmp_path / "out"
    assert cli.main([command[0], "--demo", "twin-mm", *command[1:], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1
    assert not out.exists()


def test_the_summary_says_each_ranks_node_and_a_part_says_node_0_writes_the_run(tmp_path):
    from branchscope.profiling.run.runner import format_summary

    ranks = [{"rank": 0, "pid": 10, "device": "cpu", "node": 1, "host": "b"}, {"rank": 1, "pid": 11, "device": "cpu", "node": 0, "host": "a"}]
    run = RunRecord.parse({"model": "demo x", "mode": "sequential", "backend": "gloo", "nnodes": 2, "complete": True, "ranks": ranks})
    lines = format_summary(run, tmp_path).splitlines()
    assert "2 ranks (gloo) on 2 nodes on " in lines[0]
    assert lines[2].startswith("  rank 0 (pid 10, cpu, node 1 on b): ") and lines[3].startswith("  rank 1 (pid 11, cpu, node 0 on a): ")
    assert lines[-1].startswith(f"wrote {tmp_path / 'run.json'} and, per rank")
    part = RunRecord.parse({"model": "demo x", "mode": "sequential", "backend": "gloo", "nnodes": 2, "complete": False, "ranks": ranks[:1]})
    lines = format_summary(part, tmp_path).splitlines()
    assert "1 ranks (gloo) on node 1 of 2 on " in lines[0]
    assert lines[-1] == f"left these ranks' files in {tmp_path} for node 0, which writes {tmp_path / 'run.json'} once every node's ranks are in"


def test_an_earlier_runs_node_json_is_not_taken_for_this_runs(tmp_path):
    out = tmp_path / "out"
    earlier = NodeFolder(out, 1, 2).open()
    earlier.set_ranks([1], 1)
    earlier.failed("rank 1 on node 1 (h): an earlier run's failure", 2, settle_s=0.0)
    earlier.close()
    stale = out / NODE_DIR.format(node=1) / "node-1.json"
    os.utime(stale, (stale.stat().st_mtime - 60, stale.stat().st_mtime - 60))  # written a minute before this run
    with NodeFolder(out, 0, 2) as node0:
        assert node0.peer(1).record is None
        with pytest.raises(NodeFailure, match=r"\(it never started\)$"):
            node0.gather(deadline=0.0, cancelled=lambda: False)
        assert node0.failed("rank 0 on node 0 (h): rendezvous timed out", 4, settle_s=0.0) == "rank 0 on node 0 (h): rendezvous timed out"


@pytest.mark.slow
def test_a_node_alone_stops_at_its_timeout_saying_the_nodes_never_met(tmp_path):
    out = tmp_path / "out"
    port = _free_port()
    result = run_profile(_request(out, nproc=1, rdzv_endpoint=f"127.0.0.1:{port}", timeout=15.0))
    assert result.exit_code == 4
    assert result.message == (
        f"the run ran past --timeout 15 s and was stopped; the rendezvous at 127.0.0.1:{port} had not brought "
        "the 2 nodes together (node 0's ranks never started)"
    )
    # Only its node folder's node-0.json stays, saying why, for the other nodes to read (the next run removes it).
    assert [str(p.relative_to(out)) for p in sorted(out.rglob("*"))] == [NODE_DIR.format(node=0), f"{NODE_DIR.format(node=0)}/node-0.json"]
    said = json.loads((out / NODE_DIR.format(node=0) / "node-0.json").read_text())
    assert (said["status"], said["message"], said["exit_code"]) == ("failed", result.message, 4)
    assert not mentioning(str(out))


@pytest.mark.slow
def test_a_rank_that_raises_on_node_1_is_named_with_its_node_by_both_nodes(tmp_path):
    marker, out, request = _model_nodes(tmp_path, "ddp_raises_on_one_node.py")
    runners = [_runner(request(0)), _runner(request(1), env={_HANG_ENV: "raise"})]
    outputs = _outputs(runners)
    errors = [_last_event(o[0]) for o in outputs]
    assert [r.returncode for r in runners][1] == 2 and runners[0].returncode in (2, 4)
    said = errors[1]["message"]
    assert re.fullmatch(r"rank [01] on node 1 \(.+\): train_step raised ValueError while running a step: node one fails", said)
    assert errors[0]["message"].startswith(said + "; then on node 0: rank ")  # node 1's failure first, then node 0's own
    wait_until(lambda: not mentioning(marker) and not mentioning(str(out)), 60, "no process of either node")
    assert not (out / "run.json").exists()


def test_a_failure_that_came_after_this_nodes_is_not_named_as_its_cause(tmp_path):
    out = tmp_path / "out"
    node0, node1 = NodeFolder(out, 0, 2).open(), NodeFolder(out, 1, 2).open()
    # node 0's rank raised at 100 s; node 1's saw its peer vanish at 100.2 s (their first failures, wall clock)
    node1.failed("rank 1 on node 1 (h): Connection closed by peer", 4, settle_s=0.0, failed_at=100.2)
    node1.close()
    try:
        assert node0.failed("rank 0 on node 0 (h): ValueError", 2, failed_at=100.0) == "rank 0 on node 0 (h): ValueError"
    finally:
        node0.close()


@pytest.mark.parametrize("answer", ["[" * 100 + "]" * 100, "not json", "[1, 2]"], ids=["nested", "not-json", "a-list"])
def test_a_node_whose_answer_is_malformed_is_named_at_once_with_exit_4(tmp_path, answer):
    out = tmp_path / "out"
    node0, node1 = NodeFolder(out, 0, 2).open(), NodeFolder(out, 1, 2).open()
    try:
        (out / NODE_DIR.format(node=1) / "node-1.json").write_text(answer)  # node 1's runner still holds its folder
        with pytest.raises(NodeFailure, match=r"^node 1's answer is malformed \(.*node-1\.json: ") as err:
            node0.gather(deadline=float("inf"), cancelled=lambda: False)  # before: waited for --timeout
        assert err.value.exit_code == 4
    finally:
        node1.close()
        node0.close()
