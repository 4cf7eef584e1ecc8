"""Finding a model's parallel branches in its graph: fork-join regions, nested regions, two-tower inputs.

The graph comes from the first tracer that succeeds: `torch.fx.symbolic_trace` (a graph of the model's
own modules and functions), then `torch.export` non-strict and strict (a graph of ATen ops, each node
carrying the module path it ran in, `nn_module_stack`), which takes most models fx cannot, such as
Hugging Face transformers. `BranchAnalysis.tracer` says which one found the graph, and
`tracer_errors` why the ones before it failed.

A *region* is a place where independent work could run at the same time: two or more *branches*
(chains of graph nodes) that read values computed before the region and share nothing with one
another until their results meet again (a `cat`, an `add`, the model's output). Branches may start
from one value (Inception: four branches read `x`) or from different inputs (a two-tower model), and
a branch may hold regions of its own (each bidirectional member of an LSTM ensemble runs its forward
and backward LSTMs side by side).

How regions are found, for one scope (the whole graph, then each branch in turn):

* A *root* is either one value with two or more users in the scope, or the scope's inputs as a whole
  (the values it reads from outside, which is how two towers fed by different inputs are found).
* Walking the nodes in graph order, every node whose in-scope inputs all come from the root starts a
  chain; a node whose inputs come from one chain joins it; a node reading two or more chains that do
  real work *merges* them (chains doing only bookkeeping such as `x.size(0)` are absorbed instead).
* The last merge is the region: its chains are the branches and the merge node is the join. Chains
  that merged earlier without doing anything after the merge (`a + b + c + d` written as a chain of
  adds at the same module level) are lifted into the region, so an ensemble summed pairwise still has
  one branch per member.
* The branches' nodes are then searched in the same way for regions nested inside them.

Names say where things are in the model (`_name_regions`): a branch by the module paths it owns in
full, down to the component that tells it apart (`transition1.0 → stage2.0.branches.0`), else by its
functions under the module they ran in (`Mixed_6a: max_pool2d`); a region by the module path its
branches share (`Mixed_6a`), else by its fork. Branch names are unique and ASCII but for " → ", as
the `branch: NAME` labels of the trace need.

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import re
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from branchscope.profiling.run.folder import names_text

FX = "torch.fx"
EXPORT_NON_STRICT = "torch.export (non-strict)"
EXPORT_STRICT = "torch.export (strict)"
#: The tracers find_branches tries, in order.
TRACERS = (FX, EXPORT_NON_STRICT, EXPORT_STRICT)

#: Functions and methods that only reshape, index or describe a value: a chain made of them alone is
#: bookkeeping, not work worth a thread.
_BOOKKEEPING = {
    "getitem",
    "getattr",
    "size",
    "dim",
    "numel",
    "view",
    "view_as",
    "reshape",
    "flatten",
    "unflatten",
    "unsqueeze",
    "squeeze",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "contiguous",
    "chunk",
    "split",
    "unbind",
    "narrow",
    "select",
    "detach",
    "type_as",
    "to",
    "float",
    "half",
    "int",
    "long",
    "len",
    # ATen names of the same (graphs from torch.export), and dropout, which is the identity in eval mode
    "slice",
    "alias",
    "_unsafe_view",
    "dropout",
    "feature_dropout",
    "lift_fresh_copy",
}
#: Tensors of these dtypes are indices and masks (positions, attention masks): bookkeeping, not work.
_INDEX_DTYPES = (torch.bool, torch.int32, torch.int64)
_PASSIVE_MODULES = (torch.nn.Identity, torch.nn.Dropout, torch.nn.Flatten, torch.nn.Unflatten)


@dataclass
class Branch:
    """One chain of a region: its nodes in graph order (nested regions' nodes included)."""

    name: str
    nodes: list[fx.Node]
    regions: list[Region] = field(default_factory=list)

    @property
    def ops(self) -> int:
        return len(self.nodes)


@dataclass
class Region:
    """Branches that can run at the same time. `id` is "1", "2"... at the top, "1.1" nested in region 1."""

    id: str
    #: The value the branches start from (an fx node name), or "inputs" when they start from the
    #: scope's inputs (e.g. the two towers of a two-input model).
    fork: str
    #: The node(s) where the branches meet again ("output" when that is the model's output).
    join: str
    branches: list[Branch]
    depth: int
    #: Where it is in the model: the module path its branches share (`Mixed_6a`), else its fork.
    name: str = ""


@dataclass
class BranchAnalysis:
    """Result of branch discovery. `graph_module` is None when no tracer could trace; `fx_error` says why."""

    graph_module: fx.GraphModule | None
    regions: list[Region]
    #: Why there is no graph at all (None when a tracer found one).
    fx_error: str | None = None
    #: TorchScript type of each node's value from one example run (e.g. "Tensor", "List[int]").
    value_types: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The tracer that found the graph (one of TRACERS), None when none did.
    tracer: str | None = None
    #: Why each tracer tried before (or instead of) it failed: {tracer: one line}.
    tracer_errors: dict[str, str] = field(default_factory=dict)
    #: For a graph from torch.export: how (args, kwargs) flatten into the graph's inputs and how its
    #: flat outputs nest back into the model's output (torch.utils._pytree specs); None for torch.fx.
    in_spec: Any = None
    out_spec: Any = None
    #: What could have been branches and was left out, and why (assertions, scalar work, branches
    #: too small beside the others of their region), in graph order.
    left_out: list[LeftOut] = field(default_factory=list)
    #: Seconds each tracer tried took, whether it found the graph or failed: {tracer: s}, in order.
    tracer_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def exported(self) -> bool:
        return self.in_spec is not None

    def graph_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The graph's placeholder values for a call `model(*args, **kwargs)`."""
        assert self.graph_module is not None
        return graph_inputs(self.graph_module, self.in_spec, args, kwargs)

    def walk(self) -> list[tuple[Region, Branch, str | None]]:
        """Every (region, branch, name of the enclosing branch or None) in pre-order."""
        out: list[tuple[Region, Branch, str | None]] = []

        def visit(regions: list[Region], parent: str | None) -> None:
            for region in regions:
                for branch in region.branches:
                    out.append((region, branch, parent))
                for branch in region.branches:
                    visit(branch.regions, branch.name)

        visit(self.regions, None)
        return out

    def to_json(self) -> list[dict[str, Any]]:
        """The `branches` list of run.json and of the trace's `branchscope` object."""
        return [
            {
                "name": branch.name,
                "region": region.id,
                "region_name": region.name,
                "ops": branch.ops,
                "fork": region.fork,
                "join": region.join,
                "depth": region.depth,
                "parent": parent,
            }
            for region, branch, parent in self.walk()
        ]


# ---------------------------------------------------------------- node classification


def _op_name(node: fx.Node) -> str:
    """`add_` for `x.add_(y)`, `torch.add_` and ATen's `aten.add_.Tensor` alike."""
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        if isinstance(node.target, torch._ops.OpOverload):
            return node.target.overloadpacket.__name__
        return getattr(node.target, "__name__", str(node.target))
    return node.op


def is_check(node: fx.Node) -> bool:
    """A node torch.export adds to check its inputs (`_guards_fn`, `aten._assert_*`): no part of the model."""
    if node.op == "call_module":
        return str(node.target) == "_guards_fn"
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and (
        _op_name(node).startswith("_assert") or _op_name(node).startswith("sym_constrain_range")
    )


def compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The graph's nodes that compute (modules, functions, methods), in graph order, checks left out."""
    return [
        n for n in gm.graph.nodes if n.op in ("call_module", "call_function", "call_method") and not is_check(n)
    ]


def _is_work(node: fx.Node, gm: fx.GraphModule, values: _TypeRecorder) -> bool:
    """Does this node compute something worth running on its own thread (not just reshape or index)?
    Not: bookkeeping (views, shapes, dtype casts), an ATen graph's elementwise op, an index or mask
    value, a value that is no tensor (`x.ndim == 4`), none at all (an assertion) or a tensor of at most
    one element computed from such."""
    if node.op == "call_module":
        return not isinstance(gm.get_submodule(str(node.target)), _PASSIVE_MODULES)
    if node.op not in ("call_function", "call_method"):
        return False
    if _op_name(node) in _BOOKKEEPING or node.target in (operator.getitem, getattr):
        return False
    if isinstance(node.target, torch._ops.OpOverload) and torch.Tag.pointwise in node.target.tags:
        return False  # an ATen graph's elementwise math (an activation written out): not worth a thread
    if node.name in values.index_values or node.name in values.trivial_values:
        return False
    kind = values.types.get(node.name)
    return kind is None or ("Tensor" in kind and kind != _NONE_TYPE)


#: ts_type(None): what a call that gives no value (an assertion) records.
_NONE_TYPE = "Optional[Tensor]"
#: A region whose branches beside its largest hold together less than this share of the largest's work
#: (FLOPs and elements moved, `_TypeRecorder`) is left out: forking it could save at most about that
#: share, less than starting and joining a thread costs.
SMALL_SHARE = 0.05
#: In a region worth forking, a branch under this share of the largest one's work runs inline instead.
TINY_SHARE = 0.01


def _units(work: int) -> str:
    """Work units (FLOPs + elements moved) in words: "3.2 M"."""
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if work >= scale:
            return f"{work / scale:.3g}{suffix}"
    return str(work)


@dataclass
class LeftOut:
    """Work that could have been a branch but was left out: `why` in words, `kind` "assertion",
    "no tensor work" or "small" (a branch too small beside the others of its region)."""

    name: str
    ops: int
    kind: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ops": self.ops, "kind": self.kind, "why": self.why}


def _is_assertion(node: fx.Node) -> bool:
    """`torch._assert(cond, msg)`, `torch._check(...)` and the like, as torch.fx records them."""
    if node.op != "call_function":
        return False
    name = _op_name(node)
    return name.startswith(("_assert", "_check")) or is_check(node)


def _mutated_input(node: fx.Node) -> fx.Node | None:
    """The node an in-place op writes into (`x.add_(...)`, `F.relu(x, inplace=True)`), if any."""
    name = _op_name(node)
    inplace = node.kwargs.get("inplace") is True or (
        node.op in ("call_method", "call_function") and name.endswith("_") and not name.endswith("__")
    )
    if inplace and node.args and isinstance(node.args[0], fx.Node):
        return node.args[0]
    return None


#: Ops whose result may share memory with their first argument: writing into one writes into the other.
_VIEWS = {
    "getitem", "view", "view_as", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute",
    "transpose", "t", "expand", "expand_as", "chunk", "split", "unbind", "narrow", "select", "slice", "detach",
    "alias", "as_strided", "diagonal", "unfold", "_unsafe_view", "split_with_sizes", "movedim", "swapaxes",
}  # fmt: skip


def _written_values(target: fx.Node) -> list[fx.Node]:
    """The node written into and every value it is a view of (`x[0].fill_(2)` writes into x too)."""
    out = [target]
    while _op_name(out[-1]) in _VIEWS and out[-1].args and isinstance(out[-1].args[0], fx.Node):
        out.append(out[-1].args[0])
    return out


def _module_stack(node: fx.Node) -> list[str]:
    """Module paths of the modules this node ran in, outermost first (the root module's "" left out)."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [v[0] if isinstance(v, tuple) and v and isinstance(v[0], str) else str(k) for k, v in stack.items()]
    return [p for p in paths if p]


def _scope(node: fx.Node) -> tuple[str, ...]:
    """The module path of the code that issued this node (the caller, for call_module nodes)."""
    stack = _module_stack(node)
    if node.op == "call_module" and stack and stack[-1] == node.target:
        stack.pop()
    return tuple(stack)


# ---------------------------------------------------------------- chains and merges


class _Group:
    """A chain of nodes; when chains merge, the new group keeps them as `children`."""

    __slots__ = ("own", "children", "merge", "work")

    def __init__(self, first: fx.Node | None, work: bool) -> None:
        self.own: list[fx.Node] = [first] if first is not None else []
        self.children: list[_Group] = []
        self.merge: fx.Node | None = None
        self.work = work

    def nodes(self) -> list[fx.Node]:
        out = list(self.own)
        for child in self.children:
            out.extend(child.nodes())
        return out


class _Finder:
    def __init__(self, gm: fx.GraphModule, values: _TypeRecorder) -> None:
        self.gm = gm
        self.order = {node: i for i, node in enumerate(gm.graph.nodes)}
        self.work = {node: _is_work(node, gm, values) for node in gm.graph.nodes}
        self.work_units = values.work_units
        self.index_values = values.index_values
        self.notes: list[str] = []
        #: What could have been a branch and was not, by the node that ends it (one entry each).
        self.left_out: dict[fx.Node, LeftOut] = {}

    def _leave_out(self, chains: list[_Group]) -> None:
        """Notes the chains beside a branch that do something but no tensor work (an assertion, a
        scalar computed from shapes): they could have been branches of a region and are not."""
        for chain in chains:
            nodes = sorted(chain.nodes(), key=self.order.__getitem__)
            if chain.work or not nodes or nodes[-1] in self.left_out:
                continue
            done = [n for n in nodes if n.op in ("call_function", "call_method") and _op_name(n) not in _BOOKKEEPING]
            if all(n.target in (operator.getitem, getattr) or n.name in self.index_values for n in done):
                continue  # bookkeeping only (x.size(0), position ids): nobody would call it a branch
            asserts = any(_is_assertion(n) for n in nodes)
            kind = "assertion" if asserts else "no tensor work"
            why = "an assertion: no work to run on a thread" if asserts else "no tensor work (scalars, shapes)"
            self.left_out[nodes[-1]] = LeftOut(_left_out_name(nodes), len(nodes), kind, why)

    def _cost(self, nodes: list[fx.Node]) -> int:
        return sum(self.work_units.get(n.name, 0) for n in nodes)

    def _worth_forking(self, branch_nodes: list[list[fx.Node]]) -> list[list[fx.Node]]:
        """The branches worth a thread. When the branches beside the largest hold together less than
        SMALL_SHARE of its work, none: no region, and the largest branch's own regions are found at
        this level instead (a whole network is never one branch beside a side computation). Else
        those holding at least TINY_SHARE of the largest's work (a pooling branch of Inception stays,
        a scalar beside three convolutions does not); fewer than two of them: none. Each branch
        dropped is noted as left out; its nodes run where the plan runs the nodes of no branch."""
        costs = [self._cost(nodes) for nodes in branch_nodes]
        big = max(range(len(costs)), key=costs.__getitem__)
        if costs[big] <= 0:
            return branch_nodes
        region_small = sum(costs) - costs[big] < SMALL_SHARE * costs[big]
        kept = [big] if region_small else [k for k, cost in enumerate(costs) if cost >= TINY_SHARE * costs[big]]
        if len(kept) == len(costs):
            return branch_nodes
        for k, nodes in enumerate(branch_nodes):
            if k not in kept and nodes[-1] not in self.left_out:
                why = (
                    f"the other branches of its region hold under {SMALL_SHARE:.0%} of the largest one's work"
                    if region_small
                    else f"under {TINY_SHARE:.0%} of the largest branch's work"
                )
                self.left_out[nodes[-1]] = LeftOut(
                    _left_out_name(nodes),
                    len(nodes),
                    "small",
                    f"{_units(costs[k])} of work beside a branch of {_units(costs[big])}: {why}, not worth a thread",
                )
        return [branch_nodes[k] for k in kept] if len(kept) >= 2 else []

    # The top merge of the chains grown from `root` (None: the scope's inputs), or None.
    def _grow(self, root: fx.Node | None, scope_nodes: list[fx.Node], scope: set[fx.Node]) -> _Group | None:
        group_of: dict[fx.Node, _Group] = {}
        parent: dict[_Group, _Group] = {}

        def find(g: _Group) -> _Group:
            while g in parent:
                g = parent[g]
            return g

        start = self.order[root] + 1 if root is not None else -1
        roots_seen: list[_Group] = []
        for node in scope_nodes:
            if self.order[node] < start:
                continue
            ins = [i for i in node.all_input_nodes if i in scope or i is root]
            if root is not None:
                if not any(i is root or i in group_of for i in ins):
                    continue  # not downstream of the root
            chained = {id(g): g for g in (find(group_of[i]) for i in ins if i in group_of)}
            groups = list(chained.values())
            if not groups:
                g = _Group(node, self.work[node])
                roots_seen.append(g)
            elif len(groups) == 1:
                g = groups[0]
                g.own.append(node)
                g.work = g.work or self.work[node]
            else:
                working = [x for x in groups if x.work]
                if len(working) >= 2:
                    g = _Group(None, True)
                    g.merge = node
                    g.children = working
                    for x in groups:
                        if not x.work:
                            g.own.extend(x.nodes())
                        parent[x] = g
                    g.own.append(node)
                else:
                    g = working[0] if working else groups[0]
                    if working:
                        self._leave_out(groups)
                    for x in groups:
                        if x is not g:
                            g.own.extend(x.nodes())
                            parent[x] = g
                    g.own.append(node)
                    g.work = g.work or self.work[node]
            group_of[node] = g
        finals = list({id(find(g)): find(g) for g in roots_seen}.values())
        working = [g for g in finals if g.work]
        if working and len(finals) >= 2:
            self._leave_out(finals)
        if len(working) >= 2:
            top = _Group(None, True)  # the branches meet only at the scope's output
            top.children = working
            return top
        if len(working) == 1 and working[0].merge is not None:
            return working[0]
        return None

    def _lift(self, top: _Group) -> list[_Group]:
        """Branches of the region at `top`: children, with pure same-level merges flattened."""
        level = _scope(top.merge) if top.merge is not None else None
        out: list[_Group] = []
        for child in top.children:
            merge = child.merge
            pure = merge is not None and child.own == [merge]
            if pure and merge is not None and (level is None or _scope(merge) == level):
                out.extend(self._lift(child))
            else:
                out.append(child)
        return out

    def find(self, scope_nodes: list[fx.Node], depth: int, prefix: str) -> list[Region]:
        scope = set(scope_nodes)
        claimed: set[fx.Node] = set()
        found: list[tuple[int, fx.Node | None, _Group, list[list[fx.Node]]]] = []
        candidates: list[fx.Node | None] = [None]
        candidates += [v for v in scope_nodes if sum(1 for u in v.users if u in scope) >= 2]
        if depth == 0:
            # Graph inputs are outside every scope but are forks too (x read by four branches).
            candidates[1:1] = [
                p for p in self.gm.graph.nodes if p.op == "placeholder" and sum(1 for u in p.users if u in scope) >= 2
            ]
        for root in candidates:
            if root is not None and root in claimed:
                continue
            free = [n for n in scope_nodes if n not in claimed]
            top = self._grow(root, free, scope - claimed)
            if top is None:
                continue
            children = self._lift(top)
            if len(children) < 2:
                continue
            branch_nodes = [sorted(c.nodes(), key=self.order.__getitem__) for c in children]
            if self._unsafe(branch_nodes):
                continue
            branch_nodes = self._worth_forking(branch_nodes)
            if not branch_nodes:
                continue
            for nodes in branch_nodes:
                claimed.update(nodes)
            first = min(self.order[n] for nodes in branch_nodes for n in nodes)
            found.append((first, root, top, branch_nodes))
        found.sort(key=lambda f: f[0])
        regions = []
        for k, (_, root, top, branch_nodes) in enumerate(found, start=1):
            rid = f"{prefix}{k}"
            branches = [Branch("", nodes) for nodes in branch_nodes]
            join = top.merge.name if top.merge is not None else ("output" if depth == 0 else "branch end")
            regions.append(Region(rid, self._fork_label(root, branch_nodes), join, branches, depth))
            for branch in branches:
                branch.regions = self.find(branch.nodes, depth + 1, f"{rid}.")
        return regions

    @staticmethod
    def _fork_label(root: fx.Node | None, branch_nodes: list[list[fx.Node]]) -> str:
        """The value the branches start from; for branches fed by several inputs, their names."""
        if root is not None:
            return root.name
        inside = {n for nodes in branch_nodes for n in nodes}
        outside = {
            i.name: None
            for nodes in branch_nodes
            for n in nodes
            for i in n.all_input_nodes
            if i not in inside and i.op != "get_attr"
        }
        return ", ".join(outside) if outside else "inputs"

    def _unsafe(self, branch_nodes: list[list[fx.Node]]) -> bool:
        for nodes in branch_nodes:
            members = set(nodes)
            for node in nodes:
                target = _mutated_input(node)
                shared = [v for v in _written_values(target) if v not in members] if target is not None else []
                if shared:
                    self.notes.append(
                        f"not parallel: {node.name} writes in place into {shared[0].name}, which other branches read"
                    )
                    return True
        return False


# ---------------------------------------------------------------- names


def _location(node: fx.Node) -> tuple[str, ...]:
    """Where a node runs: the module a call_module node calls, else the innermost module whose code
    issued it (its `nn_module_stack`, which torch.fx and torch.export both record); () at the top."""
    if node.op == "call_module":
        return tuple(str(node.target).split("."))
    stack = _module_stack(node)
    return tuple(stack[-1].split(".")) if stack else ()


def _prefixes(path: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [path[:k] for k in range(1, len(path) + 1)]


@dataclass(frozen=True)
class _Place:
    """One step of a branch's name: a module the branch owns (`op` None), or a function it calls in
    module `path`, which other branches run in too (`max_pool2d` in `Mixed_6a`)."""

    path: tuple[str, ...]
    op: str | None = None

    @property
    def scope(self) -> tuple[str, ...]:
        """The module a run of steps is written under: a module's parent, a function's module."""
        return self.path[:-1] if self.op is None else self.path

    @property
    def leaf(self) -> str:
        return _printable(self.op if self.op is not None else self.path[-1])

    def text(self) -> str:
        """The step alone: `Mixed_6a.branch3x3`, `Mixed_6a: max_pool2d`, `mm` (at the model's top)."""
        if self.op is None:
            return _dotted(self.path)
        return f"{_dotted(self.path)}: {self.leaf}" if self.path else self.leaf


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(_printable(p) for p in path)


def _printable(text: str) -> str:
    """`text` as a branch name can carry it: printable (any script: `labels.branch_label` writes
    what is not ASCII escaped, and the name comes back whole), and no "->", which a label reads back
    as "→"."""
    out = "".join(c if c.isprintable() else "?" for c in text)
    return out.replace("->", "-")


class _Places:
    """Where branches run: which module paths hold work (`work`: the finder's, per node) outside a
    given branch. Bookkeeping (an attention mask's `arange`, `unsqueeze`) decides nothing."""

    def __init__(self, gm: fx.GraphModule, work: dict[fx.Node, bool]) -> None:
        self.work = {n for n in compute_nodes(gm) if work.get(n, True)}
        #: How many work nodes run under each module path.
        self.inside: dict[tuple[str, ...], int] = {}
        for node in self.work:
            for prefix in _prefixes(_location(node)):
                self.inside[prefix] = self.inside.get(prefix, 0) + 1

    def of(self, nodes: list[fx.Node]) -> list[_Place]:
        """A branch's places in graph order: the outermost modules whose work all lies in the branch
        (`transition1.0`, not the `transition1` it shares); when it owns none, the work it does in
        modules others run in too (a function with its module path, a shared module's path)."""
        members = [n for n in nodes if n in self.work]
        mine: dict[tuple[str, ...], int] = {}
        for node in members:
            for prefix in _prefixes(_location(node)):
                mine[prefix] = mine.get(prefix, 0) + 1
        owned: dict[_Place, None] = {}
        loose: list[_Place] = []
        for node in members:
            path = _location(node)
            own = next((p for p in _prefixes(path) if mine[p] == self.inside[p]), None)
            if own is not None:
                owned[_Place(own)] = None
            elif node.op == "call_module":
                loose.append(_Place(path))  # a module other branches call too (a shared tower)
            else:
                loose.append(_Place(path, _op_name(node)))
        if owned:
            return list(owned)
        return [p for k, p in enumerate(loose) if k == 0 or p != loose[k - 1]]


#: The most steps a branch's name lists; a longer chain keeps the first two and the last.
_CHAIN_STEPS = 4


def _chain_label(labels: list[str]) -> str:
    """`a → b → c` for left-out work's names: consecutive repeats once, a long chain cut (`…`)."""
    dedup: list[str] = []
    for label in labels:
        if not dedup or dedup[-1] != label:
            dedup.append(label)
    if len(dedup) > 4:
        dedup = [dedup[0], dedup[1], "…", dedup[-1]]
    return " → ".join(dedup)


def _groups(place: _Place) -> bool:
    """Can this step share its module with its neighbours' (`layer1.0: conv1 → bn1`)? Not at the
    model's top, nor a list's item (`blocks.0 → blocks.1`, never `blocks: 0 → 1`)."""
    return bool(place.scope) and not (place.op is None and place.path[-1].isdigit())


def _places_label(places: list[_Place]) -> str:
    """The steps joined by " → " (ASCII, as labels are, but for the arrow). A run of steps under one
    module says the module once (`layer1.0: conv1 → bn1`, `Mixed_6a: flip → mm`); a chain of more
    than `_CHAIN_STEPS` keeps its first steps and its last (`layer1.0: conv1 → bn1 → ... → bn3`)."""
    steps: list[tuple[int, _Place]] = []  # (run, place)
    for k, place in enumerate(places):
        new_run = k == 0 or not _groups(place) or not _groups(places[k - 1]) or place.scope != places[k - 1].scope
        steps.append((steps[-1][0] + new_run if steps else 0, place))
    n = len(steps)
    keep = list(range(n)) if n <= _CHAIN_STEPS else [*range(_CHAIN_STEPS - 2), n - 1]
    run_size: dict[int, int] = {}  # steps of each run that the name shows
    for k in keep:
        run_size[steps[k][0]] = run_size.get(steps[k][0], 0) + 1
    labels: list[str] = []
    for j, k in enumerate(keep):
        run, place = steps[k]
        if j and k != keep[j - 1] + 1:
            labels.append("...")
        if j and steps[keep[j - 1]][0] == run:
            labels.append(place.leaf)
        elif place.op is None and run_size[run] == 1:
            labels.append(place.text())
        else:
            labels.append(f"{_dotted(place.scope)}: {place.leaf}" if place.scope else place.leaf)
    return " → ".join(labels)


def _branch_name(places: list[_Place], nodes: list[fx.Node]) -> str:
    """A branch's name from its places (`_Places.of`), else its first node's name."""
    if not places:
        return _printable(nodes[0].name) if nodes else "branch"
    return _places_label(places)


def _common_path(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The leading components every path shares (a whole path when one lies inside the others)."""
    if not paths:
        return ()
    k = 0
    while all(len(p) > k for p in paths) and len({p[k] for p in paths}) == 1:
        k += 1
    return paths[0][:k]


def _unique(base: str, used: set[str]) -> str:
    name, k = base, 2
    while name in used:
        name = f"{base} #{k}"
        k += 1
    used.add(name)
    return name


def _reads(nodes: list[fx.Node]) -> str:
    """The values a branch reads from before it (`a` for a shared tower's first input)."""
    members = set(nodes)
    names = {i.name: None for n in nodes for i in n.all_input_nodes if i not in members and i.op != "get_attr"}
    return ", ".join(names)


def _left_out_name(nodes: list[fx.Node]) -> str:
    """Left-out work by where it is and what it does: "PATH: " for the innermost module its first
    node ran in ("" at the model's top level), then its calls (a module by its own name) but
    bookkeeping, unless that is all it does: `blocks.0.norm3: eq → _assert`, `level2: downsample → project`."""
    where = next((f"{stack[-1]}: " for n in nodes if (stack := _scope(n))), "")
    ops = [
        str(n.target).rsplit(".", 1)[-1] if n.op == "call_module" else _op_name(n)
        for n in nodes
        if n.op in ("call_function", "call_method", "call_module")
    ]
    return where + _chain_label([o for o in ops if o not in _BOOKKEEPING] or ops)


def _fork_text(fork: str, nodes: dict[str, fx.Node]) -> str:
    """A region's fork as a place: `after layer1.0.act3` (the module that computed it), else the
    values' names (`x`, `u, i`); more than three values say the first two and how many more."""
    names = fork.split(", ")
    if not all(n in nodes for n in names):
        texts = names
    else:
        places = [_location(nodes[n]) for n in names]
        where = _common_path(places)
        if where:
            return f"after {_dotted(where)}"
        texts = list(dict.fromkeys(_dotted(p) if p else n for n, p in zip(names, places, strict=True)))
        if any(places):
            return "after " + _few(texts)
    return _few(texts)


def _few(texts: list[str]) -> str:
    return ", ".join(texts) if len(texts) <= 3 else f"{', '.join(texts[:2])} and {len(texts) - 2} more"


def _name_regions(gm: fx.GraphModule, regions: list[Region], work: dict[fx.Node, bool]) -> None:
    """Names every branch and region from where it runs in the model.

    A branch is named by the module paths it owns, in full (`Mixed_6a.branch3x3`), down to the
    component that tells it from the rest of the model (`transition1.0 → stage2.0.branches.0`); a
    branch owning no module by its functions, prefixed by the module they run in. Names are unique
    over the whole model (they mark the trace's branch events; a repeat gets ` #2`). A region is
    named by the module path its branches share (`Mixed_6a`), else (or when another region took
    that name) by its fork (`after layer1.0.act3`, `x`).
    """
    places = _Places(gm, work)
    nodes = {n.name: n for n in gm.graph.nodes}
    region_names: set[str] = set()
    named: list[tuple[Branch, str]] = []

    def visit(regs: list[Region]) -> None:
        for region in regs:
            of = [places.of(b.nodes) for b in region.branches]
            named.extend((b, _branch_name(where, b.nodes)) for b, where in zip(region.branches, of, strict=True))
            common = _dotted(_common_path([p.path for where in of for p in where]))
            if not common or common in region_names:
                fork = _fork_text(region.fork, nodes)
                common = fork if not common or fork.startswith(f"after {common}.") else f"{common}, {fork}"
            region.name = _unique(common, region_names)
            for branch in region.branches:
                visit(branch.regions)

    visit(regions)
    # Branches that run the same modules (one tower applied to two inputs) say what they read.
    counts: dict[str, int] = {}
    for _, base in named:
        counts[base] = counts.get(base, 0) + 1
    branch_names: set[str] = set()
    for branch, base in named:
        reads = _reads(branch.nodes) if counts[base] > 1 else ""
        branch.name = _unique(f"{base} (from {_printable(reads)})" if reads else base, branch_names)


# ---------------------------------------------------------------- types from one example run


def ts_type(value: Any) -> str:
    """The TorchScript type of a value, as written in an annotation (used by the generated plans)."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if value is None:
        return "Optional[Tensor]"
    if isinstance(value, torch.device):
        return "torch.device"
    if isinstance(value, torch.dtype):
        return "int"
    if isinstance(value, torch.Size):
        return "List[int]"
    if isinstance(value, tuple):
        return f"Tuple[{', '.join(ts_type(v) for v in value)}]" if value else "Tuple[()]"
    if isinstance(value, list):
        kinds = {ts_type(v) for v in value}
        return f"List[{kinds.pop()}]" if len(kinds) == 1 else "List[Tensor]"
    if isinstance(value, dict):
        keys = {ts_type(k) for k in value} or {"str"}
        vals = {ts_type(v) for v in value.values()} or {"Tensor"}
        return f"Dict[{keys.pop()}, {vals.pop()}]"
    return type(value).__name__


def _scripted_as_list(node: fx.Node) -> bool:
    """Does TorchScript give this call a list where eager Python gives a tuple (`torch.split`,
    `x.chunk(2)`, `unbind`)? True when every ATen schema of the op returns one list."""
    if isinstance(node.target, torch._ops.OpOverload):
        schemas = [node.target._schema]
    elif node.op in ("call_function", "call_method"):
        try:
            schemas = torch._C._jit_get_schemas_for_operator(f"aten::{_op_name(node)}")
        except RuntimeError:
            return False
    else:
        return False
    return bool(schemas) and all(
        len(s.returns) == 1 and isinstance(s.returns[0].type, torch._C.ListType) for s in schemas
    )


def _elements(value: Any) -> int:
    """How many tensor elements a value holds (0 for a value holding no tensor)."""
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, list | tuple):
        return sum(_elements(v) for v in value)
    if isinstance(value, dict):
        return sum(_elements(v) for v in value.values())
    return 0


#: Ops (ATen names, torch functions, methods) that multiply matrices: their FLOPs are
#: 2 × output elements × the first matrix's last dimension (`_flops`).
_MATMULS = {"linear", "mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "einsum"}
_CONVS = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
          "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution"}  # fmt: skip
_RNN_GATES = {torch.nn.LSTM: 4, torch.nn.GRU: 3, torch.nn.RNN: 1, torch.nn.LSTMCell: 4, torch.nn.GRUCell: 3}


def _first_tensor(values: Any) -> torch.Tensor | None:
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def _flops(node: fx.Node, gm: fx.GraphModule, args: tuple[Any, ...], result: Any) -> int:
    """Floating-point operations of a node, from shapes: matrix products, convolutions, attention,
    recurrent layers and the modules doing them (Linear, Conv*d, LSTM…); 0 for the rest, whose work
    is the elements they move. An estimate, the same on a busy machine as on an idle one (torch's own
    FlopCounterMode costs about 3 s to import and start in a worker)."""
    out = result if isinstance(result, torch.Tensor) else _first_tensor(result if isinstance(result, list | tuple) else ())
    if out is None:
        return 0
    module = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
    name = _op_name(node) if module is None else ""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if isinstance(module, torch.nn.Linear) or (name in _MATMULS and tensors):
        first = tensors[-2] if name in ("addmm", "baddbmm", "addbmm", "addmv") and len(tensors) >= 3 else tensors[0]
        k = first.shape[-1] if first.dim() else 1
        return 2 * out.numel() * int(k)
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        return 2 * out.numel() * int(module.weight[0].numel())
    if name in _CONVS and len(tensors) >= 2:
        return 2 * out.numel() * int(tensors[1][0].numel())
    if name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention") and len(tensors) >= 2:
        return 4 * tensors[0].numel() * int(tensors[1].shape[-2])
    gates = next((g for cls, g in _RNN_GATES.items() if isinstance(module, cls)), 0)
    if gates and tensors:
        hidden, size = int(getattr(module, "hidden_size", 0)), int(getattr(module, "input_size", 0)) or 1
        layers = int(getattr(module, "num_layers", 1)) * (2 if getattr(module, "bidirectional", False) else 1)
        return 2 * gates * hidden * (size + hidden) * (tensors[0].numel() // size) * layers
    return 0


class _TypeRecorder(fx.Interpreter):
    """Runs the graph once on the example inputs and notes, per node: its value's TorchScript type,
    whether it is an index or mask, whether it is trivial (no value, or a tensor of at most one element
    computed from such: a scalar sum, an assertion's condition), and its work: its floating-point
    operations as `_flops` estimates them from shapes (matrix products, convolutions) plus the tensor
    elements it reads and writes. Work so estimated is the same on a busy machine as on an idle one,
    where a time measured here would not be (two cores shared with other work made a 16×64 linear
    take 6 ms)."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.types: dict[str, str] = {}
        self.index_values: set[str] = set()
        self.trivial_values: set[str] = set()
        self.work_units: dict[str, int] = {}
        self._elements: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        flops = 0
        if n.op in ("call_module", "call_function", "call_method"):
            args, _ = self.fetch_args_kwargs_from_env(n)
            flops = _flops(n, self.module, args, result)  # type: ignore[arg-type]
        kind = ts_type(result)
        if isinstance(result, tuple) and _scripted_as_list(n):
            kinds = {ts_type(v) for v in result}
            kind = f"List[{kinds.pop()}]" if len(kinds) == 1 else "List[Tensor]"
        self.types[n.name] = kind
        if isinstance(result, torch.Tensor) and result.dtype in _INDEX_DTYPES:
            self.index_values.add(n.name)
        elements = _elements(result)
        self._elements[n.name] = elements
        moved = elements + sum(self._elements.get(i.name, 0) for i in n.all_input_nodes)
        self.work_units[n.name] = flops + moved
        if n.op in ("call_function", "call_method") and elements <= 1:
            if all(self._elements.get(i.name, 0) <= 1 for i in n.all_input_nodes if i.op != "get_attr"):
                self.trivial_values.add(n.name)
        return result


# ---------------------------------------------------------------- entry point


def _number_regions(regions: list[Region], prefix: str) -> None:
    """Ids in pre-order: "1", "2" at the top; "1.1", "1.2"... for the regions inside region 1's branches."""
    for k, region in enumerate(regions, start=1):
        region.id = f"{prefix}{k}"
        _number_regions([r for b in region.branches for r in b.regions], f"{region.id}.")


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    text = re.sub(r"\s*\(unhinted: .*", "", text)  # GuardOnDataDependentSymNode's detail
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}".rstrip(": ")


#: The hint for a model that branches on tensor values, unless it is a mixture of experts (`_experts_hint`).
_DATA_DEPENDENT_HINT = "the model branches on tensor values: profile one path of it, or write the branch with torch.cond"
#: (pattern in a failure's message, what to do about it): the hints for common failures; a hint that
#: depends on the model is a function of it.
_HINTS: tuple[tuple[str, Any], ...] = (
    (r"DynamicCache|Cache\b.*(output|not a known type)|past_key_values", "set `use_cache=False` in the model's config"),
    (
        r"data-dependent|Data-dependent|GuardOnDataDependent|control flow",
        lambda model: _experts_hint(model) or _DATA_DEPENDENT_HINT,
    ),
    (
        r"not a known type|register a pytree|unrecognized type",
        "return tensors, or tuples, lists and dicts of them (or register the type with torch.utils._pytree)",
    ),
)
#: Config attributes by which a Hugging Face model says how many experts it has (Mixtral's
#: num_local_experts, Qwen2-MoE's num_experts).
_EXPERT_COUNTS = ("num_local_experts", "num_experts")
#: A module of a plain model that holds or is its experts, by its attribute or class name.
_EXPERTS_NAME = re.compile(r"experts?$|moe|mixture.?of.?experts", re.IGNORECASE)


def export_hint(message: str, model: Any = None) -> str | None:
    """A one-line hint for a common tracing failure of `model`, or None."""
    for pattern, hint in _HINTS:
        if re.search(pattern, message):
            return hint(model) if callable(hint) else hint
    return None


def _with_hint(message: str, model: Any = None) -> str:
    hint = export_hint(message, model)
    return f"{message} (hint: {hint})" if hint else message


def _hf_mixture_of_experts(model: Any) -> Any:
    """The Hugging Face model (the model itself or a module inside it) whose config gives it two or
    more experts, or None."""
    for module in model.modules() if isinstance(model, torch.nn.Module) else ():
        config = getattr(module, "config", None)
        if any(isinstance(n := getattr(config, key, None), int) and n > 1 for key in _EXPERT_COUNTS):
            return module
    return None


def _experts_hint(model: Any) -> str | None:
    """The hint for a mixture of experts that branches on tensor values, or None for another model.

    A mixture of experts runs each expert on the tokens routed to it, a loop whose trip count and
    shapes depend on the router's output: no tracer follows it, and torch.cond does not help. A
    Hugging Face model says in its config how its experts run (`experts_implementation`): "eager" is
    that loop, "grouped_mm" and "batched_mm" run all experts in a few ops whose shapes the routing
    does not change, which torch.export traces. Where the experts already run grouped, the branch is
    elsewhere and the plain hint fits."""
    hf = _hf_mixture_of_experts(model)
    if hf is not None:
        get = getattr(hf, "get_experts_implementation", None)
        if get is None:  # a transformers without the switch
            return (
                "this Hugging Face mixture of experts runs its experts in a loop over the tokens routed to each, "
                "which no tracer follows: profile one path of it, or use a transformers whose models take "
                '`experts_implementation="grouped_mm"`'
            )
        if "eager" not in get().values():
            return None
        return (
            'this Hugging Face mixture of experts runs its experts one by one (experts_implementation="eager"), '
            'a loop no tracer follows: build it with `experts_implementation="grouped_mm"` (or "batched_mm") in '
            'its config or from_pretrained, or call `model.set_experts_implementation("grouped_mm")`; or profile '
            "one path of it"
        )
    if isinstance(model, torch.nn.Module) and any(
        _EXPERTS_NAME.search(name.rsplit(".", 1)[-1]) or _EXPERTS_NAME.search(type(m).__name__)
        for name, m in model.named_modules()
    ):
        return (
            "the model routes its tokens to experts by tensor values (a loop over the experts): profile one path "
            "of it (every token to one expert), or run the experts in shapes the routing does not change (each "
            "expert on every token, weighted by the router)"
        )
    return None


def _quietly(fn: Any) -> Any:
    """fn() with logging off and sys.stderr set aside: a failing torch.export logs its guards and
    prints the partial graph there, which would bury the one line that says why."""
    logging.disable(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return fn()
    finally:
        logging.disable(logging.NOTSET)


#: (pattern in torch.fx's failure, what it means in plain words): torch.fx's common failures.
_FX_REASONS = (
    (r"co_varnames|co_argcount|\bcode: ", "torch.fx cannot trace the model's Python code"),
    (
        r"inputs to control flow|Proxy.* bool|bool.*Proxy|got Proxy",
        "the model's control flow depends on tensor values (an `if` or `while` on a tensor)",
    ),
    (r"'len' is not supported", "the model calls len() on a tensor"),
    (r"Proxy object cannot be iterated", "the model iterates over or unpacks a tensor"),
    (r"does not support item assignment", "the model writes into a tensor by index (`x[i] = ...`)"),
    (r"type Proxy|Proxy.*(int|size|shape)", "the model uses a tensor where a plain number is needed (a size or shape)"),
)


def _fx_error_text(model: Any, exc: BaseException) -> str:
    """Why torch.fx failed: a common failure in plain words, torch.fx's own message after it."""
    detail = _first_line(exc)
    plain = next((words for pattern, words in _FX_REASONS if re.search(pattern, detail)), None)
    reason = f"{plain} ({detail})" if plain else detail
    return f"torch.fx could not trace {type(model).__name__}: {reason}"


def graph_inputs(gm: fx.GraphModule, in_spec: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The values of `gm`'s placeholders for the call `model(*args, **kwargs)`.

    A torch.export graph takes the pytree leaves of (args, kwargs), keyword arguments in the order
    they were exported with; a torch.fx graph takes the forward's parameters by position or name.
    """
    if in_spec is not None:
        order = in_spec.child(1).context if in_spec.num_children == 2 else None
        if order is not None and set(order) == set(kwargs):
            kwargs = {k: kwargs[k] for k in order}
        flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        if spec != in_spec:
            raise TypeError(f"the inputs do not have the structure the model was exported with ({in_spec})")
        return flat
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = list(args)
    for p in placeholders[len(args) :]:
        name = str(p.target).lstrip("*")
        if name in kwargs:
            values.append(kwargs[name])
        elif p.args:
            values.append(p.args[0])
        else:
            raise TypeError(f"missing an input for the model's parameter {name!r}")
    unknown = set(kwargs) - {str(p.target).lstrip("*") for p in placeholders}
    if unknown:
        raise TypeError(f"the model has no parameter named {', '.join(sorted(unknown))}")
    return values


def _export(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], strict: bool, grad: bool = False
) -> tuple[fx.GraphModule, Any, Any]:
    """(graph module with parameters as attributes, input spec, output spec) from torch.export.

    For inference (`grad` False: the steps run under no_grad) the model is exported under no_grad
    too: a module of the model that switches grad itself (`@torch.no_grad()` on Llama's rotary
    embedding) then adds nothing, where with grad on it becomes a
    `torch.ops.higher_order.wrap_with_set_grad_enabled` call, which no TorchScript plan can make."""
    import torch.export

    with torch.set_grad_enabled(grad):
        program = torch.export.export(model, tuple(args), dict(kwargs), strict=strict)
    return program.module(), program.call_spec.in_spec, program.call_spec.out_spec


def _trace(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    grad: bool = False,
    seconds: dict[str, float] | None = None,
) -> tuple[fx.GraphModule | None, Any, Any, str | None, dict[str, str]]:
    """(graph, in_spec, out_spec, the tracer that found it, why the others failed): fx, then
    torch.export; `seconds` gets how long each tracer tried took ({tracer: s})."""
    errors: dict[str, str] = {}
    seconds = {} if seconds is None else seconds
    t0 = time.perf_counter()
    try:
        return fx.symbolic_trace(model), None, None, FX, errors
    except Exception as exc:  # fx raises many kinds (TraceError, TypeError, NotImplementedError...)
        errors[FX] = _fx_error_text(model, exc)
    finally:
        seconds[FX] = time.perf_counter() - t0
    for tracer, strict in ((EXPORT_NON_STRICT, False), (EXPORT_STRICT, True)):
        t0 = time.perf_counter()
        try:
            gm, in_spec, out_spec = _quietly(lambda strict=strict: _export(model, args, kwargs, strict, grad))
        except Exception as exc:  # torch.export raises many kinds (UserError, Unsupported, RuntimeError...)
            errors[tracer] = _with_hint(f"{tracer} could not export {type(model).__name__}: {_first_line(exc)}", model)
            continue
        finally:
            seconds[tracer] = time.perf_counter() - t0
        return gm, in_spec, out_spec, tracer, errors
    return None, None, None, None, errors


def _no_graph_text(errors: dict[str, str], model: Any = None) -> str:
    """fx_error when no tracer found a graph: fx's reason, then torch.export's, then the hints (for `model`)."""
    text = errors.get(FX, "")
    failed = [(t, errors[t].split(" (hint: ")[0].split(": ", 1)[-1]) for t in TRACERS[1:] if t in errors]
    if failed:
        reasons = "; ".join(f"{t.split('(')[1].rstrip(')')}: {why}" for t, why in failed)
        text += f"; nor could torch.export ({reasons})"
    hints = list(dict.fromkeys(h for h in (export_hint(m, model) for m in errors.values()) if h))
    if hints:
        text += " — hint: " + "; ".join(hints)
    return text


def _no_progress_thread() -> None:
    """torch.fx's Interpreter makes a tqdm bar (disabled) for every run where tqdm is installed, which
    starts tqdm's monitor thread: a thread of the run's process that is no thread of torch's."""
    from torch.hub import tqdm

    if hasattr(tqdm, "monitor_interval"):
        tqdm.monitor_interval = 0


def _subgraphs_not_searched(gm: fx.GraphModule) -> list[str]:
    """Notes naming the higher-order ops (`torch.cond`, ...) whose subgraphs could hold branches, which
    are not searched, and why: one note per op, naming its nodes.

    A higher-order op is one node of the graph that runs graphs of its own (a cond's two paths) whole;
    a plan launches branches only between the nodes of the model's graph, so branches inside those
    graphs could not be launched were they found (threads mode runs the op as the graph has it, on
    the thread that reaches it)."""
    nodes: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
            continue
        subgraphs = [_attr(gm, a) for a in node.args if isinstance(a, fx.Node) and a.op == "get_attr"]
        if any(isinstance(sub, fx.GraphModule) and _could_fork(sub) for sub in subgraphs):
            nodes.setdefault(node.target.name(), []).append(node.name)
    return [
        f"branches inside {'the paths of torch.cond' if op == 'cond' else f'the graphs of torch.ops.higher_order.{op}'} "
        f"(node {names_text(names)}) are not searched: the op runs them whole, as one node of the model's graph, "
        "and a plan launches branches only among that graph's own nodes"
        for op, names in nodes.items()
    ]


def _could_fork(gm: fx.GraphModule) -> bool:
    """Could a subgraph hold branches: does it have two nodes or more that may do work (`_is_work`
    told from the ops alone; the subgraph is not run)?"""
    unrun = _TypeRecorder(gm)
    return sum(_is_work(node, gm, unrun) for node in compute_nodes(gm)) >= 2


def _attr(gm: fx.GraphModule, node: fx.Node) -> Any:
    """The value a get_attr node reads (a submodule such as a cond's path, a parameter), None if none."""
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return value


def find_branches(
    model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *, grad: bool = False
) -> BranchAnalysis:
    """Traces `model(*inputs, **kwargs)` (torch.fx, else torch.export) and finds its fork-join regions.
    `grad`: the plan runs with grad on (a model file's train_step), else under no_grad (inference).

    Never raises for a model no tracer can handle: the analysis then has no graph and `fx_error` says
    why (the sequential mode still runs the model as it is).
    """
    kwargs = dict(kwargs or {})
    _no_progress_thread()
    if isinstance(model, torch.jit.ScriptModule):
        return BranchAnalysis(None, [], "torch.fx cannot trace a TorchScript module; only sequential mode runs it")
    seconds: dict[str, float] = {}
    gm, in_spec, out_spec, tracer, errors = _trace(model, inputs, kwargs, grad, seconds)
    if gm is None:
        return BranchAnalysis(None, [], _no_graph_text(errors, model), tracer_errors=errors, tracer_seconds=seconds)
    recorder = _TypeRecorder(gm)
    try:
        with torch.no_grad():
            recorder.run(*graph_inputs(gm, in_spec, inputs, kwargs))
    except Exception as exc:
        return BranchAnalysis(
            None, [], f"the graph {tracer} traced does not run: {_first_line(exc)}", tracer=None, tracer_errors=errors,
            tracer_seconds=seconds,
        )
    finder = _Finder(gm, recorder)
    regions = finder.find(compute_nodes(gm), 0, "")
    _number_regions(regions, "")
    _name_regions(gm, regions, finder.work)
    left_out = sorted(finder.left_out.items(), key=lambda item: finder.order[item[0]])
    finder.notes.extend(_subgraphs_not_searched(gm))
    return BranchAnalysis(
        gm, regions, None, recorder.types, finder.notes, tracer, errors, in_spec, out_spec, [x for _, x in left_out],
        tracer_seconds=seconds,
    )
