"""Names for branches and regions, from where they run in the model.

A branch is named by the module paths it owns in full, down to the component that tells it apart
(`transition1.0 → stage2.0.branches.0`), else by its functions under the module they ran in
(`Mixed_6a: max_pool2d`); a region by the module path its branches share (`Mixed_6a`), else by
its fork (`after layer1.0.act3`). Branch names are unique over the model and printable, with no
"->" (they become the `branch: NAME` labels of the trace, which read "->" back as " → ").

This module imports torch.fx, so it runs in the worker process only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx

from branchscope.profiling.run.branch_regions import Branch, Region
from branchscope.profiling.run.graph_nodes import compute_nodes, location, op_name


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
            for prefix in _prefixes(location(node)):
                self.inside[prefix] = self.inside.get(prefix, 0) + 1

    def of(self, nodes: list[fx.Node]) -> list[_Place]:
        """A branch's places in graph order: the outermost modules whose work all lies in the branch
        (`transition1.0`, not the `transition1` it shares); when it owns none, the work it does in
        modules others run in too (a function with its module path, a shared module's path)."""
        members = [n for n in nodes if n in self.work]
        mine: dict[tuple[str, ...], int] = {}
        for node in members:
            for prefix in _prefixes(location(node)):
                mine[prefix] = mine.get(prefix, 0) + 1
        owned: dict[_Place, None] = {}
        loose: list[_Place] = []
        for node in members:
            path = location(node)
            own = next((p for p in _prefixes(path) if mine[p] == self.inside[p]), None)
            if own is not None:
                owned[_Place(own)] = None
            elif node.op == "call_module":
                loose.append(_Place(path))  # a module other branches call too (a shared tower)
            else:
                loose.append(_Place(path, op_name(node)))
        if owned:
            return list(owned)
        return [p for k, p in enumerate(loose) if k == 0 or p != loose[k - 1]]


#: The most steps a branch's name lists; a longer chain keeps the first two and the last.
_CHAIN_STEPS = 4


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


def _fork_text(fork: str, nodes: dict[str, fx.Node]) -> str:
    """A region's fork as a place: `after layer1.0.act3` (the module that computed it), else the
    values' names (`x`, `u, i`); more than three values say the first two and how many more."""
    names = fork.split(", ")
    if not all(n in nodes for n in names):
        texts = names
    else:
        places = [location(nodes[n]) for n in names]
        where = _common_path(places)
        if where:
            return f"after {_dotted(where)}"
        texts = list(dict.fromkeys(_dotted(p) if p else n for n, p in zip(names, places, strict=True)))
        if any(places):
            return "after " + _few(texts)
    return _few(texts)


def _few(texts: list[str]) -> str:
    return ", ".join(texts) if len(texts) <= 3 else f"{', '.join(texts[:2])} and {len(texts) - 2} more"


def name_regions(gm: fx.GraphModule, regions: list[Region], work: dict[fx.Node, bool]) -> None:
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
