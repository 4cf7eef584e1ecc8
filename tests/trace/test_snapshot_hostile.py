"""Hostile allocator snapshots: memo bombs, floods of containers, absurd declared lengths, deep nesting.

Each is given to the real CLI (`branchscope memory FILE`) in a child process whose address space
may grow by `HEADROOM_MIB` only, so that an unbounded allocation fails there instead of eating the
machine, and which reports how much its resident memory grew (VmHWM, its own peak). A refusal must
be one `error:` line and exit 2, must come from the unpickler's own bound (not from a MemoryError
under the limit, the old behaviour), and memory must stay within a small multiple of the file.
Nothing here asserts a duration: timeouts only keep a hang from blocking the run.
"""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.memory import UNEXPLAINED
from branchscope.profiling.trace.plain_pickle import unpickle
from branchscope.profiling.trace.snapshot import _MAX_EXPANSION, load_snapshot
from tests.builders.snapshots import two_gpu_snapshot
from tests.paths import ROOT

BRANCHSCOPE = Path(sys.executable).with_name("branchscope")
MIB = 1 << 20
#: Address space the CLI child may add to what it holds after its imports.
HEADROOM_MIB = 1024
#: Size of the floods: big enough that 64 bytes a byte (an empty list) is far above the bound.
FLOOD = 8 * MIB
P4 = b"\x80\x04"
P5 = b"\x80\x05"

# Runs the installed `branchscope` command (its console script, in this process) once its imports
# are done and its address space is limited, and writes how much its resident memory grew.
_LIMITED_CLI = r"""
import json, resource, runpy, sys
import psutil
import branchscope.app.cli, branchscope.app.cmd_memory, branchscope.profiling.trace.snapshot

def status(key):
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) * 1024

script, report, headroom, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
base = status("VmRSS")
limit = psutil.Process().memory_info().vms + headroom * (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.argv = [script, *args]
try:
    if script == "-m":  # not installed: the module
        runpy.run_module("branchscope.app.cli", run_name="__main__")
    else:
        runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
with open(report, "w") as f:
    json.dump({"rc": code, "growth_mib": (status("VmHWM") - base) / (1 << 20)}, f)
sys.exit(code)
"""


def limited_cli(tmp_path: Path, *args: str, headroom_mib: int = HEADROOM_MIB) -> tuple[subprocess.CompletedProcess, dict]:
    """`branchscope ARGS` under an address-space limit: the process, and its exit code and memory growth."""
    report = tmp_path / "report.json"
    script = str(BRANCHSCOPE) if BRANCHSCOPE.exists() else "-m"
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED_CLI, script, str(report), str(headroom_mib), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert report.exists(), (proc.returncode, proc.stderr[-3000:])
    return proc, json.loads(report.read_text())


def assert_refused(proc: subprocess.CompletedProcess, outcome: dict, path: Path) -> str:
    """One `error:` line naming the file, exit 2, nothing on stdout: the unpickler's own refusal."""
    assert outcome["rc"] == 2 and proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert lines[0].startswith(f"error: {path}: ")
    # Under the limit, the old unpickler failed by MemoryError: refused, but only once memory ran out.
    assert "not enough memory" not in lines[0], lines[0]
    return lines[0].removeprefix(f"error: {path}: ")


def bound_mib(size: int) -> float:
    """What refusing a file of `size` bytes may take: the unpickler's bound (and a tenth more, for
    what it cannot see of the allocators), the file itself, and room for the interpreter's noise."""
    return (1.1 * _MAX_EXPANSION + 1) * size / MIB + 48


def _u32(n: int) -> bytes:
    return struct.pack("<I", n)


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _dict(*pairs: bytes) -> bytes:
    """A dict of the pickled keys and values `pairs`, set at once (SETITEMS)."""
    return b"}(" + b"".join(pairs) + b"u"


def _deep_tuple(levels: int) -> bytes:
    """None in `levels` nested 1-tuples, built inside out (one byte a level): hashing it recurses."""
    return b"N" + b"\x85" * levels


def _padding() -> bytes:
    """A dict item of 1 MiB of bytes, so that a deep tuple's 300,000 levels fit in the memory bound."""
    return _str("padding") + b"B" + _u32(MIB) + bytes(MIB) + b"s"


#: Each built when its test runs (the floods are 8 MiB).
HOSTILE: dict[str, Callable[[], bytes]] = {
    # One memo index: the C unpickler sized its memo by it (2^26: 1 GB; 2^30: 16.8 GB, 46 s).
    "LONG_BINPUT 2^26": lambda: P4 + b"Nr" + _u32(1 << 26) + b".",
    "LONG_BINPUT 2^30": lambda: P4 + b"Nr" + _u32(1 << 30) + b".",
    "LONG_BINPUT 2^32-1": lambda: P4 + b"Nr" + _u32((1 << 32) - 1) + b".",
    "LONG_BINGET 2^30": lambda: P4 + b"Nj" + _u32(1 << 30) + b".",  # refused already
    # Floods of one-byte opcodes that each build an object of 56 to 216 bytes.
    "EMPTY_SET flood": lambda: P4 + b"\x8f" * FLOOD + b".",
    "EMPTY_LIST flood": lambda: P4 + b"]" * FLOOD + b".",
    "EMPTY_DICT flood": lambda: P4 + b"}" * FLOOD + b".",
    "TUPLE1 chain": lambda: P4 + _deep_tuple(FLOOD) + b".",
    "nested lists": lambda: P4 + b"]" * (FLOOD // 2) + b"a" * (FLOOD // 2 - 1) + b".",
    # Marks cost the C unpickler 8 bytes each: these were bounded already, and must stay so.
    "MARK run": lambda: P4 + b"(" * FLOOD + b".",
    "MARK run with items": lambda: P4 + b"(N" * (FLOOD // 2) + b".",
    # Lengths far beyond the file: BYTEARRAY8's bytearray and BINBYTES8's bytes were allocated
    # first (a MemoryError; the bytearray printed a SystemError too); the string and the frame
    # were read to the end of the file and refused already.
    "BYTEARRAY8 2^62": lambda: P5 + b"\x96" + _u64(1 << 62) + b"abc.",
    "BINBYTES8 2^62": lambda: P5 + b"\x8e" + _u64(1 << 62) + b"abc.",
    "BINUNICODE8 2^62": lambda: P5 + b"\x8d" + _u64(1 << 62) + b"abc.",
    "BINUNICODE 2^32-1": lambda: P4 + b"X" + _u32((1 << 32) - 1) + b"abc.",
    "FRAME 2^62": lambda: P4 + b"\x95" + _u64(1 << 62) + b"N.",
    # A deep tuple as a dict key: hashing it recursed in C until the process died (SIGSEGV).
    "deep tuple as a key": lambda: P4 + b"}" + _padding() + _deep_tuple(300_000) + b"Ns.",
    # ... or as an entry's action, hashed when the entries are read.
    "deep tuple as an action": lambda: P4 + b"}" + _padding() + _str("device_traces") + b"]]}" + _str("action")
    + _deep_tuple(300_000) + b"saas.",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_snapshot_is_one_error_line_in_bounded_memory(tmp_path: Path, case: str) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(HOSTILE[case]())
    proc, outcome = limited_cli(tmp_path, "memory", str(path))
    assert_refused(proc, outcome, path)
    assert outcome["growth_mib"] < bound_mib(path.stat().st_size), outcome


def test_colliding_integer_keys_are_refused_not_hashed(tmp_path: Path) -> None:
    """Integers that differ by 2^61 - 1 hash alike: a dict of 100,000 of them took minutes to build
    (each insertion compared the key with every one before). Keys of a snapshot are strings."""
    keys = b"".join(b"\x8a\x0c" + (i * ((1 << 61) - 1)).to_bytes(12, "little", signed=True) + b"N"
                    for i in range(1, 100_001))
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(P4 + b"}(" + keys + b"u.")
    proc, outcome = limited_cli(tmp_path, "memory", str(path))
    assert "a dict key or set item that is an integer" in assert_refused(proc, outcome, path)


def test_segment_devices_built_to_collide_are_never_hashed(tmp_path: Path) -> None:
    """Segments' device numbers that differ by 2^61 - 1 hash alike: summed per device in a dict,
    200,000 of them took minutes (20,000: 4 s; quadratic). Only devices with a trace are summed, by
    index; every segment's sizes are still checked. The subprocess's timeout only stops a hang."""
    segment = b"".join(_dict(_str("device"), b"\x8a\x0c" + (i * ((1 << 61) - 1)).to_bytes(12, "little", signed=True),
                             _str("total_size"), b"K\x01") for i in range(1, 200_001))  # fmt: skip
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(P4 + _dict(_str("segments"), b"](" + segment + b"e", _str("device_traces"), b"]]a") + b".")
    proc, outcome = limited_cli(tmp_path, "memory", "--json", str(path))
    assert outcome["rc"] == 0 and proc.stderr == "", proc.stderr[-3000:]
    assert json.loads(proc.stdout)["devices"] == []  # device 0 has no entries: nothing to show
    bad = P4 + _dict(_str("segments"), b"](" + _dict(_str("device"), b"\x8a\x02\xff\x7f", _str("total_size"), b"N")
                     + b"e", _str("device_traces"), b"]]a") + b"."  # fmt: skip
    path.write_bytes(bad)  # a segment of a device without a trace is still checked
    proc, outcome = limited_cli(tmp_path, "memory", str(path))
    assert outcome["rc"] == 2 and "segment size is NoneType" in proc.stderr, proc.stderr[-3000:]


def test_a_frame_line_that_is_a_deep_list_is_not_formatted(tmp_path: Path) -> None:
    """A frame's `line` went into the site with str(): a deeply nested list raised RecursionError
    (a traceback), a list repeating one long string could take gigabytes. Only ints and strings are
    shown; anything else is '?'."""
    levels = 5000
    deep_list = b"]" * levels + b"a" * (levels - 1)
    frame = _dict(_str("filename"), _str("/home/u/x.py"), _str("name"), _str("f"), _str("line"), deep_list)
    entry = _dict(_str("action"), _str("alloc"), _str("addr"), b"K\x01", _str("size"), b"K\x02",
                  _str("frames"), b"]" + frame + b"a")
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(P4 + _dict(_str("segments"), b"]", _str("device_traces"), b"]]" + entry + b"aa") + b".")
    cmd = [str(BRANCHSCOPE)] if BRANCHSCOPE.exists() else [sys.executable, "-m", "branchscope.app.cli"]
    proc = subprocess.run(cmd + ["memory", "--json", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    assert json.loads(proc.stdout)["devices"][0]["at_peak"][0]["where"] == "/home/u/x.py:?:f"


# ---- what the memo repeats: cheap in the file, read again and again once unpickled ---------


def _snapshot(traces: bytes) -> bytes:
    """A snapshot without segments whose `device_traces` is pickled as `traces`."""
    return P4 + _dict(_str("segments"), b"]", _str("device_traces"), traces) + b"."


def _entry(frames: bytes, line: int = 1) -> bytes:
    """An allocation whose `frames` is pickled as `frames`."""
    return _dict(_str("action"), _str("alloc"), _str("addr"), b"J" + struct.pack("<i", line), _str("size"), b"K\x02",
                 _str("frames"), frames)


def _frame(filename: bytes, line: int) -> bytes:
    return _dict(_str("filename"), filename, _str("line"), b"J" + struct.pack("<i", line), _str("name"), _str("f"))


TORCH_FILE = "/site-packages/torch/nn/module.py"

REPEATED: dict[str, Callable[[], bytes]] = {
    # One entry, pickled once and referenced two million times (two bytes each).
    "one entry repeated": lambda: _snapshot(b"]](" + _entry(b"]") + b"\x94" + b"h\x00" * 1_999_999 + b"ea"),
    # One trace for 100,000 devices: each device is a series of its own.
    "one trace for 100,000 devices": lambda: _snapshot(b"](]" + _entry(b"]") + b"a\x94" + b"h\x00" * 99_999 + b"e"),
}
SHARED: dict[str, Callable[[], bytes]] = {
    # 130,000 entries (memo 1) whose frames are one list of a million references to a frame of
    # torch's (memo 0): each entry read the whole list for a frame outside torch (hours).
    "shared frames": lambda: _snapshot(
        b"]](" + _entry(b"](" + _frame(_str(TORCH_FILE), 7) + b"\x94" + b"h\x00" * 999_999 + b"e") + b"\x94"
        + b"h\x01" * 129_999 + b"ea"
    ),
    # A filename of 2 MiB (memo 0) in 20,000 frames of different lines: each site held all of it.
    "long filename": lambda: P4 + b"X" + _u32(2 * MIB) + b"a" * (2 * MIB - 3) + b".py\x94" + b"0" + _snapshot(
        b"]](" + b"".join(_entry(b"]" + _frame(b"h\x00", line) + b"a", line) for line in range(20_000)) + b"ea"
    ).removeprefix(P4),
}


@pytest.mark.parametrize("case", list(REPEATED))
def test_what_the_memo_repeats_is_refused_in_bounded_memory(tmp_path: Path, case: str) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(REPEATED[case]())
    proc, outcome = limited_cli(tmp_path, "memory", str(path))
    assert assert_refused(proc, outcome, path).startswith("malformed snapshot: ")
    assert outcome["growth_mib"] < bound_mib(path.stat().st_size), outcome


@pytest.mark.parametrize("case", list(SHARED))
def test_what_the_memo_shares_is_read_once(tmp_path: Path, case: str) -> None:
    """A frames list shared by many entries is read once (it was read for each), and a site holds
    256 characters of a filename at most (each held all of a filename that frames shared)."""
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(SHARED[case]())
    proc, outcome = limited_cli(tmp_path, "memory", "--json", str(path))
    assert outcome["rc"] == 0 and proc.stderr == "", proc.stderr[-3000:]
    assert outcome["growth_mib"] < bound_mib(path.stat().st_size), outcome
    # what the peak holds, by site (the 130,000 allocations of "shared frames" share one address:
    # each but the last was freed unseen, and the rest of the running total is said as such)
    wheres = [x["where"] for x in json.loads(proc.stdout)["devices"][0]["at_peak"]]
    if case == "shared frames":
        assert f"{TORCH_FILE}:7:f" in wheres and set(wheres) <= {f"{TORCH_FILE}:7:f", UNEXPLAINED}
    else:
        sites = [w for w in wheres if w != UNEXPLAINED]
        assert sites and all(len(w) < 300 and w.startswith("aaa") and w.endswith(":f") for w in sites)


# ---- the unpickler against pickle's own ------------------------------------------------------

def plain(protocol: int) -> st.SearchStrategy[Any]:
    """Plain data that pickle writes without a global in `protocol`: bytes from protocol 3 on, sets
    from 4 on (before, both are calls: `_codecs.encode`, `builtins.set`)."""
    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    keys = st.text(max_size=8) | st.integers(-(1 << 60), 1 << 60)
    if protocol >= 3:
        leaves |= st.binary()
    if protocol >= 4:
        leaves |= st.sets(keys, max_size=5) | st.frozensets(keys, max_size=5)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner)
        | st.tuples(inner, inner, inner, inner) | st.dictionaries(keys, inner, max_size=6),
        max_leaves=40,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 5).flatmap(lambda protocol: st.tuples(plain(protocol), st.just(protocol))))
def test_plain_data_reads_as_pickle_reads_it(case: tuple[Any, int]) -> None:
    obj, protocol = case
    data = pickle.dumps(obj, protocol=protocol)
    assert unpickle(data, 1 << 30) == pickle.loads(data)
    shared = [obj, obj, {"a": obj}]  # memo references
    data = pickle.dumps(shared, protocol=protocol)
    got = unpickle(data, 1 << 30)
    assert got == pickle.loads(data)
    if obj is None or isinstance(obj, (list, dict, tuple, str, bytes, set, frozenset)):  # memoized, so shared
        assert got[0] is got[1] and got[2]["a"] is got[0]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_snapshot_of_each_protocol(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(two_gpu_snapshot(), protocol=protocol))
    assert [m.total_bytes.tolist() for m in load_snapshot(path).memory] == [[1536, 5632, 1536, 512], [1024, 0]]


@pytest.mark.parametrize(
    "content, needle",
    [
        (P4 + b"\x8c\x05posix\x8c\x06system\x93.", "refused global posix.system"),
        (b"\x80\x02cposix\nsystem\n.", "refused global posix.system"),
        (P4 + b"\x8c\x03a\nb\x8c\x01c\x93.", "refused global"),  # still one line
        (P4 + b"N)R.", "refused opcode REDUCE"),
        (P4 + b"}}b.", "refused opcode BUILD"),
        (P4 + b"\x82\x01.", "refused opcode EXT1"),
        (P4 + b"Pid\n.", "refused opcode PERSID"),
        (P5 + b"\x97.", "refused opcode NEXT_BUFFER"),
        (P4 + b"I12\n.", "refused opcode INT"),
        (P4 + b"\xff.", "unknown opcode 0xff"),
        (P4 + b"a.", "stack underflow"),
        (P4 + b"N(a.", "stack underflow"),  # APPEND cannot reach below a mark
        (P4 + b"h\x05.", "memo"),
        (P4 + b"Nq\x03h\x01.", "memo"),  # a hole left by an index past the end
        (b"\x80\x06N.", "protocol 6"),
        (P4 + b"N", "truncated"),
        (P4 + b"\x8c\x05ab", "truncated"),
        (P4 + b"}]Ns.", "key"),
        (P4 + b"}\x8f\x8f\x8fu.", "MARK"),
        (P4 + b"}(NNNu.", "odd"),
        (P4 + b"\x8f(]\x90.", "key"),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as info:
        load_snapshot(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: not a memory snapshot: ")
    assert needle in message.removeprefix(f"{path}: "), message


def test_the_densest_real_shape_is_far_below_the_bound() -> None:
    """Segments whose blocks have no frames take the most memory a byte that snapshots do (about
    11x once unpickled, counted 16x): they must load with room to spare under the bound of 32x."""
    segments = [
        {"device": 0, "address": (1 << 40) + i << 26, "total_size": 1 << 26, "allocated_size": 1 << 25,
         "active_size": 1 << 25, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
         "blocks": [{"address": ((1 << 40) + i << 26) + j * 4096, "size": 4096 + j, "requested_size": 4000 + j,
                     "state": "active_allocated", "frames": []} for j in range(40)]}
        for i in range(300)
    ]
    data = pickle.dumps({"segments": segments, "device_traces": [[]]}, protocol=4)
    assert unpickle(data, 20 * len(data)) == pickle.loads(data)


def test_memo_index_past_the_end_reads_when_it_is_filled(tmp_path: Path) -> None:
    """Pickle writes its memo from 0 on, one index after the other; an index past the end leaves a
    hole, charged to the bound, that is an error only when read."""
    data = P4 + b"\x8c\x01xq\x03\x8c\x01yq\x01h\x03h\x01\x87."
    assert load_via_unpickle(data) == pickle.loads(data) == ("y", "x", "y")


def load_via_unpickle(data: bytes) -> Any:
    return unpickle(data, 1 << 30)


# ---- random input ---------------------------------------------------------------------------

VALID = pickle.dumps(two_gpu_snapshot(), protocol=4)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        if kind == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 9))]
        elif kind == "truncate":
            del data[at:]
        else:
            start = draw(st.integers(0, len(VALID)))
            data[at:at] = VALID[start:start + draw(st.integers(1, 64))]
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(mutated(), st.binary(max_size=64).map(lambda b: P4 + b), st.binary(max_size=64)))
def test_random_and_mutated_pickles_load_or_are_one_line_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "random.pickle"
    path.write_bytes(content)
    try:
        load_snapshot(path)
    except TraceFormatError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
