"""Distributed runs (`--nproc N`, N > 1; `--nnodes N`): the runner starts torch.distributed.run
(branchscope.profiling.run.launch), which starts the ranks; `Distributed` says to the supervisor
(branchscope.profiling.run.supervise) what differs from one worker: each rank's events come through
its own file in the staging folder (one file per rank: lines never interleave), each rank's worker
is watched by the process the launcher started, which reports its exit status or signal, and OUT
gets rank-R/ per rank and a run.json listing the ranks.

Multi-node runs: this node's global ranks are learnt from its ranks' event files (the c10d
rendezvous, not --node-rank, orders the nodes); OUT is shared by the nodes
(branchscope.profiling.run.nodes), and a failure names its rank and node.

No torch here.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from branchscope.profiling.run.commit import commit_nodes, commit_run, ranks_record
from branchscope.profiling.run.folder import RunFolder
from branchscope.profiling.run.launch import launcher_command, stays_on_loopback, worker_env
from branchscope.profiling.run.machine_load import LoadMeter
from branchscope.profiling.run.nodes import NodeFolder
from branchscope.profiling.run.outcome import RunResult, describe_exit
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import (
    EVENTS_DIR_ENV,
    RANK_EVENTS,
    RANK_FOLDER,
    RANK_SAMPLING,
    RunRequest,
)
from branchscope.profiling.run.supervise import OneWorker, Rank
from branchscope.profiling.trace.events import Event, decode_events
from branchscope.profiling.trace.records import MAX_ANSWER_BYTES, RunRecord

#: A rank's events file in the staging folder (RANK_EVENTS), its global rank captured.
_RANK_EVENTS_NAME = re.compile(re.escape(RANK_EVENTS).replace(r"\{rank\}", "(0|[1-9][0-9]{0,5})"))


#: The most of a rank's events file read at once.
_EVENTS_READ = 4 << 20


class _EventFile:
    """The JSON-line events a rank appends to its own file (see the worker), read as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._buf = b""

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read(_EVENTS_READ)  # the rest on the next read: a rank may write gigabytes
        except OSError:
            return []
        self._offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        if len(self._buf) > MAX_ANSWER_BYTES:
            self._buf = b""  # no event is that long: dropped, like a line past the bound
        return decode_events(lines)


class Distributed(OneWorker):
    """`--nproc N`: the runner starts torch.distributed.run, which starts the N ranks; each rank's
    events come through its own file (a file cannot be waited on: `read` sleeps), the rank's own
    hello, the process watching its worker saying how it exited, its reaper when it was gone; OUT
    gets rank-R/ per rank and a run.json listing them."""

    stdout = None
    #: A multi-node run's: this node's share of OUT, and the run's cancel flag (node 0 waits for the others).
    nodes: NodeFolder | None = None
    cancel: CancelFlag | None = None

    def __init__(self, req: RunRequest, stage: Path) -> None:
        super().__init__(req, stage)
        self.nnodes, self.node = req.options.nnodes, req.options.node_rank
        self.host = socket.gethostname() if self.nnodes > 1 else None
        #: This node's first global rank: 0 on one machine; on several, known once its first rank's
        #: events file appears (the c10d rendezvous, not --node-rank, orders the nodes).
        self.first: int | None = 0 if self.nnodes == 1 else None
        self.deadline = time.monotonic() + req.options.timeout
        self.files: list[_EventFile] = []
        self._ranks: list[Rank] = []

    def command(self) -> list[str]:
        return launcher_command(self.req, self.stage.resolve())

    def env(self, token: str) -> dict[str, str]:
        env = worker_env(self.req, token)
        env[EVENTS_DIR_ENV] = str(self.stage.resolve())
        if stays_on_loopback(self.req.options):
            env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's connections stay on loopback too
        env.setdefault("TORCHELASTIC_ENABLE_FILE_TIMER", "0")
        return env

    def bind(self, ranks: list[Rank]) -> None:
        self._ranks = ranks

    def sampling(self, rank: Rank) -> None:
        """Tell the rank, which waits for it before its profiled steps (`RANK_SAMPLING`)."""
        try:
            (self.stage / RANK_SAMPLING.format(rank=rank.rank)).touch()
        except OSError:
            pass  # the rank goes on after its wait; only its samples may be fewer

    def started(self, proc: subprocess.Popen[bytes]) -> list[list[Event]]:
        self._number()
        return []

    def _number(self) -> None:
        """Once this node's first global rank is known: the ranks numbered, their events files."""
        if self.first is None:
            try:
                found = [int(m.group(1)) for name in os.listdir(self.stage) if (m := _RANK_EVENTS_NAME.fullmatch(name))]
            except OSError:
                found = []
            if not found:
                return
            self.first = min(found) - min(found) % self.nproc
            if self.nodes is not None:
                self.nodes.set_ranks(list(range(self.first, self.first + self.nproc)), self.nproc)
        if not self.files:
            for i, rank in enumerate(self._ranks):
                rank.rank = self.first + i
            self.files = [_EventFile(self.stage / RANK_EVENTS.format(rank=self.first + i)) for i in range(self.nproc)]

    def read(self, timeout: float) -> list[list[Event]]:
        if timeout > 0:
            time.sleep(timeout)
        return self.drain()

    def drain(self) -> list[list[Event]]:
        self._number()
        return [f.read() for f in self.files]

    def close(self) -> None:
        pass

    def ended(self, proc: subprocess.Popen[bytes], t: float) -> list[list[Event]]:
        return []  # the process that ended is the launcher: the ranks said how they ended

    def folder(self, rank: int) -> Path:
        return self.stage / RANK_FOLDER.format(rank=rank)

    def _on_node(self) -> str:
        """' on node 1 (host)' in a multi-node run, else nothing."""
        return f" on node {self.node} ({self.host})" if self.nnodes > 1 else ""

    def _rank_word(self, rank: Rank) -> str:
        return f"rank {rank.rank}" if self.first is not None else f"local rank {rank.rank}"

    def name(self, rank: Rank, *, pid: bool = False) -> str:
        return self._rank_word(rank) + self._on_node() + (f" (pid {rank.pid})" if pid and rank.pid else "")

    def error_message(self, rank: Rank, message: str) -> str:
        return f"{self.name(rank)}: {message}"

    def timed_out(self, ranks: list[Rank]) -> str:
        waiting = [r for r in ranks if not r.finished]
        if self.first is None:  # no rank of this node started: the nodes never all met
            return (
                f"the run ran past --timeout {self.req.options.timeout:g} s and was stopped; the rendezvous at "
                f"{self.req.options.rdzv_endpoint} had not brought the {self.nnodes} nodes together "
                f"(node {self.node}'s ranks never started)"
            )
        return (
            f"the run ran past --timeout {self.req.options.timeout:g} s and was stopped; rank(s) "
            f"{', '.join(str(r.rank) for r in waiting)}{self._on_node()} had not finished ("
            + ", ".join(f"{self._rank_word(r)}: {r.phase or 'starting'}" for r in waiting)
            + ")"
        )

    def ended_early(self, proc: subprocess.Popen[bytes], ranks: list[Rank], runs: list[RunRecord | None]) -> str:
        missing = [str(r.rank) for r, run in zip(ranks, runs, strict=True) if run is None]
        which = "rank(s)" if self.first is not None else "local rank(s)"
        return (
            f"torch.distributed.run ended ({describe_exit(proc.returncode)}) before {which} {', '.join(missing)}"
            f"{self._on_node()} wrote their results"
        )

    def trace_failed(self, rank: Rank, exc: ValueError) -> str:
        return f"could not write {self.name(rank)}'s trace: {exc}"

    def record(self, ranks: list[Rank], runs: list[RunRecord]) -> RunRecord:
        """The top-level run.json of this node's ranks (see `ranks_record`); the ranks' event files are dropped."""
        for name in os.listdir(self.stage):
            if name.startswith(".rank-"):
                (self.stage / name).unlink()
        return ranks_record(self.nproc, [(r.rank, run, self.node if self.nnodes > 1 else None, self.host) for r, run in zip(ranks, runs, strict=True)])

    def commit(
        self, folder: RunFolder, ranks: list[Rank], results: list[Any], load: LoadMeter | None = None
    ) -> RunResult:
        """On one machine, `commit_run`; a node of several, `commit_nodes` (node 0 commits the run)."""
        if self.nodes is None:
            return commit_run(folder, self, ranks, results, load)
        return commit_nodes(folder, self, self.nodes, ranks, results, load)
