"""`branchscope demos` and `branchscope profile`: run a model in a worker and report, without the GUI.

The engine is `branchscope.profiling.run.runner`; this module only parses, prints progress and the summary, and
turns failures into one last `error: …` line on stderr (the model's own traceback, when there is
one, above it). No torch here: the worker process is the only one that imports it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from branchscope.profiling.run.model_source import list_demos
from branchscope.profiling.run.protocol import add_run_arguments, request_from_args
from branchscope.profiling.run.runner import format_summary, print_failure, run_profile, stop_on_signals
from branchscope.profiling.trace.events import Event, ProgressEvent


def register(subparsers: Any) -> None:
    demos = subparsers.add_parser(
        "demos",
        help="list the built-in demo models",
        description=(
            "List the built-in demo models, one a line: its name, what its branches show, and the CUDA "
            "devices it needs if any. Run one with `branchscope profile --demo NAME` or open the window "
            "on it with `branchscope --demo NAME`."
        ),
    )
    demos.set_defaults(handler=run_demos)

    profile = subparsers.add_parser(
        "profile",
        help="profile a model sequentially, forked or on CUDA streams",
        description=(
            "Run a model (a .py file with build_model() and example_inputs(), a TorchScript archive, or a "
            "demo) in a fresh worker process with the chosen thread counts, under torch.profiler; write "
            "DIR/trace.json.gz and DIR/run.json. Exit codes: 0 ok, 2 bad arguments or model (a --python "
            "whose probe answers badly among them), 3 mode cannot run here, 4 worker died, timed out or "
            "answered with a malformed final record."
        ),
    )
    add_run_arguments(profile)
    profile.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    profile.set_defaults(handler=run_profile_command)


def run_demos(args: argparse.Namespace) -> int:
    demos = list_demos()
    width = max((len(d.name) for d in demos), default=0)
    for demo in demos:
        needs = f" [needs {demo.requires_cuda_devices} CUDA devices]" if demo.requires_cuda_devices else ""
        print(f"{demo.name:<{width}}  {demo.description}{needs}")
    return 0


def run_profile_command(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    interactive = sys.stderr.isatty() and not args.quiet

    def on_event(event: Event) -> None:
        if isinstance(event, ProgressEvent) and interactive:
            end = "\n" if event.step == event.of else "\r"
            print(f"profiling step {event.step}/{event.of}", end=end, file=sys.stderr, flush=True)

    # Ctrl-C or SIGTERM stop the run through a flag the engine polls, so its cleanup (killing the
    # worker's group, removing temporary files) always runs; the result says it was cancelled.
    with stop_on_signals() as cancel:
        result = run_profile(request, on_event, cancel)
    if not result.ok:
        print_failure(result)
        return result.exit_code
    assert result.run is not None
    print(format_summary(result.run, result.out))  # with the phases' seconds, and the GIL in threads mode
    for warning in result.run.warnings or []:  # why the timings may not be steady
        print(f"warning: {warning}")
    for note in result.notes:
        print(f"note: {note}")
    return 0
