"""The order a generated plan's block runs its statements and region launches, and where it drops
each value (`plans._Codegen` writes the code).

A block is a list of graph nodes (the forward's, or one branch's) in which each region's nodes run
as one launch. Its items run in dependency order, ties in graph order, and each value is dropped
right after the item that uses it last, as torch.fx's own code generation frees a value after its
last user (`Graph.python_code`, "x = None"): a plan that kept each value in a local until its method
returned would free a branch's intermediates in one batch at the branch's end, and peak higher than
the model's own forward.

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import heapq

import torch.fx as fx

from branchscope.profiling.run.branch_regions import Branch, Region
from branchscope.profiling.run.modes import ModeUnavailable

Item = fx.Node | Region


def branch_interface(branch: Branch, order: dict[fx.Node, int]) -> tuple[list[fx.Node], list[fx.Node]]:
    """(values the branch reads from outside, its values used outside), in graph order (`order`:
    each node's place in the graph); the module's own tensors (`get_attr`) are not read through it."""
    inside = set(branch.nodes)
    ins: dict[fx.Node, None] = {}
    outs: list[fx.Node] = []
    for n in branch.nodes:
        for i in n.all_input_nodes:
            if i not in inside and i.op != "get_attr":
                ins[i] = None
        if any(u not in inside for u in n.users):
            outs.append(n)
    return sorted(ins, key=order.__getitem__), outs


def block_items(nodes: list[fx.Node], regions: list[Region], order: dict[fx.Node, int]) -> list[Item]:
    """`nodes` (graph order) with each region's nodes grouped as the region, in the order the block
    runs them: each item after the items it reads from, ties in graph order."""
    owner: dict[fx.Node, int] = {}
    for k, region in enumerate(regions):
        for branch in region.branches:
            for n in branch.nodes:
                owner[n] = k
    items: list[Item] = []
    item_of: dict[fx.Node, int] = {}
    first: list[int] = []
    region_item: dict[int, int] = {}
    for n in nodes:
        if n in owner:
            k = owner[n]
            if k not in region_item:
                region_item[k] = len(items)
                items.append(regions[k])
                first.append(order[n])
            item_of[n] = region_item[k]
        else:
            item_of[n] = len(items)
            items.append(n)
            first.append(order[n])
    deps: list[set[int]] = [set() for _ in items]
    for n in nodes:
        for i in n.all_input_nodes:
            if i in item_of and item_of[i] != item_of[n]:
                deps[item_of[n]].add(item_of[i])
    users: list[list[int]] = [[] for _ in items]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    pending = [len(ds) for ds in deps]
    ready = [(first[k], k) for k in range(len(items)) if pending[k] == 0]
    heapq.heapify(ready)
    ordered: list[Item] = []
    while ready:
        _, k = heapq.heappop(ready)
        ordered.append(items[k])
        for u in users[k]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, (first[u], u))
    if len(ordered) != len(items):
        raise ModeUnavailable("the branches found overlap in a way no plan can order")
    return ordered


def reads_and_writes(item: Item, order: dict[fx.Node, int]) -> tuple[list[fx.Node], list[fx.Node]]:
    """(the values an item reads, the values it sets), as the block's code names them: a region
    reads its branches' inputs and sets their results."""
    if isinstance(item, fx.Node):
        return list(item.all_input_nodes), [item]
    reads: list[fx.Node] = []
    writes: list[fx.Node] = []
    for branch in item.branches:
        ins, outs = branch_interface(branch, order)
        reads += ins
        writes += outs
    return reads, writes


def drops(items: list[Item], keep: set[fx.Node], order: dict[fx.Node, int]) -> list[list[fx.Node]]:
    """For each item, the values to drop right after it (graph order): those it uses last, read or
    set and not read later. `keep` (what the block gives back) and the module's own tensors
    (`get_attr`) are never dropped."""
    seen = set(keep)
    dropped: list[list[fx.Node]] = [[] for _ in items]
    for k in reversed(range(len(items))):
        reads, writes = reads_and_writes(items[k], order)
        for n in [*writes, *reads]:
            if n not in seen and n.op != "get_attr":
                seen.add(n)
                dropped[k].append(n)
    for values in dropped:
        values.sort(key=order.__getitem__)
    return dropped
