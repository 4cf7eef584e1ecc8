"""Kineto's vocabulary as data: every key, event name, category and phase of a torch.profiler trace
that a reader reads, each with the other spellings that traces use for it.

torch.profiler writes its traces through kineto, in the Chrome trace format, and the names in them
changed across PyTorch versions (the legacy profiler of PyTorch <= 1.9 wrote `Kernel` where kineto
writes `kernel`, and no `Total Allocated`); other tools write some of them their own way. As
HolisticTraceAnalysis keeps its trace-format differences in a table per format version
(`hta/configs/event_args_formats/event_args_*.yaml`), this module keeps ours: a `Key` lists every
spelling of one thing, the one current PyTorch writes first, and says of each who wrote it (where
known). The readers (`decode`, `lanes`, `memory_events`, `collectives`, `flows`, `flow_events`,
`model`, `merge`) name no spelling themselves (`tests/trace/test_kineto_vocabulary.py` checks it),
so a trace-format quirk, a new spelling, is one entry here and a golden test there.

A key is resolved once per trace, never looked up per event: the readers of many events decode
them with msgspec structs built once from these keys (one field per spelling, `struct_fields`), the
readers of a trace's metadata ask `Key.of` once.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

# ---- who wrote a spelling ---------------------------------------------------------------------

CHROME = "the Chrome trace event format (every writer)"
KINETO = "kineto (PyTorch >= 1.8.1)"
LEGACY = "PyTorch's legacy profiler (PyTorch <= 1.9; kineto traces never)"
COMMS = "c10d's record_param_comms and the NCCL kernels (PyTorch >= 2.1)"
#: A spelling seen in distributed traces whose writer and version are not pinned down.
OTHER_COMMS = "other writers of distributed traces (lower-case; which version, not known)"
BRANCHSCOPE = "branchscope's runner (`run_info.RunInfo`)"
HOSTS = "not kineto: the writers that say a trace's host (and branchscope's runner)"


class Key(NamedTuple):
    """One thing a trace names, in every spelling readers accept: `spellings[0]` is the one
    current PyTorch writes, `written_by[k]` says who wrote `spellings[k]`."""

    spellings: tuple[str, ...]
    written_by: tuple[str, ...]

    @property
    def name(self) -> str:
        """The spelling current PyTorch writes (and the one branchscope writes, where it does)."""
        return self.spellings[0]

    def of(self, obj: Mapping[str, Any], default: Any = None) -> Any:
        """The value under the first spelling `obj` has, else `default`. For a trace's metadata or
        one event's args dict, never per event in a loop over many (see the module docstring)."""
        for spelling in self.spellings:
            if spelling in obj:
                return obj[spelling]
        return default

    def getter(self) -> Callable[[Mapping[str, Any]], Any]:
        """`of` (no default) as one function, resolved now, for a loop over many dicts: with one
        spelling, a bound `dict.get` of it, as fast as the literal was."""
        if len(self.spellings) == 1:
            return operator.methodcaller("get", self.name)
        return self.of


def key(*spellings: tuple[str, str]) -> Key:
    """A `Key` from (spelling, who wrote it) pairs, the spelling current PyTorch writes first."""
    return Key(tuple(s for s, _ in spellings), tuple(w for _, w in spellings))


def struct_fields(attr: str, k: Key, kind: Any, default: Any) -> list[tuple[str, Any, Any]]:
    """`msgspec.defstruct` fields that decode every spelling of `k`: `attr` for its first, `attr_1`,
    `attr_2`, … for the others (`first_said` takes the first that an event says)."""
    import msgspec

    return [
        (attr if n == 0 else f"{attr}_{n}", kind, msgspec.field(default=default, name=spelling))
        for n, spelling in enumerate(k.spellings)
    ]


def spelling_attrs(attr: str, k: Key) -> list[str]:
    """The attributes `struct_fields(attr, k, …)` decodes `k`'s spellings into, in order."""
    return [attr if n == 0 else f"{attr}_{n}" for n in range(len(k.spellings))]


# ---- phases (the Chrome format's "ph") ------------------------------------------------------

PHASE_COMPLETE = key(("X", CHROME))
PHASE_METADATA = key(("M", CHROME))
PHASE_COUNTER = key(("C", CHROME))
#: A flow's start, step and end.
PHASE_FLOW_START = key(("s", CHROME))
PHASE_FLOW_STEP = key(("t", CHROME))
PHASE_FLOW_END = key(("f", CHROME))
#: A flow end's "bp" that binds it to the slice enclosing it (a plain "f" binds to the next slice).
BIND_ENCLOSING = key(("e", CHROME))

# ---- the top level of a trace file ----------------------------------------------------------

TRACE_EVENTS = key(("traceEvents", CHROME))
SCHEMA_VERSION = key(("schemaVersion", KINETO))
DEVICE_PROPERTIES = key(("deviceProperties", KINETO))
DISTRIBUTED_INFO = key(("distributedInfo", "kineto, for a process of a torch.distributed job"))
#: What relative timestamps count from (absolute ones: none).
BASE_TIME = key(("baseTimeNanoseconds", "kineto (newer versions; older ones write absolute timestamps)"))
DISPLAY_TIME_UNIT = key(("displayTimeUnit", CHROME))
#: The path kineto exported to: its last key, written unescaped (`decode._without_raw_trace_name`).
TRACE_NAME = key(("traceName", KINETO))
RECORD_SHAPES = key(("record_shapes", KINETO))
PROFILE_MEMORY = key(("profile_memory", KINETO))
#: branchscope's own run facts in the traces its runner writes.
RUN_FACTS = key(("branchscope", BRANCHSCOPE))
#: The top-level keys kept as `Trace.metadata` (besides `TRACE_EVENTS`, the events).
METADATA_KEYS: tuple[Key, ...] = (
    SCHEMA_VERSION, DEVICE_PROPERTIES, DISTRIBUTED_INFO, BASE_TIME, DISPLAY_TIME_UNIT, TRACE_NAME,
    RECORD_SHAPES, PROFILE_MEMORY, RUN_FACTS,
)  # fmt: skip

#: In `deviceProperties[]`: a GPU's index and its memory (bytes).
GPU_INDEX = key(("id", KINETO))
GPU_MEMORY = key(("totalGlobalMem", KINETO))
#: In `distributedInfo`.
RANK = key(("rank", KINETO))
WORLD_SIZE = key(("world_size", KINETO))
BACKEND = key(("backend", KINETO))
#: Where a trace may say which machine wrote it: the top level, `distributedInfo` or `RUN_FACTS`.
HOST = key(("hostname", HOSTS), ("host", HOSTS), ("host_name", HOSTS))

# ---- metadata events ("ph": "M") ------------------------------------------------------------

#: A thread's name, in its arg `THREAD_NAME_ARG` (kineto: "thread N (PTThreadPool)", "pt_main_thread").
THREAD_NAME = key(("thread_name", CHROME))
THREAD_NAME_ARG = key(("name", CHROME))
#: A process's labels ("GPU 0", "CPU"), in its arg `PROCESS_LABELS_ARG`.
PROCESS_LABELS = key(("process_labels", KINETO))
PROCESS_LABELS_ARG = key(("labels", KINETO))
#: A process label that makes its threads GPU N's streams, one that keeps them CPU threads.
GPU_PROCESS_LABEL = re.compile(r"GPU\s+(\d+)")
CPU_PROCESS_LABEL = key(("CPU", KINETO))
#: A tid written "stream N": GPU stream N.
STREAM_TID = re.compile(r"^stream\s+(-?\d+)")  # LEGACY

# ---- thread names: words that give a CPU lane its role (`lanes._role`) ----------------------

INTEROP_THREAD = key(("ptthreadpool", KINETO + ": 'thread N (PTThreadPool)'"), ("interop", "other writers"))
AUTOGRAD_THREAD = key(("autograd", "PyTorch's autograd engine threads"))
MAIN_THREAD = key(("pt_main_thread", "PyTorch (the main thread's name)"), ("mainthread", "other writers"))

# ---- categories -----------------------------------------------------------------------------

#: Categories whose events run on a GPU stream.
GPU_CATEGORY = key(
    ("kernel", KINETO), ("gpu_memcpy", KINETO), ("gpu_memset", KINETO), ("gpu_user_annotation", KINETO),
    ("cuda_sync", KINETO), ("gpu_op", KINETO), ("Kernel", LEGACY), ("Memcpy", LEGACY), ("Memset", LEGACY),
)  # fmt: skip

# ---- op args --------------------------------------------------------------------------------

#: An op's input shapes (with `record_shapes=True`).
INPUT_DIMS = key(("Input Dims", KINETO))

# ---- collectives ----------------------------------------------------------------------------

#: Collective events' names by level, outermost call first (`collectives.LEVELS`): the prefixes
#: of each level's names.
COLLECTIVE_LEVELS: tuple[tuple[str, Key], ...] = (
    ("c10d", key(("c10d::", "c10d's ops"))),
    ("record_param_comms", key(("record_param_comms", COMMS))),
    ("annotation", key(("nccl:", "ProcessGroupNCCL's annotations"), ("gloo:", "ProcessGroupGloo's annotations"))),
    ("kernel", key(("ncclKernel_", "NCCL's kernels (older NCCL)"), ("ncclDevKernel_", "NCCL's kernels (newer NCCL)"))),
)
#: Collective args: its name, sequence number (per process group), process group, message size.
COLLECTIVE_NAME = key(("Collective name", COMMS))
SEQ = key(("Seq", COMMS), ("seq", OTHER_COMMS))
PROCESS_GROUP = key(("Process Group Name", COMMS), ("pg_name", OTHER_COMMS))
IN_MSG_NELEMS = key(("In msg nelems", COMMS))

# ---- allocator events ------------------------------------------------------------------------

#: The allocator's events ("ph": "i"), by name.
MEMORY_EVENT = key(("[memory]", KINETO + " with profile_memory=True"))
DEVICE_TYPE = key(("Device Type", KINETO))
DEVICE_ID = key(("Device Id", KINETO))
BYTES = key(("Bytes", KINETO))
#: The allocated total after the event; the legacy format writes none (the series sums `BYTES`).
TOTAL_ALLOCATED = key(("Total Allocated", KINETO))
TOTAL_RESERVED = key(("Total Reserved", KINETO))
#: The block's address; the oldest traces write none.
ADDR = key(("Addr", KINETO))
#: c10::DeviceType values seen in `[memory]` events (ROCm reports its GPUs as CUDA, type 1).
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia", 20: "privateuseone"}
