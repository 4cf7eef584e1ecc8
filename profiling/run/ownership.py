"""Which branch each module call of the model's own forward belongs to, so that a branch is timed
and marked by what it owns: its own graph nodes, per call, in however many pieces the forward runs it.

A branch is a set of graph nodes (`branches.Branch.nodes`). The model's own forward runs those
nodes in graph order, inside calls of the model's modules, and every node's `nn_module_stack`
(torch.fx and torch.export both record it) names the calls it runs in, one key per call: `enc` for
the first call of `enc`, `enc@1` for its second. So:

- A **piece** of a branch is a maximal run of consecutive compute nodes (graph order) that the
  branch holds: one piece for a branch the forward runs in one go, several where the forward
  interleaves it with other branches (CrossViT's two scales, computed block by block).
- A piece **opens** at a hook that fires between the node before it and its first node, and
  **closes** at one that fires between its last node and the node after it: the forward pre-hook of
  a module call starting there, or the forward hook of one ending there (the model's own hooks
  stand for the step's first and last node). Where no hook fires at an edge, the piece opens or
  closes at the nearest hook inside it.
- A module called more than once a step (one encoder on two inputs, an embedding tied under two
  paths, a module shared across blocks) is told apart by the call's number: hooks on the module
  object count its calls in the step, and the n-th call is the n-th of that object's calls in the
  graph, whichever path named it. A call of a shared module therefore belongs to the branch whose
  node made it, and each branch is counted once per call of its region.

What it cannot see: the ops at a piece's edge where no hook fires (a function between two
functions of another branch: the piece's own hooks inside it bound what is timed), and a piece
between whose edges no hook fires at all (a branch of functions on parameters beside another such
branch); what is not seen stays in the serial part, which only lowers the bound. A step whose module
calls do not match the graph's (a module called more or fewer times than the graph has it: the
forward took another path) is *unmatched* (`PieceHooks.unmatched_steps`): its attribution is not to
be trusted.

The hooks (`PieceHooks`) call `on_open(piece)` and `on_close(piece)` at each piece's ends: the
sequential plan opens and closes a `branch: NAME` range there (`plans.annotate_branches_with_hooks`),
the branch timing reads a clock (`branch_timing.measure_branch_times`). Imports torch only through the
graph it is given (worker only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: A call of a module object in a step: (the object's index in `CallMap.modules`, its call number);
#: `ROOT` for the model's own call (the step).
Call = tuple[int, int]
ROOT: Call = (-1, 0)
#: A hook firing: a call, and whether it is the call's start (`PRE`: its forward pre-hook) or end
#: (`POST`: its forward hook).
PRE, POST = 0, 1
Hook = tuple[int, int, int]


@dataclass(frozen=True)
class Piece:
    """One stretch of a branch in the forward: the hooks where it opens and closes, and the branch's
    nesting depth (a nested branch's piece lies inside its parent's: parents open first and close
    last; at one hook, pieces close before others open)."""

    branch: str
    depth: int
    opens: Hook
    closes: Hook
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
    #: Branches no piece of which could be marked (no hook fires at or inside any of their pieces).
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
    from branchscope.profiling.run.graph_nodes import compute_nodes

    gm = analysis.graph_module
    if gm is None:
        return CallMap()
    nodes = compute_nodes(gm)
    stacks = [_stack_keys(node) for node in nodes]
    calls: dict[str, _CallInfo] = {}
    for i, stack in enumerate(stacks):
        for key, path in stack:
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
    numbered: dict[str, Call] = {key: (o, n) for o, infos in by_object.items() for n, key in enumerate(i.key for i in infos)}
    at = _hook_places(stacks, calls, numbered)
    index = {n: i for i, n in enumerate(nodes)}
    result = CallMap(modules=modules, calls_per_step=[len(by_object[o]) for o in range(len(modules))])
    for region, branch, _parent in analysis.walk():
        found = False
        for lo, hi in _runs(sorted(index[n] for n in branch.nodes if n in index)):
            # The earliest hook at or after the piece's start, the latest at or before its end,
            # with at least one node between.
            opening = next((p for p in range(2 * lo - 1, 2 * hi) if p in at), None)
            closing = next((p for p in range(2 * hi + 1, 2 * lo, -1) if p in at), None)
            if opening is None or closing is None or closing - opening < 2:
                continue
            opens, closes = _opening(at[opening]), _closing(at[closing])
            result.pieces.append(Piece(branch.name, region.depth, opens, closes, len(result.pieces)))
            found = True
        if not found:
            result.unseen.append(branch.name)
    return result


def _hook_places(stacks: list[list[tuple[str, str]]], calls: dict[str, _CallInfo], numbered: dict[str, Call]) -> dict[int, list[Hook]]:
    """Where each hook fires, in graph order, by place: a call's start just before its first node
    (place 2·first − 1), its end just after its last (2·last + 1), the model's own call around them
    all. At one place the ends fire first (innermost first), then the starts (outermost first)."""
    starts: dict[int, list[Hook]] = {}
    ends: dict[int, list[Hook]] = {}
    for i, stack in enumerate(stacks):
        for key, _path in stack:  # outermost first
            if key not in numbered:
                continue
            if calls[key].first == i:
                starts.setdefault(2 * i - 1, []).append((*numbered[key], PRE))
            if calls[key].last == i:
                ends.setdefault(2 * i + 1, []).insert(0, (*numbered[key], POST))
    at: dict[int, list[Hook]] = {-1: [(*ROOT, PRE)]}
    for place in {*starts, *ends}:
        at[place] = [*ends.get(place, []), *starts.get(place, [])]
    at.setdefault(2 * len(stacks) - 1, []).append((*ROOT, POST))
    return at


def _opening(hooks: list[Hook]) -> Hook:
    """Of the hooks firing at one place, where a piece starting there opens: the first start (the
    outermost call's, its entry included), else the last end."""
    return next((h for h in hooks if h[2] == PRE), hooks[-1])


def _closing(hooks: list[Hook]) -> Hook:
    """Of the hooks firing at one place, where a piece ending there closes: the last end (the
    outermost call's, its return included), else the first start."""
    return next((h for h in reversed(hooks) if h[2] == POST), hooks[0])


def _runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """The maximal runs of consecutive integers in sorted `indices`, as (first, last)."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def piece_hooks(
    model: Any, analysis: Any, on_open: Callable[[Piece], None], on_close: Callable[[Piece], None]
) -> PieceHooks | None:
    """`PieceHooks` on the pieces of `analysis`'s branches in `model`'s own forward; None for a model
    whose forward takes no module hooks (a TorchScript module). Imports torch (worker only)."""
    import torch

    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return None
    return PieceHooks(model, call_map(model, analysis), on_open, on_close)


class PieceHooks:
    """Hooks on the model and its modules that call `on_close(piece)` and `on_open(piece)` at each
    piece's ends, step by step (the model's forward pre-hook starts a step's count of calls, its
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
        self._on_open, self._on_close = on_open, on_close
        self._count = [0] * len(calls.modules)
        self._stacks: list[list[int]] = [[] for _ in calls.modules]
        # What each hook does: the pieces it closes (children first), then those it opens (parents first).
        self._actions: dict[Hook, tuple[list[Piece], list[Piece]]] = {}
        for p in calls.pieces:
            self._actions.setdefault(p.closes, ([], []))[0].append(p)
            self._actions.setdefault(p.opens, ([], []))[1].append(p)
        for closing, opening in self._actions.values():
            closing.sort(key=lambda p: -p.depth)
            opening.sort(key=lambda p: p.depth)
        self._hooked = sorted({h[0] for h in self._actions} - {ROOT[0]})
        self._handles: list[Any] = []
        if not self._actions:
            return
        for o in self._hooked:
            module = calls.modules[o]
            self._handles.append(module.register_forward_pre_hook(self._pre(o)))
            self._handles.append(module.register_forward_hook(self._post(o)))
        self._handles.append(model.register_forward_pre_hook(lambda _m, _a: self._start_step()))
        self._handles.append(model.register_forward_hook(lambda _m, _a, _o: self._end_step()))

    @property
    def active(self) -> bool:
        """Whether any piece is marked (no hooks otherwise)."""
        return bool(self._handles)

    def _fire(self, hook: Hook) -> None:
        action = self._actions.get(hook)
        if action is None:
            return
        for piece in action[0]:
            self._on_close(piece)
        for piece in action[1]:
            self._on_open(piece)

    def _start_step(self) -> None:
        self._count = [0] * len(self._count)
        for s in self._stacks:
            s.clear()
        self._fire((*ROOT, PRE))

    def _end_step(self) -> None:
        self._fire((*ROOT, POST))
        self.steps += 1
        if any(self._count[o] != self.calls.calls_per_step[o] for o in self._hooked):
            self.unmatched_steps += 1

    def _pre(self, o: int) -> Any:
        def pre(_module: Any, _args: Any) -> None:
            n = self._count[o]
            self._count[o] = n + 1
            self._stacks[o].append(n)
            self._fire((o, n, PRE))

        return pre

    def _post(self, o: int) -> Any:
        def post(_module: Any, _args: Any, _out: Any) -> None:
            stack = self._stacks[o]
            if stack:
                self._fire((o, stack.pop(), POST))

        return post

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> PieceHooks:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.remove()
