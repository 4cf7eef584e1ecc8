"""Execution plans: the code that runs a model's branches the way a mode says (the modes
themselves, and how each launches and joins a region's branches, are in
`branchscope.profiling.run.modes`).

A generated plan is Python source for a module in which each branch of a region is a method, and
each region is launched and joined by its mode's `Launcher` (fork: `torch.jit.fork`/`wait`, then
compiled by TorchScript; streams: a CUDA stream per branch). Sequential mode runs the model's own
forward, its branches marked with forward hooks (`annotate_branches_with_hooks`).

Every branch runs inside `record_function("branch: NAME")`, so the trace shows where it ran. The code
is generated from the graph that `branchscope.profiling.run.branches` analysed, node for node, so outputs match the
model's (the worker measures the largest difference). A graph from torch.export is ATen ops: each
becomes `torch.ops.aten.NAME(...)` (TorchScript picks the overload from the arguments), the plan
takes the graph's flat inputs and gives its flat outputs, and `Plan.__call__` flattens the model's
(args, kwargs) and nests the outputs back (a Hugging Face `ModelOutput`, say) with the exported
pytree specs. This module imports torch: worker only.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import keyword
import linecache
import math
import operator
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from branchscope.profiling.run import graph_schedule, ownership
from branchscope.profiling.run.branch_regions import Branch, Region
from branchscope.profiling.run.branches import BranchAnalysis
from branchscope.profiling.run.graph_nodes import compute_nodes
from branchscope.profiling.run.modes import HigherOrderUnavailable, ModeUnavailable, mode_named
from branchscope.profiling.run.protocol import branch_label
from branchscope.profiling.trace.records import left_out_text

__all__ = ["CudaStreamApi", "Launcher", "ModeUnavailable", "Plan", "build_plan", "generate_plan_module", "max_abs_diff"]


@dataclass(frozen=True)
class LaunchedBranch:
    """A branch as its region's launch sees it: the method that runs it, the values it reads from
    outside (`ins`) and gives back (`outs`), and a number `t` unique in the plan (for temporaries)."""

    method: str
    ins: list[fx.Node]
    outs: list[fx.Node]
    t: int


def unpacked(gen: Any, b: LaunchedBranch, indent: str) -> list[str]:
    """A joined branch's results (`_resT`) unpacked into the values they are, then the tuple dropped:
    kept to the end of the forward, it would keep every result alive after its last use."""
    unpack = [f"{indent}{gen.var(o)} = _res{b.t}[{j}]" for j, o in enumerate(b.outs)]
    return [*unpack, f"{indent}del _res{b.t}"]


def start_then_join(
    gen: Any,
    launched: list[LaunchedBranch],
    indent: str,
    inputs_dropped: list[str],
    start: str,
    join: str,
    one_at_a_time: bool = False,
) -> list[str]:
    """A region's lines for a mode that starts every branch, then waits for each and unpacks its
    results: `start` is the expression that starts one ({fn}: its method, {args}: ", a, b"), `join`
    the one that waits for it ({handle}: what `start` gave); `inputs_dropped` (the `Launcher.region`
    lines that drop inputs used last here) once the last branch is started. `one_at_a_time`: each
    branch is waited for as soon as it is started, so the mode's pool runs one branch at a time (the
    mode's plan on one thread, in a process whose pool has more: what a speedup's parts compare,
    `run/paired.py`)."""
    lines = []

    def started(b: LaunchedBranch) -> str:
        args = "".join(f", {gen.var(i)}" for i in b.ins)
        return f"{indent}_fut{b.t} = {start.format(fn=f'self.{b.method}', args=args)}"

    def joined(b: LaunchedBranch) -> list[str]:
        return [
            f"{indent}_res{b.t} = {join.format(handle=f'_fut{b.t}')}",
            f"{indent}del _fut{b.t}",  # a future holds its result
            *unpacked(gen, b, indent),
        ]

    if one_at_a_time:
        for b in launched[:-1]:
            lines += [started(b), *joined(b)]
        return lines + [started(launched[-1]), *inputs_dropped, *joined(launched[-1])]
    lines += [started(b) for b in launched] + inputs_dropped
    for b in launched:
        lines += joined(b)
    return lines


@dataclass(frozen=True)
class Launcher:
    """A mode's part of a generated plan: `region(codegen, branches, indent, inputs_dropped)` writes
    the lines that launch a region's branches and join them (`codegen.var(node)` names a value),
    `inputs_dropped` where the branches hold their inputs themselves (after they start: a line that
    drops the inputs the region uses last, or none); `higher_order`:
    whether the plan may call `torch.ops.higher_order.*` (TorchScript cannot); `namespace`: globals
    the plan's source uses; `setup(module, branches)`: called on the plan module once it exists."""

    mode: str
    region: Callable[[Any, list[LaunchedBranch], str, list[str]], list[str]]
    higher_order: bool = True
    namespace: dict[str, Any] = dataclasses.field(default_factory=dict)
    setup: Callable[[Any, int], None] | None = None


@dataclass
class Plan:
    mode: str
    module: Callable[..., Any]
    #: The generated Python source (fork and streams modes), for the user to read.
    source: str | None = None
    #: For generated plans: the analysis whose graph they follow (its inputs and output structure).
    analysis: BranchAnalysis | None = None
    #: Seconds spent writing the plan's source and making its module (generated plans), and
    #: compiling it (TorchScript: fork mode); None where the mode did not do that step.
    build_s: float | None = None
    compile_s: float | None = None
    #: Sequential mode's branch marks in the model's own forward (`annotate_branches_with_hooks`):
    #: whoever reads the marks asks it whether every step's calls matched the graph's.
    marks: ownership.PieceHooks | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the plan as the model would run: `plan(*args, **kwargs)` gives what `model(...)` gives."""
        if self.analysis is None:
            return self.module(*args, **kwargs)
        out = self.module(*self.analysis.graph_inputs(args, kwargs))
        if self.analysis.out_spec is not None:
            return pytree.tree_unflatten(list(out), self.analysis.out_spec)
        return out


# ---------------------------------------------------------------- comparing outputs


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, leaf) of every leaf of a nest of tuples, lists, dicts (a `ModelOutput` is one) and dataclasses."""
    if isinstance(value, list | tuple):
        return [x for i, v in enumerate(value) for x in _leaves(v, (*path, i))]
    if isinstance(value, dict):
        return [x for k in sorted(value, key=str) for x in _leaves(value[k], (*path, str(k)))]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _leaves(fields, path)
    return [(path, value)]


def _flatten(value: Any) -> list[Any]:
    return [leaf for _, leaf in _leaves(value)]


def max_abs_diff(expected: Any, actual: Any) -> float:
    """Largest absolute difference over all tensor leaves of two (nested) outputs; inf if their structure differs."""
    a, b = _leaves(expected), _leaves(actual)
    if [p for p, _ in a] != [p for p, _ in b]:
        return math.inf
    worst = 0.0
    for (_, x), (_, y) in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return math.inf
            if x.numel():
                diff = (x.detach().double().cpu() - y.detach().double().cpu()).abs()
                worst = max(worst, float(torch.nan_to_num(diff, nan=math.inf).max()))
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return math.inf
        elif isinstance(x, int | float) and isinstance(y, int | float):
            worst = max(worst, abs(float(x) - float(y)))
        elif x != y:
            return math.inf
    return worst


# ---------------------------------------------------------------- CUDA stream operations


class CudaStreamApi:
    """The stream operations the `streams` plan calls; tests swap in a fake to check the plan on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def new_stream(self) -> Any:
        return torch.cuda.Stream(device=self.device)

    def current_stream(self) -> Any:
        return torch.cuda.current_stream(self.device)

    def stream(self, s: Any) -> Any:
        return torch.cuda.stream(s)

    def new_event(self) -> Any:
        return torch.cuda.Event()

    def record(self, value: Any, stream: Any) -> None:
        """`record_stream` on every tensor of a (nested) value: it is in use on `stream` too."""
        for t in _flatten(value):
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(stream)


# ---------------------------------------------------------------- code generation

_BINARY = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.pow: "**",
    operator.matmul: "@",
    operator.and_: "&",
    operator.or_: "|",
    operator.xor: "^",
    operator.lshift: "<<",
    operator.rshift: ">>",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}


#: Why a graph holds a higher-order op a TorchScript plan cannot call, and what to do.
_HIGHER_ORDER_HINTS = {
    "wrap_with_set_grad_enabled": (
        "a module of the model switches autograd inside its forward (`torch.enable_grad()`, "
        "`set_grad_enabled`, or `torch.no_grad()` in a run with a train_step): take the switch out of the "
        "forward, or run sequential mode"
    ),
    "wrap_with_autocast": "the forward enters torch.autocast: enter it around the model instead, or run sequential mode",
    "cond": "the model chooses a path by a tensor's value (torch.cond): profile one path, or run sequential mode",
}


def _ident(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    if not name or name[0].isdigit() or keyword.iskeyword(name):
        name = "_" + name
    return name


class _Codegen:
    """Writes the plan module's source from an fx graph and its regions."""

    def __init__(self, analysis: BranchAnalysis, launcher: Launcher) -> None:
        assert analysis.graph_module is not None
        self.gm = analysis.graph_module
        self.exported = analysis.exported
        self.tracer = analysis.tracer
        self.types = analysis.value_types
        self.launcher = launcher
        self.mode = launcher.mode
        self.order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        self.attrs: dict[str, Any] = {}
        self._attr_names: dict[str, str] = {}
        self.globals: dict[str, Any] = {}
        self._global_names: dict[int, str] = {}
        self.methods: list[list[str]] = []
        self.branch_count = 0
        self._tmp = itertools.count()

    # ---- names

    def attr(self, target: str, kind: str) -> str:
        """A flat attribute of the plan module for a submodule or parameter path of the model."""
        if target not in self._attr_names:
            name = f"{kind}_{_ident(target)}"
            while name in self.attrs:
                name += "_"
            self._attr_names[target] = name
            obj: Any = self.gm
            for part in target.split("."):
                obj = getattr(obj, part)
            self.attrs[name] = obj
        return self._attr_names[target]

    def global_fn(self, fn: Any) -> str:
        key = id(fn)
        if key not in self._global_names:
            base = _ident(getattr(fn, "__name__", "fn"))
            name = f"_fn{len(self._global_names)}_{base}"
            self._global_names[key] = name
            self.globals[name] = fn
        return self._global_names[key]

    def var(self, node: fx.Node) -> str:
        if node.op == "get_attr":
            return f"self.{self.attr(str(node.target), 'p')}"
        return f"v_{node.name}"

    def ts_type(self, node: fx.Node) -> str:
        return self.types.get(node.name, "Tensor")

    # ---- values

    def fmt(self, a: Any) -> str:
        if isinstance(a, fx.Node):
            return self.var(a)
        if isinstance(a, tuple):
            inner = ", ".join(self.fmt(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.fmt(x) for x in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.fmt(k)}: {self.fmt(v)}" for k, v in a.items()) + "}"
        if isinstance(a, bool) or a is None or isinstance(a, int | str):
            return repr(a)
        if isinstance(a, float):
            if math.isinf(a):
                return "float('inf')" if a > 0 else "float('-inf')"
            if math.isnan(a):
                return "float('nan')"
            return repr(a)
        if isinstance(a, torch.dtype | torch.layout | torch.memory_format):
            return str(a)  # "torch.float32", "torch.strided", "torch.contiguous_format"
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        if a is Ellipsis:
            return "..."
        if isinstance(a, slice):
            return f"slice({self.fmt(a.start)}, {self.fmt(a.stop)}, {self.fmt(a.step)})"
        raise ModeUnavailable(f"cannot write a plan for an argument of type {type(a).__name__}: {a!r}")

    def fmt_index(self, idx: Any) -> str:
        if isinstance(idx, slice):
            parts = ["" if v is None else self.fmt(v) for v in (idx.start, idx.stop, idx.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if parts[2] else "")
        if isinstance(idx, tuple):
            return ", ".join(self.fmt_index(i) for i in idx) or "()"
        return self.fmt(idx)

    def call_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        parts = [self.fmt(a) for a in args] + [f"{k}={self.fmt(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    # ---- statements

    def statement(self, node: fx.Node) -> str:
        lhs = self.var(node)
        if node.op == "call_module":
            name = self.attr(str(node.target), "m")
            return f"{lhs} = self.{name}({self.call_args(node.args, node.kwargs)})"
        if node.op == "call_method":
            obj, *rest = node.args
            return f"{lhs} = {self.fmt(obj)}.{node.target}({self.call_args(tuple(rest), node.kwargs)})"
        if node.op != "call_function":
            raise ModeUnavailable(f"cannot write a plan for graph node {node.name} ({node.op})")
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            # TorchScript calls an op packet and picks the overload from the arguments.
            name = target.overloadpacket.__name__
            return f"{lhs} = torch.ops.{target.namespace}.{name}({self.call_args(node.args, node.kwargs)})"
        if isinstance(target, torch._ops.HigherOrderOperator) and not self.launcher.higher_order:
            hint = _HIGHER_ORDER_HINTS.get(target.name(), "run sequential mode, which runs the model as it is")
            raise HigherOrderUnavailable(
                f"{self.mode} mode: the graph {self.tracer} gave calls torch.ops.higher_order.{target.name()} "
                f"(node {node.name}), which a TorchScript plan cannot call; {hint}",
                target.name(),
            )
        if target in _BINARY and len(node.args) == 2 and not node.kwargs:
            return f"{lhs} = {self.fmt(node.args[0])} {_BINARY[target]} {self.fmt(node.args[1])}"
        if target in _UNARY and len(node.args) == 1 and not node.kwargs:
            return f"{lhs} = {_UNARY[target]}{self.fmt(node.args[0])}"
        if target is operator.getitem:
            return f"{lhs} = {self.fmt(node.args[0])}[{self.fmt_index(node.args[1])}]"
        if target is builtins.getattr and len(node.args) == 2 and isinstance(node.args[1], str):
            return f"{lhs} = {self.fmt(node.args[0])}.{node.args[1]}"
        return f"{lhs} = {self.global_fn(target)}({self.call_args(node.args, node.kwargs)})"

    # ---- blocks

    def block(self, nodes: list[fx.Node], regions: list[Region], indent: str, keep: set[fx.Node]) -> list[str]:
        """Statements for `nodes` (graph order) with each region's branches replaced by one launch,
        each value dropped (`del`) after its last use unless `keep` holds it (what the block gives
        back): see `graph_schedule`."""
        items = graph_schedule.block_items(nodes, regions, self.order)
        lines: list[str] = []
        for item, dropped in zip(items, graph_schedule.drops(items, keep, self.order), strict=True):
            if isinstance(item, Region):
                reads, _ = graph_schedule.reads_and_writes(item, self.order)
                inputs = [n for n in dropped if n in reads]
                lines += self.region(item, indent, self.dropping(inputs, indent))
                dropped = [n for n in dropped if n not in reads]
            else:
                lines.append(indent + self.statement(item))
            lines += self.dropping(dropped, indent)
        return lines

    def dropping(self, values: list[fx.Node], indent: str) -> list[str]:
        """The line that drops `values` (none for none)."""
        return [f"{indent}del {', '.join(self.var(n) for n in values)}"] if values else []

    def interface(self, branch: Branch) -> tuple[list[fx.Node], list[fx.Node]]:
        """(values the branch reads from outside, its values used outside), in graph order."""
        return graph_schedule.branch_interface(branch, self.order)

    def branch_method(self, branch: Branch, ins: list[fx.Node], outs: list[fx.Node]) -> str:
        name = f"_branch{self.branch_count}"
        self.branch_count += 1
        params = ", ".join(f"{self.var(i)}: {self.ts_type(i)}" for i in ins)
        ret = f"Tuple[{', '.join(self.ts_type(o) for o in outs)}]" if outs else "Tuple[()]"
        body = self.block(branch.nodes, branch.regions, " " * 12, keep=set(outs))
        result = ", ".join(self.var(o) for o in outs)
        lines = [
            f"    def {name}(self{', ' if params else ''}{params}) -> {ret}:",
            f"        with torch.autograd.profiler.record_function({branch_label(branch.name)!r}):",
            *(body or [" " * 12 + "pass"]),
            f"        return ({result}{',' if len(outs) == 1 else ''})",
        ]
        self.methods.append(lines)
        return name

    def region(self, region: Region, indent: str, inputs_dropped: list[str]) -> list[str]:
        launched = []
        for branch in region.branches:
            ins, outs = self.interface(branch)
            launched.append(LaunchedBranch(self.branch_method(branch, ins, outs), ins, outs, next(self._tmp)))
        lines = [f"{indent}# region {region.id}: {len(region.branches)} branches from {region.fork}, joined at {region.join}"]
        return lines + self.launcher.region(self, launched, indent, inputs_dropped)

    def module_source(self, class_name: str) -> str:
        graph = self.gm.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        compute = compute_nodes(self.gm)
        output = next(n for n in graph.nodes if n.op == "output")
        result = output.args[0]
        if self.exported:  # the graph's flat outputs, as a tuple (they may differ in type)
            result = tuple(result) if isinstance(result, list | tuple) else (result,)
        params = []
        for p in placeholders:
            default = f" = {self.fmt(p.args[0])}" if p.args else ""
            params.append(f"{self.var(p)}: {self.ts_type(p)}{default}")
        body = self.block(compute, self.regions, " " * 8, keep=set(output.all_input_nodes))
        forward = [
            f"    def forward(self{', ' if params else ''}{', '.join(params)}):",
            *body,
            f"        return {self.fmt(result)}",
        ]
        head = [f"class {class_name}(_PlanModule):", f'    """Generated by branchscope ({self.mode} mode)."""', ""]
        parts = head + forward
        for method in sorted(self.methods, key=lambda m: int(m[0].split("(")[0].rsplit("_branch", 1)[1])):
            parts += [""] + method
        return "\n".join(parts) + "\n"

    regions: list[Region] = []


class _PlanModule(torch.nn.Module):
    """Base of generated plans: holds the model's modules and tensors under flat attribute names."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        super().__init__()
        for name, value in attrs.items():
            if isinstance(value, torch.nn.Module):
                self.add_module(name, value)
            elif isinstance(value, torch.nn.Parameter):
                self.register_parameter(name, value)
            elif isinstance(value, torch.Tensor):
                self.register_buffer(name, value)
            else:
                setattr(self, name, value)


_plan_counter = itertools.count()


def generate_plan_module(analysis: BranchAnalysis, launcher: Launcher) -> tuple[Any, str]:
    """The plan as an (unscripted) nn.Module and its source, its regions launched by `launcher`."""
    mode = launcher.mode
    if analysis.graph_module is None:
        raise ModeUnavailable(f"{mode} mode needs the model's graph, but {analysis.fx_error}")
    if not analysis.regions:
        why = "; ".join(analysis.notes)
        left = (
            f"; left out: {left_out_text(analysis.left_out)} (run.json's left_out): give the cores to "
            "intra-op threads instead (sequential mode, --intra N)"
            if analysis.left_out
            else ""
        )
        raise ModeUnavailable(
            f"{mode} mode needs parallel branches, and {analysis.tracer} found none worth a thread in this model"
            + (f" ({why})" if why else "")
            + left
        )
    gen = _Codegen(analysis, launcher)
    gen.regions = analysis.regions
    class_name = f"BranchscopePlan{next(_plan_counter)}"
    source = gen.module_source(class_name)
    filename = f"<branchscope-{mode}-plan-{class_name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {
        "__name__": f"branchscope_plans_{class_name}",
        "torch": torch,
        "Tensor": torch.Tensor,
        "_PlanModule": _PlanModule,
        **{k: getattr(__import__("typing"), k) for k in ("List", "Tuple", "Optional", "Dict")},
        **launcher.namespace,
        **gen.globals,
    }
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated source
    module = namespace[class_name](gen.attrs)
    if launcher.setup is not None:
        launcher.setup(module, gen.branch_count)
    module.eval()
    return module, source


def annotate_branches_with_hooks(model: Any, analysis: BranchAnalysis) -> ownership.PieceHooks | None:
    """Mark each branch in the model's *own* forward with `record_function("branch: NAME")`.

    Sequential mode runs the model as it is, so its branches are marked from outside, by what each
    owns (`ownership.py`): a range per piece of the branch (one where the forward runs it in one go,
    one per stretch where the forward interleaves it with others), opened by a forward pre-hook and
    closed by a forward hook of the module calls that start and end the piece, each call of a shared
    module marked for the branch that made it. Branches with no module call of their own stay
    unmarked. Returns the hooks (`.remove()` takes them off; `.unmatched_steps` counts steps whose
    calls did not match the graph), None for a model it cannot hook (TorchScript).
    """
    ranges: dict[int, Any] = {}

    def on_open(piece: ownership.Piece) -> None:
        rf = torch.autograd.profiler.record_function(branch_label(piece.branch))
        rf.__enter__()
        ranges[piece.index] = rf

    def on_close(piece: ownership.Piece) -> None:
        rf = ranges.pop(piece.index, None)
        if rf is not None:
            rf.__exit__(None, None, None)

    return ownership.piece_hooks(model, analysis, on_open, on_close)


def build_plan(mode: str, model: Any, analysis: BranchAnalysis, device: Any = "cpu") -> Plan:
    """The plan of the mode called `mode` (`modes.mode_named`); raises ModeUnavailable with a
    one-line reason when it cannot apply."""
    try:
        found = mode_named(mode)
    except KeyError as exc:
        raise ModeUnavailable(f"unknown mode: {exc.args[0]}") from None
    plan: Plan = found.build_plan(model, analysis, str(device))
    return plan


# ---------------------------------------------------------------- starting torch's threads


def start_intra_op_team(threads: int) -> None:
    """Runs one intra-op parallel op on the calling thread, so that OpenMP starts its team of
    `threads - 1` workers now: libgomp starts a thread's team at its first parallel region, as large
    as the work asks (at::parallel_for gives each thread at least 32768 elements)."""
    if threads > 1:
        torch.ones(threads << 16).add_(1.0)


def _no_task(x: int) -> int:
    return x


def fork_and_wait(x: int) -> int:
    """`x`, from a task forked and waited for (TorchScript: scripted, it runs on the inter-op pool)."""
    return torch.jit.wait(torch.jit.fork(_no_task, x))


def start_interop_pool() -> None:
    """Starts torch's inter-op pool (c10's ThreadPool starts all its threads at once, on first use)
    with a TorchScript fork of a task that does nothing, so that no OpenMP team starts with it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated", category=DeprecationWarning)
        scripted = torch.jit.script(fork_and_wait)
    scripted(0)
