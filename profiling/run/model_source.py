"""Where a model comes from: a user's .py file, a TorchScript archive, or a built-in demo.

A .py model (demos included) defines `build_model() -> torch.nn.Module` and `example_inputs()`,
which returns the model's positional arguments (a tuple, or one tensor), its keyword arguments (a
dict, as Hugging Face models take `input_ids=`, `pixel_values=`), or both as a pair (tuple, dict).
It may define `train_step(model, inputs)`: then each step runs it (forward, loss, backward,
optimizer, collectives) instead of a plain forward.
A TorchScript archive carries no example inputs, so the caller gives their shapes
(`--input-shape 8x64x35x35`, repeatable) and `--dtype`.

Listing demos and checking arguments must not import torch: the GUI and the runner call them and
stay light. torch is imported only inside `load_model`, which runs in the worker process.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import re
import sys
import traceback
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from branchscope.profiling.run.user_files import NotPythonFile, exec_file

#: The built-in demos: one file each, following the .py convention.
DEMOS_DIR = Path(__file__).resolve().parents[2] / "assets" / "demos"  # branchscope/assets/demos

#: dtypes accepted by --dtype (names as torch spells them).
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")

_TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".zip", ".jit", ".ptl")


class ModelSourceError(ValueError):
    """The model cannot be loaded as given: a missing file or function, a bad shape or dtype.

    The message is one line that names what is missing; it is what the CLI prints after `error:`.
    """


class DemoUnavailableError(ModelSourceError):
    """A demo that needs hardware this machine lacks (e.g. two CUDA devices): the run cannot happen here."""


class ModelCodeError(Exception):
    """The user's own code raised (while importing the file, building the model or making inputs).

    `model_traceback` is the traceback of the user's exception, shown above the one-line error.
    """

    def __init__(self, message: str, model_traceback: str) -> None:
        super().__init__(message)
        self.model_traceback = model_traceback


@dataclass(frozen=True)
class DemoInfo:
    name: str
    path: Path
    description: str
    #: How many CUDA devices the demo needs (0: runs anywhere).
    requires_cuda_devices: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """What the user asked for: exactly one of `demo` and `path`."""

    demo: str | None = None
    path: Path | None = None
    input_shapes: tuple[tuple[int, ...], ...] = ()
    dtype: str = "float32"

    @property
    def label(self) -> str:
        return f"demo {self.demo}" if self.demo else str(self.path)


@dataclass
class LoadedModel:
    """A model ready to run: on its device, in eval mode, with inputs on the same device."""

    model: Any  # torch.nn.Module or torch.jit.ScriptModule
    #: Positional arguments: the model runs as `model(*inputs, **kwargs)`.
    inputs: tuple[Any, ...]
    label: str
    kind: str  # "py" | "demo" | "torchscript"
    is_scripted: bool
    notes: list[str] = field(default_factory=list)
    #: Keyword arguments.
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The file's `train_step(model, inputs)`, when it defines one: a profiled step calls it (with
    #: grad enabled) on the mode's module, `inputs` being what example_inputs() returned (on the device).
    train_step: Any = None
    #: What example_inputs() returned, on the model's device.
    example: Any = None

    def tensors(self) -> list[Any]:
        """Every tensor among the inputs, however nested."""
        import torch

        return [t for t in _leaves((self.inputs, self.kwargs)) if isinstance(t, torch.Tensor)]


# ---------------------------------------------------------------- demos (no torch)


def _demo_name(path: Path) -> str:
    return path.stem.replace("_", "-")


def _module_constants(path: Path) -> dict[str, Any]:
    """Module-level literal assignments of a .py file, read with `ast` so nothing is executed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                try:
                    out[target.id] = ast.literal_eval(value)
                except ValueError:
                    pass
    return out


def list_demos() -> list[DemoInfo]:
    """The built-in demos, sorted by name. Parses each file's DESCRIPTION without importing it (or torch)."""
    demos = []
    for path in sorted(DEMOS_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        consts = _module_constants(path)
        description = consts.get("DESCRIPTION")
        if not isinstance(description, str):
            continue  # not a demo
        needs = consts.get("REQUIRES_CUDA_DEVICES", 0)
        demos.append(DemoInfo(_demo_name(path), path, " ".join(description.split()), int(needs or 0)))
    return sorted(demos, key=lambda d: d.name)


def demo_info(name: str) -> DemoInfo:
    for demo in list_demos():
        if demo.name == name:
            return demo
    names = ", ".join(d.name for d in list_demos())
    raise ModelSourceError(f"no demo named {name!r}; the demos are: {names}")


# ---------------------------------------------------------------- argument checks (no torch)


def parse_input_shape(text: str) -> tuple[int, ...]:
    """'8x64x35x35' -> (8, 64, 35, 35). Also accepts commas; every dimension must be a positive int."""
    if not text.strip():
        raise ModelSourceError(f"--input-shape {text!r} is empty; write it like 8x64x35x35")
    parts = [p.strip() for p in re.split(r"[x,×*]", text.strip().lower())]
    dims = []
    for part in parts:
        try:
            dim = int(part)
        except ValueError:
            raise ModelSourceError(f"--input-shape {text!r}: {part!r} is not an integer; write it like 8x64x35x35") from None
        if dim <= 0:
            raise ModelSourceError(f"--input-shape {text!r}: dimensions must be positive")
        dims.append(dim)
    return tuple(dims)


def is_torchscript_archive(path: Path) -> bool:
    """A `torch.jit.save` archive is a zip file; anything ending in .py is Python source."""
    if path.suffix == ".py":
        return False
    if path.suffix.lower() in _TORCHSCRIPT_SUFFIXES:
        return True
    return zipfile.is_zipfile(path)


def check_spec(spec: ModelSpec) -> None:
    """Checks that need no torch: exactly one source, the file exists, shapes only for archives, dtype known.

    The runner calls this before it spawns a worker, so a typo fails in milliseconds.
    """
    if (spec.demo is None) == (spec.path is None):
        raise ModelSourceError("give exactly one of --demo NAME and --model PATH")
    if spec.dtype not in DTYPES:
        raise ModelSourceError(f"--dtype {spec.dtype!r} is not one of: {', '.join(DTYPES)}")
    if spec.demo is not None:
        demo_info(spec.demo)
        if spec.input_shapes:
            raise ModelSourceError("--input-shape is for TorchScript archives; a demo makes its own inputs")
        return
    path = Path(spec.path)  # type: ignore[arg-type]
    if not path.exists():
        raise ModelSourceError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelSourceError(f"model path {path} is not a file")
    if is_torchscript_archive(path):
        if not spec.input_shapes:
            raise ModelSourceError(
                f"{path} is a TorchScript archive, which carries no example inputs: give --input-shape "
                "(e.g. --input-shape 8x64x35x35, once per input) and optionally --dtype"
            )
    elif spec.input_shapes:
        raise ModelSourceError(
            "--input-shape is for TorchScript archives; a .py model gives its inputs with example_inputs()"
        )


# ---------------------------------------------------------------- loading (torch, worker only)


def user_traceback(exc: BaseException, user_file: Path) -> str:
    """The exception's traceback without branchscope's own frames above the user's file."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = str(user_file.resolve())
    start = 0
    for i, frame in enumerate(frames):
        if str(Path(frame.filename).resolve()) == user:
            start = i
            break
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(frames[start:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def _missing_module(exc: BaseException) -> ModuleNotFoundError | None:
    """The ModuleNotFoundError behind `exc`: itself, or one it was raised from or while handling
    (a library's `raise ImportError("install x") from e`)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ModuleNotFoundError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _finds(name: str, folder: str) -> bool:
    """Whether importing the top-level module `name` would find it in `folder` (a package, a module,
    an extension, a namespace package; a .zip through its path hook), as Python's path finder does."""
    try:
        return importlib.machinery.PathFinder.find_spec(name, [folder]) is not None
    except (ImportError, OSError, ValueError):
        return False


def _found_outside(name: str, pythonpath: str, model_file: Path | None) -> tuple[str, str] | None:
    """Where the worker would have found the top-level module `name` were it not isolated: ("on
    PYTHONPATH", folder) for the first absolute folder of `pythonpath` that holds it (a relative one
    is the runner's current folder's, unknown here), else ("beside the model file", its folder)."""
    for folder in pythonpath.split(os.pathsep):
        if os.path.isabs(folder) and _finds(name, folder):
            return "on PYTHONPATH", folder
    if model_file is not None:
        folder = str(model_file.resolve().parent)
        if _finds(name, folder):
            return "beside the model file", folder
    return None


def import_hint(exc: BaseException, model_file: Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Words added to a model error whose cause is a module not found, where the worker's isolation
    explains it (it runs as `python -I`: PYTHONPATH, the user's site-packages and the model file's own
    folder are not on its sys.path, though PYTHONPATH is still in its environment, `environ`):

    - the module is in a folder of PYTHONPATH, or beside the model file: say so, and how to make it
      importable there (an environment that has it installed, through --python; the model file
      adding its folder to sys.path);
    - PYTHONPATH is set but holds it nowhere: say plainly that it is not installed in that Python;
    - "" otherwise (no PYTHONPATH; not a missing module; a submodule of a package that is there).

    One place for the words: the CLI's `error:` line and the window's failure both show the message."""
    missing = _missing_module(exc)
    if missing is None or not missing.name:
        return ""
    top, _, rest = missing.name.partition(".")
    if rest and top in sys.modules:  # the package imported; a part of it is missing: not the isolation
        return ""
    env = os.environ if environ is None else environ
    found = _found_outside(top, env.get("PYTHONPATH", ""), model_file)
    if found is None:
        if not env.get("PYTHONPATH"):
            return ""
        relative = [f for f in env["PYTHONPATH"].split(os.pathsep) if f and not os.path.isabs(f)]
        unknown = f" (its relative folders, {', '.join(relative)}, were not looked in)" if relative else ""
        return f"; {top} is not installed in the worker's Python ({sys.executable}), nor in an absolute folder of PYTHONPATH{unknown}"
    where, folder = found
    return (
        f"; {top} is {where} ({folder}), but the worker runs isolated (python -I: PYTHONPATH, the user's site-packages "
        f"and the model file's folder are not on its sys.path). To import it there, run with --python an "
        f"environment that has {top} installed (pip install -e its package into it), or have the model file "
        f"add the folder to sys.path (sys.path.insert(0, {folder!r}))"
    )


def _describe(exc: BaseException) -> str:
    """`ValueError: bad shape`; for sys.exit(), `SystemExit (sys.exit(3))`."""
    if isinstance(exc, SystemExit):
        return f"SystemExit (sys.exit({exc.code!r}))"
    return f"{type(exc).__name__}: {exc}"


def _import_file(path: Path) -> Any:
    try:
        return exec_file(path, f"branchscope_model_{abs(hash(str(path.resolve())))}")
    except NotPythonFile as exc:
        raise ModelSourceError(str(exc)) from None
    except BaseException as exc:  # noqa: BLE001 - any failure in user code is reported, not raised further
        if isinstance(exc, KeyboardInterrupt):
            raise
        message = f"importing {path.name} raised {_describe(exc)}{import_hint(exc, path)}"
        raise ModelCodeError(message, user_traceback(exc, path)) from exc


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _to_device(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_to_device(v, device) for v in value)
    if isinstance(value, list):
        return [_to_device(v, device) for v in value]
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [x for v in value for x in _leaves(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    return [value]


def split_inputs(inputs: Any, where: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) from what example_inputs() returned: a tuple or list (positional arguments), one
    tensor, a dict (keyword arguments), or a pair (tuple, dict) of both."""
    import torch

    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[0], tuple | list) and isinstance(inputs[1], dict):
        args, kwargs = tuple(inputs[0]), inputs[1]
    elif isinstance(inputs, dict):
        args, kwargs = (), inputs
    elif isinstance(inputs, tuple | list):
        return tuple(inputs), {}
    else:
        raise ModelSourceError(
            f"example_inputs() in {where} returned {type(inputs).__name__}; it must return a tuple (positional "
            "arguments), a dict (keyword arguments) or a pair (tuple, dict)"
        )
    bad = [k for k in kwargs if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ModelSourceError(f"example_inputs() in {where} returned a dict whose keys are not argument names: {bad[0]!r}")
    return args, dict(kwargs)


def _load_py(path: Path, device: str, label: str, kind: str) -> LoadedModel:
    import torch

    module = _import_file(path)
    missing = [fn for fn in ("build_model", "example_inputs") if not callable(getattr(module, fn, None))]
    if missing:
        what = "neither build_model() nor example_inputs()" if len(missing) == 2 else f"no {missing[0]}()"
        raise ModelSourceError(f"{path.name} defines {what}; a model file needs build_model() and example_inputs()")
    needs = int(getattr(module, "REQUIRES_CUDA_DEVICES", 0) or 0)
    if needs:
        have = _cuda_device_count()
        if have < needs:
            raise DemoUnavailableError(f"{label} needs at least {needs} CUDA devices; this machine has {have}")
    try:
        model = module.build_model()
    except (Exception, SystemExit) as exc:  # sys.exit() in the model is a model error like any other
        raise ModelCodeError(f"build_model() raised {_describe(exc)}{import_hint(exc, path)}", user_traceback(exc, path)) from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelSourceError(f"build_model() in {path.name} returned {type(model).__name__}, not a torch.nn.Module")
    try:
        inputs = module.example_inputs()
    except (Exception, SystemExit) as exc:
        raise ModelCodeError(f"example_inputs() raised {_describe(exc)}{import_hint(exc, path)}", user_traceback(exc, path)) from exc
    args, kwargs = split_inputs(inputs, path.name)
    target = "cuda:0" if needs else device
    model = model.to(target)
    args, kwargs = _to_device(args, target), _to_device(kwargs, target)
    model.eval()
    train_step = getattr(module, "train_step", None)
    return LoadedModel(
        model,
        args,
        label,
        kind,
        isinstance(model, torch.jit.ScriptModule),
        kwargs=kwargs,
        train_step=train_step if callable(train_step) else None,
        example=_to_device(inputs, target),
    )


def _load_torchscript(path: Path, shapes: tuple[tuple[int, ...], ...], dtype_name: str, device: str) -> LoadedModel:
    import torch

    try:
        model = torch.jit.load(str(path), map_location=device)
    except Exception as exc:
        raise ModelSourceError(f"{path} is not a loadable TorchScript archive: {exc}".splitlines()[0]) from exc
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    inputs: list[Any] = []
    for shape in shapes:
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            t = torch.randint(0, 10, shape, generator=gen).to(dtype)
        inputs.append(t.to(device))
    model.eval()
    return LoadedModel(model, tuple(inputs), str(path), "torchscript", True)


def load_model(spec: ModelSpec, device: str = "cpu") -> LoadedModel:
    """Loads the model and its inputs onto `device` in eval mode. Imports torch; call it in the worker.

    Raises ModelSourceError (bad arguments or files), DemoUnavailableError (hardware missing), or
    ModelCodeError (the user's code raised; carries its traceback).
    """
    check_spec(spec)
    if spec.demo is not None:
        info = demo_info(spec.demo)
        return _load_py(info.path, device, f"demo {info.name}", "demo")
    path = Path(spec.path)  # type: ignore[arg-type]
    if is_torchscript_archive(path):
        return _load_torchscript(path, spec.input_shapes, spec.dtype, device)
    return _load_py(path, device, str(path), "py")
