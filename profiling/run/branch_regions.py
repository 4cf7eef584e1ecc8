"""Finding a graph's fork-join regions and their branches, and what is left out and why.

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

What work is (`branch_work.is_work`) and how much (`ValueRecorder.work_units`) decides what is
*left out* (`LeftOut`): chains that do no tensor work (an assertion, a scalar from shapes), and
branches too small beside the others of their region to be worth a thread. A region whose branches
write in place into what another reads is no region (a note says why), and the subgraphs of
higher-order ops (`torch.cond`) are not searched (a note says why).

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from branchscope.profiling.run.branch_work import ValueRecorder, is_work
from branchscope.profiling.run.folder import names_text
from branchscope.profiling.run.graph_nodes import BOOKKEEPING, caller_path, compute_nodes, is_check, op_name


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
class LeftOut:
    """Work that could have been a branch but was left out: `why` in words, `kind` "assertion",
    "no tensor work" or "small" (a branch too small beside the others of its region)."""

    name: str
    ops: int
    kind: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ops": self.ops, "kind": self.kind, "why": self.why}


#: A region whose branches beside its largest hold together less than this share of the largest's work
#: (FLOPs and elements moved, `ValueRecorder`) is left out: forking it could save at most about that
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


def _is_assertion(node: fx.Node) -> bool:
    """`torch._assert(cond, msg)`, `torch._check(...)` and the like, as torch.fx records them."""
    if node.op != "call_function":
        return False
    name = op_name(node)
    return name.startswith(("_assert", "_check")) or is_check(node)


def _mutated_input(node: fx.Node) -> fx.Node | None:
    """The node an in-place op writes into (`x.add_(...)`, `F.relu(x, inplace=True)`), if any."""
    name = op_name(node)
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
    while op_name(out[-1]) in _VIEWS and out[-1].args and isinstance(out[-1].args[0], fx.Node):
        out.append(out[-1].args[0])
    return out


def _chain_label(labels: list[str]) -> str:
    """`a → b → c` for left-out work's names: consecutive repeats once, a long chain cut (`…`)."""
    dedup: list[str] = []
    for label in labels:
        if not dedup or dedup[-1] != label:
            dedup.append(label)
    if len(dedup) > 4:
        dedup = [dedup[0], dedup[1], "…", dedup[-1]]
    return " → ".join(dedup)


def _left_out_name(nodes: list[fx.Node]) -> str:
    """Left-out work by where it is and what it does: "PATH: " for the innermost module its first
    node ran in ("" at the model's top level), then its calls (a module by its own name) but
    bookkeeping, unless that is all it does: `blocks.0.norm3: eq → _assert`, `level2: downsample → project`."""
    where = next((f"{stack[-1]}: " for n in nodes if (stack := caller_path(n))), "")
    ops = [
        str(n.target).rsplit(".", 1)[-1] if n.op == "call_module" else op_name(n)
        for n in nodes
        if n.op in ("call_function", "call_method", "call_module")
    ]
    return where + _chain_label([o for o in ops if o not in BOOKKEEPING] or ops)


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


class RegionFinder:
    """Finds the regions of one graph (`regions`), noting on the way what it leaves out and why
    (`left_out`, `notes`); `work` says which nodes do work worth a thread (`branch_work.is_work`)."""

    def __init__(self, gm: fx.GraphModule, values: ValueRecorder) -> None:
        self.gm = gm
        self.order = {node: i for i, node in enumerate(gm.graph.nodes)}
        self.work = {node: is_work(node, gm, values) for node in gm.graph.nodes}
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
            done = [n for n in nodes if n.op in ("call_function", "call_method") and op_name(n) not in BOOKKEEPING]
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
        level = caller_path(top.merge) if top.merge is not None else None
        out: list[_Group] = []
        for child in top.children:
            merge = child.merge
            pure = merge is not None and child.own == [merge]
            if pure and merge is not None and (level is None or caller_path(merge) == level):
                out.extend(self._lift(child))
            else:
                out.append(child)
        return out

    def regions(self) -> list[Region]:
        """The graph's regions, with ids in pre-order ("1", "2"; "1.1" inside region 1)."""
        regions = self.find(compute_nodes(self.gm), 0, "")
        _number_regions(regions, "")
        return regions

    def left_out_in_order(self) -> list[LeftOut]:
        """What was left out, in graph order (of the node that ends each)."""
        return [x for _, x in sorted(self.left_out.items(), key=lambda item: self.order[item[0]])]

    def find(self, scope_nodes: list[fx.Node], depth: int, prefix: str) -> list[Region]:
        """The regions among `scope_nodes` (the whole graph at depth 0, else one branch's nodes),
        each with its branches' own regions, ids starting with `prefix`."""
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


def _number_regions(regions: list[Region], prefix: str) -> None:
    """Ids in pre-order: "1", "2" at the top; "1.1", "1.2"... for the regions inside region 1's branches."""
    for k, region in enumerate(regions, start=1):
        region.id = f"{prefix}{k}"
        _number_regions([r for b in region.branches for r in b.regions], f"{region.id}.")


def subgraphs_not_searched(gm: fx.GraphModule) -> list[str]:
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
    """Could a subgraph hold branches: does it have two nodes or more that may do work (`is_work`
    told from the ops alone; the subgraph is not run)?"""
    unrun = ValueRecorder(gm)
    return sum(is_work(node, gm, unrun) for node in compute_nodes(gm)) >= 2


def _attr(gm: fx.GraphModule, node: fx.Node) -> Any:
    """The value a get_attr node reads (a submodule such as a cond's path, a parameter), None if none."""
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return value

