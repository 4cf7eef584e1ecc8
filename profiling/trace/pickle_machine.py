"""The state of `plain_pickle.unpickle`'s stack machine (`Machine`) and what it counts for what it
builds, bytes of memory by CPython's sizes, so that a pickle is refused before it takes more than
its caller allows; and the keys it lets into a dict or a set (`check_key`).
"""

from __future__ import annotations

import itertools
import pickletools
import sys
from typing import Any

from branchscope.profiling.trace.text import _mib


class Refused(Exception):
    """Why `unpickle` does not read a pickle: one line."""


# What `unpickle` counts for what it builds (bytes, CPython 3.11, 64-bit): a stack slot for each
# object pushed, plus the object when it is new (what pymalloc gives it: sizes round up to 16);
# new strings, bytes and containers, and what a container grows by, by sys.getsizeof.
PUSH = 9  # 8, and the list's spare room
INT = 32 + PUSH
FLOAT = 32 + PUSH
MEMO = 10  # a memo slot, with the list's spare room
MARK = 8  # a mark's position in the list of marks...
MARK_INT = 32  # ...and the int that holds it, past the small ints Python keeps
TUPLE = 40 + PUSH  # an empty tuple's size: each item adds 8
#: What an item taken into a new container may cost at most, checked before the container is made.
ITEM = 48
#: sys.getsizeof of the empty dict, list and set that SETITEMS, APPENDS and ADDITEMS fill.
EMPTY_DICT, EMPTY_LIST, EMPTY_SET = sys.getsizeof({}), sys.getsizeof([]), sys.getsizeof(set())


#: What a new empty dict, list and set take: their size rounded up to pymalloc's 16 bytes, and a slot.
NEW_DICT, NEW_LIST, NEW_SET = (((size + 15) & ~15) + PUSH for size in (EMPTY_DICT, EMPTY_LIST, EMPTY_SET))


#: A memo slot that an index past the end skipped: an error when read.
HOLE: Any = object()
#: hash(n) == n for integers nearer 0 than this; larger ones (and tuples, hashed from their items)
#: can be made to collide, and a dict of colliding keys takes quadratic time to build.
HASH_SAFE = (1 << 61) - 1
KEY_TYPES = frozenset({str, bytes, float, bool, type(None)})
#: Opcodes by name, for messages.
OPCODE_NAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}


class Machine:
    """The unpickler's state: the data, the stack, its marks, the memo and the bytes counted so far.
    `fence` is the position of the innermost mark: what lies below it is out of reach."""

    __slots__ = (
        "data", "view", "end", "limit", "limit_is", "stack", "marks", "fence", "memo", "holes", "cost", "result",
    )  # fmt: skip

    def __init__(self, data: bytes, limit: int, limit_is: str) -> None:
        self.data = data
        self.view = memoryview(data)
        self.end = len(data)
        self.limit = limit
        self.limit_is = limit_is
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.fence = 0
        self.memo: list[Any] = []
        self.holes = 0
        self.cost = 0
        self.result: Any = None

    def too_big(self, what: str = "unpickling it") -> Refused:
        said = f", {self.limit_is}" if self.limit_is else ""
        return Refused(f"{what} would take more than {_mib(self.limit)} of memory{said}")

    def check_room(self, more: int) -> None:
        """Refuse before building what would take the count past the limit."""
        if self.cost + more > self.limit:
            raise self.too_big()

    def need(self, n: int) -> None:
        """Refuse when fewer than `n` items lie above the innermost mark."""
        if len(self.stack) - n < self.fence:
            raise Refused("stack underflow")

    def length(self, pos: int, n: int) -> None:
        """Refuse a declared length `n` at `pos` that runs past the end of the data."""
        if n > self.end - pos:
            raise Refused("pickle data was truncated")

    def pop_mark(self, op: int) -> int:
        """The innermost mark's position, taken off the marks (MARK's items lie above it)."""
        if not self.marks:
            raise Refused(f"{OPCODE_NAMES[op]} without a MARK")
        mark = self.marks.pop()
        self.fence = self.marks[-1] if self.marks else 0
        return mark

    def items_above(self, mark: int) -> list[Any]:
        """The items above `mark`, taken off the stack, once the room for a container of them is checked."""
        items = self.stack[mark:]
        del self.stack[mark:]
        self.check_room(ITEM * len(items))
        return items

    def push(self, value: Any, cost: int) -> None:
        self.stack.append(value)
        self.cost += cost


def check_key(key: Any) -> None:
    """Refuse a dict key or set item that is not a string or a number that hashes as itself."""
    kind = key.__class__
    if kind is int:
        if -HASH_SAFE < key < HASH_SAFE:
            return
        raise Refused("a dict key or set item that is an integer of 61 bits or more: a snapshot's keys are strings")
    if kind not in KEY_TYPES:
        raise Refused(f"a dict key or set item of type {kind.__name__}: a snapshot's keys are strings")


def put(memo: list[Any], index: int, value: Any, holes: int) -> int:
    """Store `value` at `index` of the memo, holes up to it; the number of holes after."""
    have = len(memo)
    if index < have:
        if memo[index] is HOLE:
            holes -= 1
        memo[index] = value
    else:
        if index > have:
            memo.extend(itertools.repeat(HOLE, index - have))
            holes += index - have
        memo.append(value)
    return holes
