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


def keys(written_by: str, *spellings: str) -> tuple[Key, ...]:
    """A `Key` of one spelling for each of `spellings`, all written by `written_by`."""
    return tuple(Key((spelling,), (written_by,)) for spelling in spellings)


# ---- phases (the Chrome format's "ph") ------------------------------------------------------

#: A complete event, a metadata event, a counter; a flow's start, step and end.
PHASE_COMPLETE, PHASE_METADATA, PHASE_COUNTER = keys(CHROME, "X", "M", "C")
PHASE_FLOW_START, PHASE_FLOW_STEP, PHASE_FLOW_END = keys(CHROME, "s", "t", "f")
#: A flow end's "bp" that binds it to the slice enclosing it (a plain "f" binds to the next slice).
(BIND_ENCLOSING,) = keys(CHROME, "e")

# ---- the top level of a trace file ----------------------------------------------------------

#: The events, and how to show their times.
TRACE_EVENTS, DISPLAY_TIME_UNIT = keys(CHROME, "traceEvents", "displayTimeUnit")
#: kineto's own: the format's version, the GPUs (`GPU_INDEX`, `GPU_MEMORY`), the recording's
#: options, and the path it exported to (its last key, written unescaped:
#: `decode._without_raw_trace_name`).
SCHEMA_VERSION, DEVICE_PROPERTIES, RECORD_SHAPES, PROFILE_MEMORY, TRACE_NAME = keys(
    KINETO, "schemaVersion", "deviceProperties", "record_shapes", "profile_memory", "traceName"
)
#: A process of a torch.distributed job: its `RANK`, `WORLD_SIZE` and `BACKEND`.
(DISTRIBUTED_INFO,) = keys("kineto, for a process of a torch.distributed job", "distributedInfo")
#: What relative timestamps count from (absolute ones: none).
(BASE_TIME,) = keys("kineto (newer versions; older ones write absolute timestamps)", "baseTimeNanoseconds")
#: branchscope's own run facts in the traces its runner writes.
(RUN_FACTS,) = keys(BRANCHSCOPE, "branchscope")
#: branchscope's own in a Perfetto trace it exports (the exporter writes them, the Perfetto reader
#: reads them): the instant holding the trace's metadata (these top-level keys as one JSON text, in
#: its annotation `PERFETTO_METADATA_ARG`), on a track of its own named as the run facts' key
#: (`RUN_FACTS`).
PERFETTO_METADATA_EVENT, PERFETTO_METADATA_ARG = keys(BRANCHSCOPE, "branchscope.metadata", "json")
#: branchscope's own in a Perfetto trace it exports: on a slice that starts flows, their categories
#: (a Perfetto flow has none) as one annotation, a dict {flow id in decimal: category}.
(PERFETTO_FLOW_CATEGORIES,) = keys(BRANCHSCOPE, "branchscope.flow_categories")
#: The top-level keys kept as `Trace.metadata` (besides `TRACE_EVENTS`, the events).
METADATA_KEYS: tuple[Key, ...] = (
    SCHEMA_VERSION, DEVICE_PROPERTIES, DISTRIBUTED_INFO, BASE_TIME, DISPLAY_TIME_UNIT, TRACE_NAME,
    RECORD_SHAPES, PROFILE_MEMORY, RUN_FACTS,
)  # fmt: skip

#: In `deviceProperties[]`: a GPU's index and its memory (bytes).
GPU_INDEX, GPU_MEMORY = keys(KINETO, "id", "totalGlobalMem")
#: In `distributedInfo`.
RANK, WORLD_SIZE, BACKEND = keys(KINETO, "rank", "world_size", "backend")
#: Where a trace may say which machine wrote it: the top level, `distributedInfo` or `RUN_FACTS`.
HOST = key(("hostname", HOSTS), ("host", HOSTS), ("host_name", HOSTS))

# ---- metadata events ("ph": "M") ------------------------------------------------------------

#: A thread's name, in its arg `THREAD_NAME_ARG` (kineto: "thread N (PTThreadPool)", "pt_main_thread").
THREAD_NAME, THREAD_NAME_ARG = keys(CHROME, "thread_name", "name")
#: A process's labels ("GPU 0", "CPU"), in its arg `PROCESS_LABELS_ARG`; the label that keeps a
#: process's threads CPU threads (`GPU_PROCESS_LABEL` makes them GPU N's streams).
PROCESS_LABELS, PROCESS_LABELS_ARG, CPU_PROCESS_LABEL = keys(KINETO, "process_labels", "labels", "CPU")
GPU_PROCESS_LABEL = re.compile(r"GPU\s+(\d+)")
#: A tid written "stream N", GPU stream N: the legacy format's (`LEGACY`).
STREAM_TID = re.compile(r"^stream\s+(-?\d+)")

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
(INPUT_DIMS,) = keys(KINETO, "Input Dims")

# ---- launches and what they launched (`correlation_flows`) ------------------------------------

#: The id CUPTI (and roctracer) give a runtime call and each GPU activity it caused: a launch and its
#: kernel, memcpy or memset share it. ("External id" is not it: it ties a CPU op to every runtime
#: call and kernel under it, many to many.)
(CORRELATION,) = keys("kineto (PyTorch >= 1.8.1) and the legacy profiler", "correlation")
#: How runtime (and driver) calls that launch GPU work begin their names: kernels, graphs, copies
#: and sets, each API's variants (`_v2`, `_ptsz`, `Async`, `ExC`, …) included.
LAUNCH_PREFIX = key(
    ("cudaLaunch", "CUDA's runtime API (cudaLaunchKernel, cudaLaunchCooperativeKernel, …)"),
    ("cudaGraphLaunch", "CUDA's runtime API"), ("cudaMemcpy", "CUDA's runtime API"),
    ("cudaMemset", "CUDA's runtime API"), ("cuLaunch", "CUDA's driver API (cuLaunchKernel, …)"),
    ("cuGraphLaunch", "CUDA's driver API"), ("cuMemcpy", "CUDA's driver API"), ("cuMemset", "CUDA's driver API"),
    ("hipLaunch", "HIP (ROCm)"), ("hipExtLaunch", "HIP (ROCm)"), ("hipModuleLaunch", "HIP (ROCm)"),
    ("hipExtModuleLaunch", "HIP (ROCm)"), ("hipGraphLaunch", "HIP (ROCm)"), ("hipMemcpy", "HIP (ROCm)"),
    ("hipMemset", "HIP (ROCm)"),
)  # fmt: skip
#: The category of kineto's launch -> kernel flow events ("ph" "s" at the launch, "f" with "bp": "e"
#: at the kernel; the legacy profiler wrote category "async", name "launch"), given to the arrows
#: made from correlation ids too.
(LAUNCH_FLOW_CATEGORY,) = keys(KINETO, "ac2g")

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
COLLECTIVE_NAME, IN_MSG_NELEMS = keys(COMMS, "Collective name", "In msg nelems")
SEQ = key(("Seq", COMMS), ("seq", OTHER_COMMS))
PROCESS_GROUP = key(("Process Group Name", COMMS), ("pg_name", OTHER_COMMS))

# ---- allocator events ------------------------------------------------------------------------

#: The allocator's events ("ph": "i", with profile_memory=True), by name, and their args: the
#: device, the bytes (negative: a free), the allocated and reserved totals after the event (the
#: legacy format writes no `Total Allocated`: the series sums `BYTES`), the block's address (the
#: oldest traces write none).
MEMORY_EVENT, DEVICE_TYPE, DEVICE_ID, BYTES, TOTAL_ALLOCATED, TOTAL_RESERVED, ADDR = keys(
    KINETO, "[memory]", "Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr"
)
#: c10::DeviceType values seen in `[memory]` events (ROCm reports its GPUs as CUDA, type 1).
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia", 20: "privateuseone"}
