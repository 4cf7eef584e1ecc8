"""Kineto's vocabulary (`profiling/trace/kineto.py`): every spelling of a key reads alike, and no
reader writes a spelling itself.

The golden tests build, for each spelling of each key that has more than one, a tiny trace that
spells it so, load it with the reader, and check that the reader finds the same thing in every
spelling (and that it found something: not the result of a key it did not read). A new spelling in
`kineto` is then one entry there, and it is tested here by that entry alone; a key given a second
spelling without a golden case here fails `test_every_key_with_other_spellings_has_a_golden_case`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace import collectives, decode, kineto, merge
from branchscope.profiling.trace.collectives import LEVELS, match_collectives
from branchscope.profiling.trace.flow_events import _FlowEvent
from branchscope.profiling.trace.flows import collective_key
from branchscope.profiling.trace.lane_table import ROLE_ORDER, Lane
from branchscope.profiling.trace.model import Trace

TRACE_PACKAGE = Path(collectives.__file__).parent

# ---- the vocabulary's keys ---------------------------------------------------------------------


def vocabulary() -> dict[str, kineto.Key]:
    """Every key of `kineto`, by its name there (a collective level's as COLLECTIVE_LEVELS[level])."""
    found = {name: v for name, v in vars(kineto).items() if isinstance(v, kineto.Key)}
    found.update({f"COLLECTIVE_LEVELS[{level}]": k for level, k in kineto.COLLECTIVE_LEVELS})
    return found


def test_each_spelling_says_who_wrote_it_and_belongs_to_one_key():
    seen: dict[str, str] = {}
    for name, k in vocabulary().items():
        assert k.spellings and len(k.written_by) == len(k.spellings), name
        assert all(who.strip() for who in k.written_by), name
        for spelling in k.spellings:
            assert spelling not in seen, f"{spelling!r} is a spelling of both {seen.get(spelling)} and {name}"
            seen[spelling] = name


def test_a_key_reads_its_first_spelling_present():
    k = kineto.key(("New", "x"), ("old", "y"))
    assert k.of({"old": 1}) == 1 and k.of({"New": 2, "old": 1}) == 2 and k.of({}, "none") == "none"
    assert k.of({"New": None, "old": 1}) is None  # present, though null: as dict.get of it was
    assert k.getter()({"old": 3}) == 3 and kineto.RANK.getter()({"rank": 4}) == 4


# ---- tiny traces ---------------------------------------------------------------------------------


def write(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def op(name: str, ts: int, *, pid: int = 1, tid: int = 1, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": 10}
    return {**event, "args": args} if args else event


def thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def two_ranks(tmp_path: Path, events_of: Callable[[int], list[dict[str, Any]]]) -> Trace:
    """Ranks 0 and 1 of a job, each its own file read by the reader, merged on one clock."""
    traces = [
        load_trace(write(tmp_path / f"rank-{r}.json", events_of(r), distributedInfo={"rank": r, "world_size": 2}))
        for r in (0, 1)
    ]
    return merge.merge_traces(merge.as_ranks(traces))


# ---- one golden case per key with other spellings: what the reader finds in a trace so spelled ---


def collective_args(spelled: str, spelling: str, seq: int, odd_size: bool) -> dict[str, Any]:
    """record_param_comms's args with key `spelled` (SEQ or PROCESS_GROUP) spelled `spelling`, the
    others as PyTorch writes them; `odd_size`: a size of the wrong type, which sends the events to
    the reader's lenient path (`collectives._lenient`) instead of its typed decoder."""
    args = {kineto.COLLECTIVE_NAME.name: "allreduce", kineto.SEQ.name: seq, kineto.PROCESS_GROUP.name: "0"}
    args[kineto.IN_MSG_NELEMS.name] = "many" if odd_size else 1024
    written = getattr(kineto, spelled)
    args[spelling] = args.pop(written.name)
    return args


def seq_or_group(tmp_path: Path, spelled: str, spelling: str) -> Any:
    """Collectives matched by Seq and process group: on two ranks (typed and lenient reads), and
    one event's key on one rank (`flows.collective_key`, from its args dict)."""
    found = []
    for odd in (False, True):
        job = two_ranks(
            tmp_path,
            lambda r, odd=odd: [
                op("record_param_comms", 100 * s + 10 * r, **collective_args(spelled, spelling, s, odd)) for s in (0, 1)
            ],
        )
        c = match_collectives(job)
        found.append((c.seq.tolist(), c.group, c.rank_count.tolist(), c.last_rank.tolist()))
    one = load_trace(write(tmp_path / "one.json", [op("record_param_comms", 5, **collective_args(spelled, spelling, 7, False))]))
    return found, collective_key(one, 0)


def collective_level(tmp_path: Path, level: str, prefix: str) -> Any:
    """A collective whose event name starts with `prefix`, on two ranks: its level and size."""
    gpu = level == "kernel"
    job = two_ranks(
        tmp_path,
        lambda r: [
            op(f"{prefix}all_reduce", 100 + r, pid=0 if gpu else 1, tid=7 if gpu else 1,
               cat="kernel" if gpu else "user_annotation", **({} if gpu else {kineto.INPUT_DIMS.name: [[4, 8]]}))
        ],
    )  # fmt: skip
    c = match_collectives(job)
    return [LEVELS[x] for x in c.level.tolist()], c.size.tolist(), c.rank_count.tolist(), c.on_gpu.tolist()


def gpu_category(tmp_path: Path, spelling: str) -> Any:
    """A lane whose events have a GPU category: a GPU stream."""
    trace = load_trace(write(tmp_path / "gpu.json", [op("k", 5, pid=0, tid=7, cat=spelling), op("cpu", 5, pid=1)]))
    return [(ln.kind, ln.role, ln.device) for ln in trace.lanes]


def thread_role(tmp_path: Path, spelling: str) -> Any:
    """Threads named with the word: their lanes' roles (no thread's tid is its pid)."""
    events = [thread_name(100, 5, f"worker {spelling} 1"), op("a", 5, pid=100, tid=5), op("b", 5, pid=100, tid=6)]
    trace = load_trace(write(tmp_path / "roles.json", events))
    return {ln.tid: ln.role for ln in trace.lanes}


def host(tmp_path: Path, spelling: str) -> Any:
    """The host a rank's distributedInfo says it ran on."""
    info = {"rank": 0, "world_size": 1, spelling: "node7"}
    trace = load_trace(write(tmp_path / "host.json", [op("a", 5)], distributedInfo=info))
    return merge.rank_hosts(trace), merge.host_of(trace.metadata)


def launch(tmp_path: Path, spelling: str) -> Any:
    """A runtime call named `spelling`… and a kernel with its correlation id, no flow events: the
    arrows made (each as its ends' lane kinds and whether a correlation id made it)."""
    corr = {kineto.CORRELATION.name: 41}
    events = [op(f"{spelling}Kernel", 5, cat="cuda_runtime", **corr), op("k", 9, pid=0, tid=7, cat="kernel", **corr)]
    trace = load_trace(write(tmp_path / "launch.json", events))
    f = trace.flows
    kinds = [ln.kind for ln in trace.lanes]
    return [(kinds[trace.lane[s]], kinds[trace.lane[d]], bool(c)) for s, d, c in zip(f.src, f.dst, f.from_correlation)]


#: Per key with other spellings: what the reader finds in a trace that spells it one way (the
#: test also checks that this is not what it finds when the key is not there at all).
GOLDEN: dict[str, Callable[[Path, str], Any]] = {
    "SEQ": lambda tmp, s: seq_or_group(tmp, "SEQ", s),
    "PROCESS_GROUP": lambda tmp, s: seq_or_group(tmp, "PROCESS_GROUP", s),
    "COLLECTIVE_LEVELS[annotation]": lambda tmp, s: collective_level(tmp, "annotation", s),
    "COLLECTIVE_LEVELS[kernel]": lambda tmp, s: collective_level(tmp, "kernel", s),
    "GPU_CATEGORY": gpu_category,
    "INTEROP_THREAD": thread_role,
    "MAIN_THREAD": thread_role,
    "HOST": host,
    "LAUNCH_PREFIX": launch,
}

#: What each golden case finds where the trace says nothing of the key (a spelling no one writes).
UNSAID = "zz_not_a_kineto_key"


def test_every_key_with_other_spellings_has_a_golden_case():
    alternates = {name for name, k in vocabulary().items() if len(k.spellings) > 1}
    assert alternates == set(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_spelling_of_a_key_reads_alike(tmp_path: Path, name: str):
    k = vocabulary()[name]
    results = {}
    for spelling in k.spellings:
        folder = tmp_path / f"s{len(results)}"
        folder.mkdir()
        results[spelling] = GOLDEN[name](folder, spelling)
    first = results[k.name]
    assert all(found == first for found in results.values()), results
    unsaid = tmp_path / "unsaid"
    unsaid.mkdir()
    assert GOLDEN[name](unsaid, UNSAID) != first  # the case sees the key: without it, it finds otherwise


def test_the_golden_cases_find_what_pytorch_writes(tmp_path: Path):
    """The first spellings' results, spelled out (the golden values every other spelling must match)."""
    for sub in "abcde":
        (tmp_path / sub).mkdir()
    matched, key = seq_or_group(tmp_path / "a", "SEQ", "Seq")
    assert matched == [([0, 1], ["0", "0"], [2, 2], [1, 1])] * 2 and key == ("allreduce@0", "seq", 7)
    assert collective_level(tmp_path / "b", "annotation", "nccl:") == (["annotation"], [32], [2], [False])
    assert gpu_category(tmp_path / "c", "kernel") == [("cpu", "main", -1), ("gpu", "stream", 0)]
    assert thread_role(tmp_path / "d", "ptthreadpool") == {5: "interop", 6: "other"}
    assert launch(tmp_path / "e", "cudaLaunch") == [("cpu", "gpu", True)]


# ---- no reader writes a spelling itself ----------------------------------------------------------

#: The modules that read a trace's JSON, its metadata or its events' args.
READERS = (
    "reader", "decode", "fields", "text", "lanes", "memory_events", "counters", "flow_events", "flows",
    "collectives", "model", "lane_table", "depth", "merge", "correlation_flows", "memory_source",
    "perfetto", "perfetto_tracks", "export_common", "export_chrome", "export_perfetto",
)  # fmt: skip


def own_words() -> set[str]:
    """Spellings that are also words of branchscope's own (field names of its records and of the
    Chrome event struct, lane roles, its summaries' words): a reader may write these, but never as
    a key it reads (`.get(...)`, a msgspec field's `name=`)."""
    fields = {f.name for f in collectives.Collectives.__dataclass_fields__.values()}
    return fields | set(Lane.__slots__) | set(ROLE_ORDER) | set(_FlowEvent.__struct_fields__) | {"CPU", "GPU"}


def literal_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module, docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def read_as_keys(tree: ast.AST) -> set[int]:
    """The string constants a module reads as a key: `.get("…")`'s first argument, a msgspec
    field's `name="…"`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
                out.add(id(node.args[0]))
            out.update(id(kw.value) for kw in node.keywords if kw.arg == "name")
    return out


def spelled_literals(source: str, module: str) -> list[str]:
    """Where a module's source writes a spelling of the vocabulary itself: any spelling that is
    not also a word of branchscope's own (`own_words`), and those too where read as a key."""
    spellings = {s for k in vocabulary().values() for s in k.spellings}
    generic = spellings & own_words()
    tree = ast.parse(source)
    keys = read_as_keys(tree)
    return [
        f"{module}.py:{node.lineno}: {node.value!r}"
        for node in literal_strings(tree)
        if node.value in spellings and (node.value not in generic or id(node) in keys)
    ]


def test_no_reader_writes_a_spelling_of_the_vocabulary():
    found = [hit for m in READERS for hit in spelled_literals((TRACE_PACKAGE / f"{m}.py").read_text(encoding="utf-8"), m)]
    assert found == [], "spell these through `kineto`: " + ", ".join(found)


def test_the_scan_finds_a_spelling_written_as_a_literal():
    source = '"""doc: Seq"""\nx = args.get("Seq")\ny = args.get("name")\nz = "name"\nw = "Total Allocated"\n'
    assert sorted(spelled_literals(source, "m")) == ["m.py:2: 'Seq'", "m.py:3: 'name'", "m.py:5: 'Total Allocated'"]


def test_the_readers_list_is_every_module_that_imports_the_vocabulary():
    users = {p.stem for p in TRACE_PACKAGE.glob("*.py") if "kineto." in p.read_text(encoding="utf-8")}
    assert users - {"kineto"} <= set(READERS)
    assert decode._METADATA_SPELLINGS == tuple(s for k in kineto.METADATA_KEYS for s in k.spellings)
