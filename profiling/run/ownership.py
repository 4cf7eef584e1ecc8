"""Which branch each module call of the model's own forward belongs to, so that a branch is timed
and marked by what it owns: its own graph nodes, per call, in however many pieces the forward runs it.

A branch is a set of graph nodes (`branches.Branch.nodes`). The model's own forward runs those
nodes in graph order, inside calls of the model's modules, and every node's `nn_module_stack`
(torch.fx and torch.export both record it) names the calls it runs in, one key per call: `enc` for
the first call of `enc`, `enc@1` for its second. So:

- A **piece** of a branch is a maximal run of consecutive compute nodes (graph order) that the
  branch holds: one piece for a branch the forward runs in one go, several where the forward
  interleaves it with other branches (CrossViT's two scales, computed block by block).
- A piece **opens** at the forward pre-hook of the outermost call that starts at the piece's first
  node that starts a call, and **closes** at the forward hook of the outermost call that ends at its
  last node that ends one.
- A module called more than once a step (one encoder on two inputs, an embedding tied under two
  paths, a module shared across blocks) is told apart by the call's number: hooks on the module
  object count its calls in the step, and the n-th call is the n-th of that object's calls in the
  graph, whichever path named it. A call of a shared module therefore belongs to the branch whose
  node made it, and each branch is counted once per call of its region.

What it cannot see: ops of a piece before its first module call starts or after its last one ends
(a function at the piece's edge, outside any module call of the piece), and a piece that holds no
module call at all (a branch of plain functions on parameters); what is not seen stays in the
serial part, which only lowers the bound. A step whose module calls do not match the graph's (a
module called more or fewer times than the graph has it: the forward took another path) is
*unmatched* (`PieceHooks.unmatched_steps`): its attribution is not to be trusted.

The hooks (`PieceHooks`) call `on_open(piece)` and `on_close(piece)` at each piece's ends: the
sequential plan opens and closes a `branch: NAME` range there (`plans.annotate_branches_with_hooks`),
the branch timing reads a clock (`branch_timing.measure_branch_times`). Imports torch only through the
graph it is given (worker only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: A call of a module object in a step: (the object's index in `CallMap.modules`, its call number).
Call = tuple[int, int]


@dataclass(frozen=True)
class Piece:
    """One stretch of a branch in the forward: where it opens and closes, and the branch's nesting
    depth (a nested branch's piece lies inside its parent's: parents open first and close last)."""

    branch: str
    depth: int
    opens: Call
    closes: Call
    #: The piece's number in `CallMap.pieces` (a key for whoever pairs opens with closes).
    index: int = 0


@dataclass
class CallMap:
    """The pieces of every branch, and the module objects whose calls mark them."""

    #: The module objects hooked, by index (`Call[0]`).
    modules: list[Any] = field(default_factory=list)
    #: How many calls of each object one step of the graph makes.
    calls_per_step: list[int] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    #: Branches no piece of which could be marked (no module call of their own).
    unseen: list[str] = field(default_factory=list)

    def pieces_of(self, branch: str) -> list[Piece]:
        return [p for p in self.pieces if p.branch == branch]


@dataclass
class _CallInfo:
    key: str
    path: str
    first: int
    last: int


def _stack_keys(node: Any) -> list[tuple[str, str]]:
    """(call key, module path) of every call `node` runs in, outermost first; the root ('') left out."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for key, value in stack.items():
        path = value[0] if isinstance(value, tuple) and value else ""
        if isinstance(path, str) and path:
            out.append((str(key), path))
    if node.op == "call_module" and not any(p == str(node.target) for _, p in out):
        out.append((f"{node.target}#node:{node.name}", str(node.target)))  # a leaf call the stack left out
    return out


def call_map(model: Any, analysis: Any) -> CallMap:
    """The pieces of every branch of `analysis` (a `branches.BranchAnalysis`) in `model`'s own
    forward (see the module docstring); an empty map without a graph."""
    from branchscope.profiling.run.branches import compute_nodes

    gm = analysis.graph_module
    if gm is None:
        return CallMap()
    nodes = compute_nodes(gm)
    calls: dict[str, _CallInfo] = {}
    for i, node in enumerate(nodes):
        for key, path in _stack_keys(node):
            info = calls.get(key)
            if info is None:
                calls[key] = _CallInfo(key, path, i, i)
            else:
                info.last = i
    # Number each object's calls in graph order, whichever path names it (a tied module has two).
    objects: dict[int, int] = {}
    modules: list[Any] = []
    by_object: dict[int, list[_CallInfo]] = {}
    for info in sorted(calls.values(), key=lambda c: c.first):
        try:
            module = model.get_submodule(info.path)
        except AttributeError:
            continue
        o = objects.setdefault(id(module), len(modules))
        if o == len(modules):
            modules.append(module)
        by_object.setdefault(o, []).append(info)
    numbered: dict[str, Call] = {}
    for o, infos in by_object.items():
        for n, info in enumerate(infos):
            numbered[info.key] = (o, n)
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for i, node in enumerate(nodes):
        for key, _path in _stack_keys(node):  # outermost first
            if key not in numbered:
                continue
            if calls[key].first == i:
                starts.setdefault(i, []).append(key)
            if calls[key].last == i:
                ends.setdefault(i, []).append(key)
    index = {n: i for i, n in enumerate(nodes)}
    result = CallMap(modules=modules, calls_per_step=[len(by_object[o]) for o in range(len(modules))])
    for region, branch, _parent in analysis.walk():
        found = False
        for lo, hi in _runs(sorted(index[n] for n in branch.nodes if n in index)):
            opener = next((starts[i][0] for i in range(lo, hi + 1) if i in starts), None)
            closer_at = next((i for i in range(hi, lo - 1, -1) if i in ends), None)
            if opener is None or closer_at is None or calls[opener].first > closer_at:
                continue
            closer = ends[closer_at][0]
            result.pieces.append(Piece(branch.name, region.depth, numbered[opener], numbered[closer], len(result.pieces)))
            found = True
        if not found:
            result.unseen.append(branch.name)
    return result


def _runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """The maximal runs of consecutive integers in sorted `indices`, as (first, last)."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


class PieceHooks:
    """Hooks on the model's modules that call `on_open(piece)` and `on_close(piece)` at each
    piece's ends, step by step (a forward pre-hook on the model starts a step's count of calls, its
    forward hook checks the count against the graph's). Use as a context manager, or `remove()`."""

    def __init__(
        self,
        model: Any,
        calls: CallMap,
        on_open: Callable[[Piece], None],
        on_close: Callable[[Piece], None],
    ) -> None:
        self.calls = calls
        self.steps = 0
        #: Steps whose module calls did not match the graph's (see the module docstring).
        self.unmatched_steps = 0
        self._count = [0] * len(calls.modules)
        self._stacks: list[list[int]] = [[] for _ in calls.modules]
        opens: dict[Call, list[Piece]] = {}
        closes: dict[Call, list[Piece]] = {}
        for p in calls.pieces:
            opens.setdefault(p.opens, []).append(p)
            closes.setdefault(p.closes, []).append(p)
        for ps in opens.values():
            ps.sort(key=lambda p: p.depth)  # parents open first
        for ps in closes.values():
            ps.sort(key=lambda p: -p.depth)  # and close last
        self._handles: list[Any] = []
        hooked = {c[0] for c in (*opens, *closes)}
        for o in sorted(hooked):
            module = calls.modules[o]
            self._handles.append(module.register_forward_pre_hook(self._pre(o, opens, on_open)))
            self._handles.append(module.register_forward_hook(self._post(o, closes, on_close)))
        self._hooked = sorted(hooked)
        if self._handles:
            self._handles.append(model.register_forward_pre_hook(lambda _m, _a: self._start_step()))
            self._handles.append(model.register_forward_hook(lambda _m, _a, _o: self._end_step()))

    @property
    def active(self) -> bool:
        """Whether any piece is marked (no hooks otherwise)."""
        return bool(self._handles)

    def _start_step(self) -> None:
        self._count = [0] * len(self._count)
        for s in self._stacks:
            s.clear()

    def _end_step(self) -> None:
        self.steps += 1
        if any(self._count[o] != self.calls.calls_per_step[o] for o in self._hooked):
            self.unmatched_steps += 1

    def _pre(self, o: int, opens: dict[Call, list[Piece]], on_open: Callable[[Piece], None]) -> Any:
        def pre(_module: Any, _args: Any) -> None:
            n = self._count[o]
            self._count[o] = n + 1
            self._stacks[o].append(n)
            for piece in opens.get((o, n), ()):
                on_open(piece)

        return pre

    def _post(self, o: int, closes: dict[Call, list[Piece]], on_close: Callable[[Piece], None]) -> Any:
        def post(_module: Any, _args: Any, _out: Any) -> None:
            stack = self._stacks[o]
            if not stack:
                return
            for piece in closes.get((o, stack.pop()), ()):
                on_close(piece)

        return post

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> PieceHooks:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.remove()
