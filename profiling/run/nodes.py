"""A multi-node run's share of OUT (`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`).

Every node's runner writes into the same OUT, a folder the nodes share (NFS, a cluster file system;
on one machine, any folder). The promises of `run/folder.py` hold for the whole run:

- Each node holds a *shared* lock on OUT (flock on the folder) for as long as it runs, so the nodes
  of one run write there together while a run on one machine (which takes it exclusively) is
  refused, and the other way round; and an exclusive lock on its own node folder,
  OUT/.branchscope-staging-node-R/ (hidden, ours: a run on one machine removes it as it removes any
  staging folder), so two runners cannot both be node R.
- Node R stages its ranks' files in its node folder (stage/rank-K/, K its global ranks) and says
  how it stands in node-R.json there (`records.NodeRecord`, written atomically): "running" from the
  start (its ranks once the rendezvous gave them), then "done" once every rank's files are complete,
  or "failed" with the failure in words. A node other than 0 ends there, leaving its part in its
  node folder.
- Node 0, once its own ranks are complete, waits (bounded by --timeout) for every other node's part,
  takes each (its ranks' folders and its node-R.json) into its own staging folder, and commits the
  whole run as `RunFolder.commit` does: files first, run.json (listing every rank, with its node and
  host) last. So OUT holds either the earlier run or this complete one, never a part; a node that
  fails leaves the earlier results as they were.
- A node whose runner died without a word is told by its node folder's lock, free while its
  node-R.json still says "running". A node that fails waits a little for the others to say how they
  ended, and names the first failure with its node: "rank 3 on node 1 (host): …".

No torch and no Qt here.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from branchscope.profiling.files import read_json_object
from branchscope.profiling.run.folder import (
    STAGING_PREFIX,
    RunFolder,
    RunFolderError,
    describe_os_error,
    names_text,
    real_dir,
    remove_if_empty,
)
from branchscope.profiling.trace.records import (
    NODE_JSON,
    RANK_DIR,
    NodeRecord,
    RunRecord,
    encode_record,
    lenient,
    read_run_record,
)

#: Node R's folder in OUT while the run goes on (a staging folder: hidden, ours).
NODE_DIR = STAGING_PREFIX + "node-{node}"
#: Where node R stages its ranks' files, in its node folder.
NODE_STAGE = "stage"
#: Once a node failed, how long it waits for the others to say how they ended (their runners stop
#: their ranks within seconds of a peer's death: the collectives fail).
PEER_SETTLE_S = 20.0
_POLL_S = 0.1


class NodeFailure(Exception):
    """Another node failed, died or never finished: the run cannot complete (`message`: one line)."""

    def __init__(self, message: str, exit_code: int = 4) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def ranks_text(ranks: list[int], node: int, host: str | None) -> str:
    """'rank 3 on node 1 (host)', 'ranks 2, 3 on node 1 (host)', or "node 1 (host)'s ranks"."""
    where = f"node {node}" + (f" ({host})" if host else "")
    if not ranks:
        return f"{where}'s ranks"
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} on {where}"


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


@dataclass
class Peer:
    """What another node's folder says now: its node-R.json (None: none yet), and whether its
    runner still holds the folder (False also when there is no folder)."""

    node: int
    record: NodeRecord | None
    held: bool
    #: Its node-R.json is there, of this run, but no record: why (not JSON, too deep, not an object…).
    malformed: str | None = None

    @property
    def gone(self) -> bool:
        """Its runner ended without saying how: node-R.json still says "running" and nobody holds its folder."""
        return self.record is not None and self.record.status == "running" and not self.held

    @property
    def settled(self) -> bool:
        """It will say nothing more: done, failed, gone, or never started (no node-R.json)."""
        return self.record is None or self.record.status in ("done", "failed") or self.gone

    def failure(self) -> str | None:
        """Its failure in words, or None (done, running, never started)."""
        rec = self.record
        if self.malformed is not None:
            return f"node {self.node}'s answer is malformed ({self.malformed})"
        if rec is None:
            return None
        if rec.status == "failed":
            return rec.message or f"{ranks_text(rec.ranks, self.node, rec.host)} failed"
        if self.gone:
            return (
                f"{ranks_text(rec.ranks, self.node, rec.host)} stopped: node {self.node}'s runner (pid {rec.pid}) "
                "ended without a word"
            )
        return None


class NodeFolder(RunFolder):
    """OUT for node `node` of a multi-node run: `open()` takes OUT's shared lock and the node's own
    folder, `staging` receives its ranks' files; then `done()` (a node other than 0), or `gather()`
    and `commit()` (node 0), or `failed()`; `close()` lets go (see the module docstring)."""

    shared = True

    def __init__(self, out: Path, node: int, nnodes: int, *, overwrite: bool = False, endpoint: str | None = None) -> None:
        super().__init__(out, overwrite=overwrite)
        self.node, self.nnodes = node, nnodes
        self.host = socket.gethostname()
        self.record = NodeRecord(node=node, nnodes=nnodes, host=self.host, pid=os.getpid(), endpoint=endpoint)
        self._node_fd: int | None = None
        #: When this node's node-R.json was first written, on OUT's own clock (its mtime).
        self._opened: float = 0.0

    def node_dir(self, node: int | None = None) -> Path:
        return self.out / NODE_DIR.format(node=self.node if node is None else node)

    def _prepare(self) -> None:
        self._check_foreign()
        self._take_node_dir()

    def _take_node_dir(self) -> None:
        path = self.node_dir()
        try:
            path.mkdir(exist_ok=True)
            if not real_dir(path):
                raise RunFolderError(f"--out {self.out}: {path.name} is in the way and is not a folder")
            fd = _open_dir(path)
            # Another node may be probing the folder this instant (`peer`): a few tries over a second.
            for _ in range(10):
                if _try_lock(fd):
                    break
                time.sleep(_POLL_S)
            else:
                os.close(fd)
                raise RunFolderError(f"another branchscope runner is node {self.node} of a run writing to {self.out}")
            self._node_fd = fd
            _clear_node_dir(path, self.node)  # an earlier run's part of this node: its runner is gone
            self.staging = path / NODE_STAGE
            self.staging.mkdir()
            self._write_status()
            self._opened = os.stat(path / NODE_JSON.format(node=self.node)).st_mtime
        except OSError as exc:
            raise RunFolderError(f"cannot write to --out {self.out}: {describe_os_error(exc)}") from None

    def _write_status(self, **changes: object) -> None:
        self.record = msgspec.structs.replace(self.record, **changes)
        path = self.node_dir() / NODE_JSON.format(node=self.node)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(encode_record(self.record))
        os.replace(tmp, path)

    def set_ranks(self, ranks: list[int], nproc: int) -> None:
        """The global ranks the rendezvous gave this node."""
        self._write_status(ranks=list(ranks), nproc=nproc)

    def done(self, ranks: list[int]) -> None:
        """This node's ranks are complete in its staging folder (a node other than 0: node 0 takes them)."""
        self._write_status(ranks=list(ranks), status="done")

    def failed(self, message: str, exit_code: int, settle_s: float = PEER_SETTLE_S, failed_at: float | None = None) -> str:
        """Says that this node failed (`failed_at`: when its first rank failed, wall clock; None: now),
        waits (at most `settle_s`) for the other nodes to say how they ended, and returns the run's
        failure in words: another node's failure first where it came before this one's (or its
        runner is gone), then this node's."""
        now = time.time() if failed_at is None else failed_at
        self._write_status(status="failed", message=message, exit_code=exit_code, failed_at=now)
        end = time.monotonic() + settle_s
        peers = self.peers()
        while not all(p.settled for p in peers) and time.monotonic() < end:
            time.sleep(_POLL_S)
            peers = self.peers()
        first = [
            (p.record.failed_at if p.record and p.record.failed_at is not None else float("-inf"), p.node, text)
            for p in peers
            if (text := p.failure()) is not None
            and text not in message  # node 0 that found it while gathering has said it already
            and (p.gone or (p.record and (p.record.failed_at or now) <= now))
        ]
        if not first:
            return message
        causes = "; ".join(text for *_, text in sorted(first))
        return f"{causes}; then on node {self.node}: {message}"

    def peer(self, node: int) -> Peer:
        """What node `node`'s folder says now. A node-R.json older than this node's own, whose
        runner has let go, is an earlier run's (a runner that ended before this one started): as
        if none were there. (Both times are OUT's, so the nodes' clocks need not agree.)"""
        path = self.node_dir(node)
        json_path = path / NODE_JSON.format(node=node)
        try:
            written = os.lstat(json_path).st_mtime
        except OSError:
            return Peer(node, None, False)  # none yet
        malformed = None
        try:
            record: NodeRecord | None = lenient(NodeRecord, read_json_object(json_path, follow_symlinks=False))
        except (OSError, ValueError) as exc:  # not a regular file, too large, not JSON, too deep: said, not waited on
            record, malformed = None, str(exc)
        try:
            fd = _open_dir(path)
        except OSError:
            return Peer(node, record, False, malformed)
        try:
            held = not _try_lock(fd)
        finally:
            os.close(fd)  # releases the lock if it was taken
        if not held and written < self._opened:
            return Peer(node, None, False)
        return Peer(node, record, held, malformed)

    def peers(self) -> list[Peer]:
        return [self.peer(k) for k in range(self.nnodes) if k != self.node]

    def gather(self, deadline: float, cancelled: Callable[[], bool]) -> list[tuple[NodeRecord, list[tuple[int, RunRecord]]]] | None:
        """Node 0: waits (until `deadline`, monotonic) for every other node's part and takes it into
        the staging folder; returns each node's record and its ranks' run.json, or None once
        `cancelled()`. Raises NodeFailure when a node failed, died or did not finish in time."""
        parts = []
        for k in range(self.nnodes):
            if k == self.node:
                continue
            while True:
                peer = self.peer(k)
                if peer.record is not None and peer.record.status == "done" and not peer.held:
                    break
                text = peer.failure()
                if text is not None:
                    raise NodeFailure(text, (peer.record.exit_code or 4) if peer.record else 4)
                if cancelled():
                    return None
                if time.monotonic() >= deadline:
                    raise NodeFailure(
                        f"node {k}'s ranks had not written their results when --timeout ran out "
                        f"({'it never started' if peer.record is None else 'it is still running'})"
                    )
                time.sleep(_POLL_S)
            assert peer.record is not None
            parts.append((peer.record, self._take(k, peer.record)))
        return parts

    def _take(self, node: int, record: NodeRecord) -> list[tuple[int, RunRecord]]:
        """Moves node `node`'s ranks' folders (only those its record lists, of the shapes we write)
        into the staging folder, with its node-R.json; then removes its node folder."""
        assert self.staging is not None
        path = self.node_dir(node)
        fd = _open_dir(path)
        try:
            if not _try_lock(fd):
                raise NodeFailure(f"node {node}'s folder is held again by another runner ({path})")
            runs = []
            for rank in record.ranks:
                name = f"rank-{rank}"
                src = path / NODE_STAGE / name
                run = read_run_record(src, follow_symlinks=False) if RANK_DIR.fullmatch(name) and real_dir(src) else None
                if run is None or not run.complete:
                    raise NodeFailure(f"{ranks_text([rank], node, record.host)} said it was done, but its files are not complete")
                os.replace(src, self.staging / name)
                runs.append((rank, run))
            (self.staging / NODE_JSON.format(node=node)).write_bytes(encode_record(record))
            _clear_node_dir(path, node)
            remove_if_empty(path)
        finally:
            os.close(fd)
        return runs

    def commit(self, run: RunRecord) -> RunRecord:
        """Node 0: the whole run into OUT (its own node-0.json with it), then its node folder goes."""
        assert self.staging is not None
        self.record = msgspec.structs.replace(self.record, status="done")
        (self.staging / NODE_JSON.format(node=self.node)).write_bytes(encode_record(self.record))
        committed = super().commit(run)
        return committed

    def close(self) -> None:
        """A node other than 0 that is done leaves its part; otherwise the staged files go (a node that
        ends without having said how says it failed, so that node 0 need not wait); node 0 that
        committed removes its node folder. Then the locks go."""
        path = self.node_dir()
        if self._node_fd is not None:
            status = self.record.status
            try:
                if status == "running":
                    self._write_status(status="failed", message=f"node {self.node} ended without results", failed_at=time.time())
                if status != "done" or self.node == 0:
                    if self.staging is not None:
                        shutil.rmtree(self.staging, ignore_errors=True)
                if status == "done" and self.node == 0:
                    _clear_node_dir(path, self.node)
                    remove_if_empty(path)
            except OSError:
                pass
            self.staging = None
            os.close(self._node_fd)
            self._node_fd = None
        super().close()


def _clear_node_dir(path: Path, node: int) -> None:
    """Removes what a node writes in its folder (`NODE_DIR`): its node-R.json (and the .tmp it is
    written through), files themselves, never links, and its staging folder (`NODE_STAGE`, the
    workers' output); anything else stays, said once on stderr."""
    ours = {NODE_JSON.format(node=node), f".{NODE_JSON.format(node=node)}.tmp"}
    left = []
    for entry in sorted(os.listdir(path)):
        p = path / entry
        st = os.lstat(p)
        if entry == NODE_STAGE and real_dir(p):
            shutil.rmtree(p, ignore_errors=True)  # made by this node's runner; rmtree never follows a link
        elif entry in ours and stat.S_ISREG(st.st_mode):
            p.unlink(missing_ok=True)
        else:
            left.append(entry)
    if left:
        print(f"branchscope: kept {path}: it holds files branchscope did not write ({names_text(left)})", file=sys.stderr)


__all__ = ["NODE_DIR", "NodeFailure", "NodeFolder", "Peer", "ranks_text"]
