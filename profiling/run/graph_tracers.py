"""Getting a model's graph from the first tracer that succeeds, and why the others failed.

`torch.fx.symbolic_trace` first (a graph of the model's own modules and functions), then
`torch.export` non-strict and strict (a graph of ATen ops, each node carrying the module path it ran
in, `nn_module_stack`), which takes most models fx cannot, such as Hugging Face transformers. A
failure is said in one line, in plain words where it is a common one (`_FX_REASONS`), with a hint
of what to do where there is one (`export_hint`).

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

FX = "torch.fx"
EXPORT_NON_STRICT = "torch.export (non-strict)"
EXPORT_STRICT = "torch.export (strict)"
#: The tracers find_branches tries, in order.
TRACERS = (FX, EXPORT_NON_STRICT, EXPORT_STRICT)


def first_line(exc: BaseException, limit: int = 200) -> str:
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
    detail = first_line(exc)
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


def trace_graph(
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
            errors[tracer] = _with_hint(f"{tracer} could not export {type(model).__name__}: {first_line(exc)}", model)
            continue
        finally:
            seconds[tracer] = time.perf_counter() - t0
        return gm, in_spec, out_spec, tracer, errors
    return None, None, None, None, errors


def no_graph_text(errors: dict[str, str], model: Any = None) -> str:
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


def no_progress_thread() -> None:
    """torch.fx's Interpreter makes a tqdm bar (disabled) for every run where tqdm is installed, which
    starts tqdm's monitor thread: a thread of the run's process that is no thread of torch's."""
    from torch.hub import tqdm

    if hasattr(tqdm, "monitor_interval"):
        tqdm.monitor_interval = 0

