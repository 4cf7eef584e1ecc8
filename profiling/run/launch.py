"""What a run starts: the worker's command line and environment, and a distributed run's launcher
(`python -m torch.distributed.run`, made to die with the runner by branchscope.profiling.run.processes,
which execs it), on one machine or meeting other nodes in a c10d rendezvous.

`--python PATH`: the worker, the launcher and its ranks run under that interpreter, through
`interpreter.BOOTSTRAP` (branchscope is not installed there). No torch here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from branchscope.profiling.run.interpreter import locate as locate_interpreter
from branchscope.profiling.run.interpreter import worker_command as interpreter_worker_command
from branchscope.profiling.run.options import RunOptions, is_loopback, parse_endpoint
from branchscope.profiling.run.processes import PROCESSES_MODULE
from branchscope.profiling.run.protocol import (
    RUN_TOKEN_ENV,
    RUNNER_PID_ENV,
    WORKER_MODULE,
    RunRequest,
    python_command,
)


def worker_command(req: RunRequest, out: Path) -> list[str]:
    """The worker's command line; it writes into `out` (the run folder's staging folder). Under
    --python's interpreter, through `interpreter.BOOTSTRAP` (branchscope is not installed there)."""
    argv = replace(req, out=out).argv(worker=True)
    if req.options.python is not None:
        return interpreter_worker_command(locate_interpreter(req.options.python), argv)
    return python_command(WORKER_MODULE) + argv


def worker_python(req: RunRequest) -> str:
    """The Python the worker (and a distributed run's launcher) runs under."""
    return str(locate_interpreter(req.options.python)) if req.options.python is not None else sys.executable


def worker_env(req: RunRequest, token: str) -> dict[str, str]:
    env = dict(os.environ)
    # OpenMP/MKL size their pools from these at start-up; numpy's BLAS pool is not torch's and would
    # only add idle threads to the samples.
    env["OMP_NUM_THREADS"] = str(req.intra)
    env["MKL_NUM_THREADS"] = str(req.intra)
    env["OPENBLAS_NUM_THREADS"] = "1"
    env[RUNNER_PID_ENV] = str(os.getpid())
    env[RUN_TOKEN_ENV] = token  # inherited by whatever the model starts (see branchscope.profiling.run.processes)
    return env


def launcher_command(req: RunRequest, out: Path) -> list[str]:
    """torch.distributed.run starting N workers on this machine, rendezvous on loopback only, never
    restarted; made to die with this process (see branchscope.profiling.run.processes.exec_as_child).
    The shim runs under branchscope's Python; the launcher and its workers under the worker's (--python)."""
    opts = req.options
    if opts.nnodes > 1:
        rendezvous = _rendezvous_args(opts)
    else:
        rendezvous = ["--standalone", "--local-addr", "127.0.0.1"]
    launcher = python_command("torch.distributed.run", worker_python(req)) + [
        "--nproc-per-node", str(opts.nproc), *rendezvous, "--max-restarts", "0", "--no-python", "--",
    ]  # fmt: skip
    return python_command(PROCESSES_MODULE) + [str(os.getpid()), "--"] + launcher + worker_command(req, out)


def _rendezvous_args(opts: RunOptions) -> list[str]:
    """A multi-node run's launcher options: torch.distributed.run's c10d rendezvous at
    --rdzv-endpoint, --nnodes nodes. On a loopback endpoint (every node on this machine) node 0
    hosts the rendezvous store and the nodes talk over 127.0.0.1 only; elsewhere torch decides
    (the store on the endpoint's host) and the nodes find each other on their own addresses."""
    assert opts.rdzv_endpoint is not None
    # No --node-rank: c10d ignores it (the rendezvous orders the nodes); it names this node's part of OUT.
    args = ["--nnodes", str(opts.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", opts.rdzv_endpoint]
    if stays_on_loopback(opts):
        args += ["--rdzv-conf", f"is_host={'true' if opts.node_rank == 0 else 'false'}", "--local-addr", "127.0.0.1"]
    return args


def stays_on_loopback(opts: RunOptions) -> bool:
    """A run whose ranks stay on this machine: one node, or every node meeting at a loopback address."""
    if opts.nnodes == 1:
        return True
    endpoint = parse_endpoint(opts.rdzv_endpoint or "")
    return endpoint is not None and is_loopback(endpoint[0])

