"""What a node of a traced graph is: the name of its op, whether it computes, is a check that
torch.export added or only bookkeeping, and the modules it ran in.

torch.fx and torch.export graphs alike: a torch.fx node calls a module, a function or a method of
the model's own code; a torch.export node calls an ATen op (`aten.add_.Tensor`) and carries the
module path it ran in (`nn_module_stack`).

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import torch
import torch.fx as fx

#: Functions and methods that only reshape, index or describe a value: a chain made of them alone is
#: bookkeeping, not work worth a thread.
BOOKKEEPING = {
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


def op_name(node: fx.Node) -> str:
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
        op_name(node).startswith("_assert") or op_name(node).startswith("sym_constrain_range")
    )


def compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The graph's nodes that compute (modules, functions, methods), in graph order, checks left out."""
    return [
        n for n in gm.graph.nodes if n.op in ("call_module", "call_function", "call_method") and not is_check(n)
    ]


def module_stack(node: fx.Node) -> list[str]:
    """Module paths of the modules this node ran in, outermost first (the root module's "" left out)."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [v[0] if isinstance(v, tuple) and v and isinstance(v[0], str) else str(k) for k, v in stack.items()]
    return [p for p in paths if p]


def caller_path(node: fx.Node) -> tuple[str, ...]:
    """The module path of the code that issued this node (the caller, for call_module nodes)."""
    stack = module_stack(node)
    if node.op == "call_module" and stack and stack[-1] == node.target:
        stack.pop()
    return tuple(stack)


def location(node: fx.Node) -> tuple[str, ...]:
    """Where a node runs: the module a call_module node calls, else the innermost module whose code
    issued it (its `nn_module_stack`, which torch.fx and torch.export both record); () at the top."""
    if node.op == "call_module":
        return tuple(str(node.target).split("."))
    stack = module_stack(node)
    return tuple(stack[-1].split(".")) if stack else ()
