"""What the runner, the worker, the CLI and the window share about a run, in one place.

- the exit codes (the modes are a registry of their own: `branchscope.profiling.run.modes`);
- the labels a run writes into its trace (`branch: NAME`, `step N`, the `cpu_sample` counters),
  defined on the trace side (`branchscope.profiling.trace.run_info`, which reads them) and
  re-exported here for the writers;
- the environment variables that tie a run's processes together;
- the run request (a mode and threads, and the `RunOptions` every run of a model shares), its
  command-line options (`add_run_arguments`, read back by `request_from_args`) and its one argv
  writer (`RunRequest.argv`), used for the runner (by the window) and the worker (by the runner) alike;
- `python_command`, how branchscope starts its own Python processes (isolated; a worker under
  `--python`'s interpreter starts through `interpreter.worker_command` instead).

JSON lines between the processes (docs/formats.md, "The JSON-line events"): the worker tells the runner
`{"event": "phase" | "progress" | "error" | "finished", ...}`; the runner (with --jsonl) tells the window
`{"event": "phase" | "progress" | "error" | "done", ...}`.

No torch, no Qt: every process imports this.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from branchscope.profiling.run.modes import MODE_NAMES, MODES
from branchscope.profiling.run.options import RunOptions, add_options, positive_seconds
from branchscope.profiling.trace.records import RANK_FOLDER
from branchscope.profiling.trace.run_info import (
    BRANCH_PREFIX,
    CPU_SAMPLE_CATEGORY,
    branch_label,
    cpu_sample_name,
    step_label,
)

__all__ = [
    "BRANCH_PREFIX",
    "CPU_SAMPLE_CATEGORY",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_MODE",
    "EXIT_OK",
    "EVENTS_DIR_ENV",
    "EXIT_WORKER",
    "MODE_NAMES",
    "PARENT_PID_ENV",
    "RANK_EVENTS",
    "RANK_SAMPLING",
    "RANK_SAMPLING_WAIT_S",
    "RANK_FOLDER",
    "RUNNER_PID_ENV",
    "RUN_TOKEN_ENV",
    "RunOptions",
    "RunFailure",
    "RunRequest",
    "add_run_arguments",
    "branch_label",
    "cpu_sample_name",
    "positive_seconds",
    "python_command",
    "request_from_args",
    "step_label",
]

#: Exit codes of `branchscope profile` and the runner: 0 ok, 2 bad arguments or model (the model
#: raised), 3 the mode cannot run here (no branches, no CUDA), 4 the worker died or timed out.
#: The worker exits 0, 2, 3, or 1 (EXIT_FAILED) for anything else, which the runner reports as 4.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_MODE, EXIT_WORKER = 0, 1, 2, 3, 4


class RunFailure(Exception):
    """Why a worker's run ended, as it tells the runner: its exit code (above), one line, and the
    model's traceback where the model's code raised."""

    def __init__(self, exit_code: int, message: str, tb: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.tb = tb

#: The worker checks its parent is still the runner right after asking to die with it.
RUNNER_PID_ENV = "BRANCHSCOPE_RUNNER_PID"
#: The runner started by the window checks its parent is still the window, likewise.
PARENT_PID_ENV = "BRANCHSCOPE_PARENT_PID"
#: Inherited by every process a run starts, so that none escapes (see branchscope.profiling.run.processes).
RUN_TOKEN_ENV = "BRANCHSCOPE_RUN_TOKEN"

#: Set by the runner for the ranks of a distributed run: the folder each rank appends its JSON-line
#: events to (RANK_EVENTS.format(rank=R)), one file per rank so that lines never interleave.
EVENTS_DIR_ENV = "BRANCHSCOPE_EVENTS_DIR"
RANK_EVENTS = ".rank-{rank}.events"
#: Made by the runner in the same folder once it samples rank R's threads: the rank profiles only
#: then (its events reach the runner through a file, late on a busy machine: a short profile could
#: be over before the runner began sampling it). The rank goes on anyway after `RANK_SAMPLING_WAIT_S`.
RANK_SAMPLING = ".rank-{rank}.sampling"
RANK_SAMPLING_WAIT_S = 30.0

RUNNER_MODULE = "branchscope.profiling.run.runner"
WORKER_MODULE = "branchscope.profiling.run.worker"


def error_line(message: object) -> str:
    """`error: MESSAGE` as one line: a newline or carriage return in it (a path, an --out name can
    hold them) is written as \\n, \\r."""
    return "error: " + str(message).replace("\r", "\\r").replace("\n", "\\n")


def python_command(module: str, python: str | None = None) -> list[str]:
    """`python -I -m module`: isolated, so nothing in the current folder (a `json.py`, a
    `statistics.py`) or in PYTHON* variables can slip into branchscope's own processes; the package
    comes from its installation. `python`: another interpreter than this one (--python's)."""
    return [python or sys.executable, "-I", "-m", module]


@dataclass
class RunRequest:
    """One run: a mode and thread counts, the model and how it runs (`options`), where it goes (out)."""

    mode: str
    interop: int
    intra: int
    out: Path
    options: RunOptions = field(default_factory=RunOptions)
    #: Write into an --out folder that holds files branchscope did not write (replacing same-named ones).
    overwrite: bool = False
    #: Period of the CPU samples of the worker's threads (at most 2 ms).
    sample_interval_ms: float = 2.0

    def argv(self, *, worker: bool = False) -> list[str]:
        """The options that `add_run_arguments` reads back into this request.

        `worker=True`: the worker's options, with paths made absolute and without the runner's own
        (--timeout, --nproc, --python, --overwrite, which the runner enforces or uses itself).
        """
        options = self.options.argv(worker=worker)  # --demo NAME or --model PATH first
        args = [*options[:2], "--mode", self.mode, "--interop", str(self.interop), "--intra", str(self.intra), *options[2:]]
        args += ["--out", str(Path(self.out).resolve() if worker else self.out)]
        if self.overwrite and not worker:
            args.append("--overwrite")
        return args


def add_run_arguments(p: argparse.ArgumentParser, *, worker: bool = False) -> None:
    """The options of a run, shared by `branchscope profile`, the runner and the worker
    (`worker=True`: all but the runner's own --timeout, --nproc, --python and --overwrite)."""
    add_options(p, worker=worker)
    p.add_argument("--mode", choices=MODE_NAMES, required=True,
                   help="; ".join(f"{m.name}: {m.description}" for m in MODES.values()))  # fmt: skip
    p.add_argument("--interop", type=int, required=True, metavar="N", help="inter-op threads (torch.set_num_interop_threads)")
    p.add_argument("--intra", type=int, required=True, metavar="N", help="intra-op threads (torch.set_num_threads)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where trace.json.gz and run.json go: a new or empty folder, or an earlier run's")  # fmt: skip
    if not worker:
        p.add_argument("--overwrite", action="store_true",
                       help="write into DIR even though it holds files branchscope did not write "
                            "(files named like ours are replaced)")  # fmt: skip


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The request that `add_run_arguments`' options describe."""
    return RunRequest(
        mode=args.mode,
        interop=args.interop,
        intra=args.intra,
        out=args.out,
        options=RunOptions.from_args(args),
        overwrite=bool(getattr(args, "overwrite", False)),
    )
