"""`RunOptions`: what every run of a model shares apart from its mode and threads — the model, its
inputs, the device, the steps, the timeout, the ranks, the worker's Python — in one place, inside the run request
(`protocol.RunRequest`), the sweep request (`sweep.SweepRequest`) and the window's `RunSpec`.

Its command-line options are declared once (`OPTIONS`): `add_options` adds them to a parser,
`RunOptions.from_args` reads them back and `RunOptions.argv` writes them, for `branchscope
profile`, `branchscope sweep`, the runner and the worker alike (the worker takes all but the
runner's own: --timeout, --nproc, --nnodes, --node-rank, --rdzv-endpoint and --python, which the
runner enforces or uses itself).

No torch, no Qt: every process imports this.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from branchscope.profiling.run.steady import WARMUP_MAX_S, WARMUP_MAX_STEPS
from branchscope.profiling.trace.records import RunRecord


def positive_seconds(text: str) -> float:
    """argparse type of --timeout: a finite number of seconds above 0 (not nan, inf, 0 or negative)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


@dataclass(frozen=True)
class Option:
    """One command-line option of `RunOptions` (its field `dest`)."""

    dest: str
    flag: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    #: The worker does not take it (the runner enforces it itself).
    runner_only: bool = False
    #: Given once per value (--input-shape A --input-shape B).
    repeated: bool = False


#: The options after --demo/--model, in the order `argv` writes them.
OPTIONS = (
    Option("steps", "--steps", "profiled steps, and at least as many timed without the profiler (default %(default)s)", "K", int),
    Option("warmup", "--warmup", f"warm-up steps before timing: at least W, then on until step times settle (at most "
           f"{WARMUP_MAX_STEPS} steps or {WARMUP_MAX_S:g} s of them); 0: no warm-up (default %(default)s)", "W", int),
    Option("timeout", "--timeout", "stop a run's worker after S seconds (default %(default)s)", "S", positive_seconds, runner_only=True),
    Option("input_shapes", "--input-shape", "input shape of a TorchScript archive, like 8x64x35x35 (once per input)",
           "SHAPE", repeated=True),  # fmt: skip
    Option("dtype", "--dtype", "input dtype of a TorchScript archive (default %(default)s)"),
    Option("device", "--device", "auto (CUDA when available), cpu, cuda or cuda:N (default %(default)s)"),
    Option("nproc", "--nproc", "run N ranks with torch.distributed.run on this machine (gloo on CPU, nccl on CUDA, "
           "rank r on cuda:r); a run folder gets rank-R/ per rank and a run.json listing them", "N", int,
           runner_only=True),  # fmt: skip
    Option("nnodes", "--nnodes", "a multi-node run: this machine is one of N nodes, each running --nproc ranks into OUT, "
           "a folder all the nodes share (torch.distributed.run's c10d rendezvous at --rdzv-endpoint)", "N", int,
           runner_only=True),  # fmt: skip
    Option("node_rank", "--node-rank", "this node's place among --nnodes (0 to N-1); node 0 writes OUT/run.json once "
           "every node's ranks are in", "R", int, runner_only=True),  # fmt: skip
    Option("rdzv_endpoint", "--rdzv-endpoint", "HOST:PORT of the rendezvous, the same on every node (required with "
           "--nnodes above 1; a loopback address keeps every node's traffic on this machine)", "HOST:PORT",
           runner_only=True),  # fmt: skip
    Option("python", "--python", "run the worker under this Python (your environment, with your torch and your model's "
           "dependencies; branchscope need not be installed there) instead of branchscope's own", "PATH", Path,
           runner_only=True),  # fmt: skip
)


@dataclass(frozen=True)
class RunOptions:
    """The model (a demo, or a .py file or TorchScript archive) and how each of its runs goes."""

    demo: str | None = None
    model: Path | None = None
    #: A TorchScript archive's input shapes ("8x64x35x35") and dtype.
    input_shapes: tuple[str, ...] = ()
    dtype: str = "float32"
    device: str = "auto"
    #: Profiled steps (and at least as many timed without the profiler).
    steps: int = 10
    #: Warm-up steps: at least this many, then on until step times settle (0: none; see `steady`).
    warmup: int = 3
    #: Seconds before the runner stops a run's worker.
    timeout: float = 600.0
    #: Ranks of a distributed run (torch.distributed.run on this machine); 1: one worker.
    nproc: int = 1
    #: A multi-node run (`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`): this node's place and
    #: the rendezvous every node meets at (`profiling/run/nodes.py`); 1 node: a run on this machine.
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    #: The Python the worker runs under (`profiling/run/interpreter.py`); None: branchscope's own.
    python: Path | None = None

    # ---- what runs ---------------------------------------------------------------------------
    @property
    def model_key(self) -> str:
        """Identifies the model across runs (runs compare only with runs of one model)."""
        if self.demo:
            key = f"demo:{self.demo}"
        else:
            key = f"file:{os.path.abspath(self.model or '')}"
            if self.input_shapes:
                key += f" inputs {' '.join(self.input_shapes)} {self.dtype}"
        if self.python is not None:  # another torch: its runs are not compared with branchscope's own
            key += f" python {os.path.abspath(self.python)}"
        return key

    @property
    def model_label(self) -> str:
        """The demo's name or the model file's name."""
        return self.demo or (Path(self.model).name if self.model else "?")

    def replace(self, **changes: Any) -> RunOptions:
        return replace(self, **changes)

    # ---- command line ------------------------------------------------------------------------
    def argv(self, *, worker: bool = False) -> list[str]:
        """The options `add_options` reads back into these (`worker=True`: the worker's, the model's
        path made absolute, without the runner's own)."""
        model = Path(self.model).resolve() if worker and self.model is not None else self.model
        args = ["--demo", str(self.demo)] if self.demo else ["--model", str(model)]
        for opt in OPTIONS:
            if worker and opt.runner_only:
                continue
            value = getattr(self, opt.dest)
            if opt.repeated:
                for v in value:
                    args += [opt.flag, str(v)]
            elif (opt.dest in ("nproc", "nnodes") and value == 1) or (opt.dest == "node_rank" and value == 0) or value is None:
                continue  # the default, left out so a one-process run reads as it always has
            else:
                args += [opt.flag, repr(float(value)) if isinstance(value, float) else str(value)]
        return args

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options `add_options` added, as parsed (those a parser lacks keep their defaults)."""
        values: dict[str, Any] = {"demo": args.demo, "model": args.model}
        for opt in OPTIONS:
            if hasattr(args, opt.dest):
                value = getattr(args, opt.dest)
                values[opt.dest] = tuple(value) if opt.repeated else value
        return cls(**values)

    @classmethod
    def from_record(cls, run: RunRecord) -> RunOptions | None:
        """The options that repeat a run.json's run; None when it does not say enough (a
        TorchScript archive is repeatable only when run.json lists its input shapes)."""
        if not run.model:
            return None
        common: dict[str, Any] = {}
        if run.steps is not None and run.steps > 0:
            common["steps"] = run.steps
        if run.warmup is not None and run.warmup >= 0:
            common["warmup"] = run.warmup
        if run.nproc is not None and run.nproc > 1:
            common["nproc"] = run.nproc
        # Run under another Python (--python): again under it; under this one's own: as it is.
        if run.python_executable and os.path.abspath(run.python_executable) != os.path.abspath(sys.executable):
            common["python"] = Path(run.python_executable)
        if run.demo is not None:
            return cls(demo=run.demo, **common)
        if run.source == "torchscript":
            if not run.input_shapes:
                return None
            return cls(model=Path(run.model), input_shapes=tuple(run.input_shapes), dtype=run.dtype or "float32", **common)
        if run.source == "py":
            return cls(model=Path(run.model), **common)
        return None

    def problem(self) -> str | None:
        """What is wrong with the numbers (one line for `error: …`), or None. The model itself is
        checked by the runner (`model_source.check_spec`)."""
        for name, value, low in (("--steps", self.steps, 1), ("--nproc", self.nproc, 1), ("--warmup", self.warmup, 0)):
            if value < low:
                return f"{name} must be at least {low}, not {value}" if low else f"{name} must be 0 or more, not {value}"
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            return f"--timeout must be a positive number of seconds, not {self.timeout}"
        return self._nodes_problem()

    def _nodes_problem(self) -> str | None:
        """What is wrong with --nnodes, --node-rank and --rdzv-endpoint, or None."""
        if self.nnodes < 1:
            return f"--nnodes must be at least 1, not {self.nnodes}"
        if not 0 <= self.node_rank < self.nnodes:
            return f"--node-rank must be from 0 to {self.nnodes - 1} (--nnodes {self.nnodes}), not {self.node_rank}"
        if self.nnodes == 1:
            return "--rdzv-endpoint is for a run of several nodes (--nnodes above 1)" if self.rdzv_endpoint else None
        if not self.rdzv_endpoint:
            return "--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node"
        if parse_endpoint(self.rdzv_endpoint) is None:
            return f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT (a host name or address, a port from 1 to 65535)"
        return None


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """--rdzv-endpoint's HOST:PORT ("[::1]:PORT" for an IPv6 address) as (host, port), or None."""
    host, sep, port = text.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback ("localhost", 127.0.0.0/8, ::1): a rendezvous there
    keeps every node on this machine (tests use nothing else)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_DEFAULTS = RunOptions()


def add_options(p: argparse.ArgumentParser, *, worker: bool = False) -> None:
    """--demo/--model and every option of `OPTIONS` (`worker=True`: without the runner's own)."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--demo", metavar="NAME", help="a built-in demo (see `branchscope demos`)")
    src.add_argument("--model", metavar="PATH", type=Path, help="a .py file (build_model, example_inputs) or a TorchScript archive")
    for opt in OPTIONS:
        if worker and opt.runner_only:
            continue
        kwargs: dict[str, Any] = {"dest": opt.dest, "help": opt.help}
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
        if opt.type is not None:
            kwargs["type"] = opt.type
        if opt.repeated:
            kwargs.update(action="append", default=[])
        else:
            kwargs["default"] = getattr(_DEFAULTS, opt.dest)
        p.add_argument(opt.flag, **kwargs)


__all__ = ["OPTIONS", "Option", "RunOptions", "add_options", "is_loopback", "parse_endpoint", "positive_seconds"]
