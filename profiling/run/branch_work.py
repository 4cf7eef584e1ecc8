"""What each node of a traced graph holds and costs, from one run of the graph on the example
inputs (`ValueRecorder`): its value's TorchScript type (which the generated plans declare), whether
that is an index or a mask, and its work, the floating-point operations estimated from shapes plus
the tensor elements it reads and writes. `is_work` tells from these whether a node computes
something worth a thread of its own.

Work is estimated, not timed: an estimate is the same on a busy machine as on an idle one.

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from branchscope.profiling.run.graph_nodes import BOOKKEEPING, op_name

#: Tensors of these dtypes are indices and masks (positions, attention masks): bookkeeping, not work.
_INDEX_DTYPES = (torch.bool, torch.int32, torch.int64)
_PASSIVE_MODULES = (torch.nn.Identity, torch.nn.Dropout, torch.nn.Flatten, torch.nn.Unflatten)
#: ts_type(None): what a call that gives no value (an assertion) records.
_NONE_TYPE = "Optional[Tensor]"


def is_work(node: fx.Node, gm: fx.GraphModule, values: ValueRecorder) -> bool:
    """Does this node compute something worth running on its own thread (not just reshape or index)?
    Not: bookkeeping (views, shapes, dtype casts), an ATen graph's elementwise op, an index or mask
    value, a value that is no tensor (`x.ndim == 4`), none at all (an assertion) or a tensor of at most
    one element computed from such."""
    if node.op == "call_module":
        return not isinstance(gm.get_submodule(str(node.target)), _PASSIVE_MODULES)
    if node.op not in ("call_function", "call_method"):
        return False
    if op_name(node) in BOOKKEEPING or node.target in (operator.getitem, getattr):
        return False
    if isinstance(node.target, torch._ops.OpOverload) and torch.Tag.pointwise in node.target.tags:
        return False  # an ATen graph's elementwise math (an activation written out): not worth a thread
    if node.name in values.index_values or node.name in values.trivial_values:
        return False
    kind = values.types.get(node.name)
    return kind is None or ("Tensor" in kind and kind != _NONE_TYPE)



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
            schemas = torch._C._jit_get_schemas_for_operator(f"aten::{op_name(node)}")
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
    name = op_name(node) if module is None else ""
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


class ValueRecorder(fx.Interpreter):
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

