"""Branch discovery, fork plans and the ways of using 2 cores, over real models with random weights.

For each model (torchvision, timm and Hugging Face architectures built with random weights, small
inputs: batch 1, 96–128 px images, sequences of 16–64 tokens; and the inception demo):

* discovery, in this process: `branches.find_branches` on a freshly built model (one call, the
  tracers' first-call costs included), the regions and branches it found and the tracer that found
  the graph; and each tracer on its own, in the order find_branches tries them (torch.fx, then
  torch.export non-strict, then strict) up to the first that succeeds, timed one by one;
* the fork plan, in this process: `modes/fork.build_plan` (`Plan.build_s`: writing its source and
  module, `Plan.compile_s`: TorchScript compiling it), or why it cannot be built;
* step times through the real runner (`runner.run_profile`, one fresh worker per run): fork 2×1,
  sequential 1×1 and sequential 1×2 (inter-op × intra-op threads), the three alternating round by
  round, ROUNDS rounds; each run's unprofiled median, and the median of the rounds in the table.
  A configuration whose run exits 3 (the mode cannot run this model) is not tried again.
  `advice` compares fork 2×1 with sequential 1×2 (the same 2 threads) the way `branchscope sweep`
  does, the rounds' medians as the step times and their quartiles as the noise (one round: the
  run's own median and spread).

Models are written as model files (`build_model()` / `example_inputs()`, as `branchscope profile
--model` takes them) into build/real_models/; a model whose package is missing is skipped and the
table says so. torchvision's wheel on the package index is a CUDA build whose compiled ops do not
load with the CPU torch here (`import torchvision` fails registering `torchvision::nms`); the model
files put empty modules in place of torchvision's `_meta_registrations` and
`_autograd_registrations` before importing it (the model definitions use no compiled op). `make
bench-models` installs torchvision, timm and pillow into build/model-extras (never .venv, where
transformers would import the broken torchvision) without letting pip touch torch; the model files
put that folder on sys.path.

Prints a markdown table and writes benchmarks/results/real_models.json and real_models.md.

    python benchmarks/bench_real_models.py [--quick] [--rounds 3] [--steps 4] [--models a,b] [--update]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from branchscope.profiling.run.options import RunOptions  # noqa: E402
from branchscope.profiling.run.protocol import EXIT_MODE, RunRequest  # noqa: E402
from branchscope.profiling.run.runner import run_profile  # noqa: E402
from branchscope.profiling.trace.advice import FORK, SEQUENTIAL, Measured, advise  # noqa: E402
from branchscope.profiling.trace.step_stats import StepStats  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODEL_DIR = ROOT / "build" / "real_models"
#: (mode, inter-op, intra-op): what users compare (fork 2×1 vs sequential 1×1) and what tells the
#: two ways of using 2 cores apart (fork 2×1 vs sequential 1×2).
CONFIGS = (("fork", 2, 1), ("sequential", 1, 1), ("sequential", 1, 2))

#: Where `make bench-models` installs torchvision, timm and pillow (not .venv: see the Makefile).
EXTRAS = ROOT / "build" / "model-extras"
#: What a model file starts with: the extras' folder on sys.path (the worker runs `python -I`, which
#: reads no PYTHONPATH), and torchvision's registrations of its compiled ops replaced by empty
#: modules (its CUDA build's ops do not load with this CPU torch; the models need none of them).
PRELUDE = f'''\
import sys
import types

if {str(EXTRAS)!r} not in sys.path:
    sys.path.append({str(EXTRAS)!r})
for _name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
    sys.modules.setdefault(_name, types.ModuleType(_name))

import torch
'''


@dataclass(frozen=True)
class Case:
    """A model of the benchmark: the package it needs (None: torch alone), what its input is, how
    the model file builds it and its inputs (bodies of build_model() and example_inputs())."""

    name: str
    package: str | None
    input: str
    build: str
    inputs: str
    demo: str | None = None

    def source(self) -> str:
        return (
            f'"""{self.name} with random weights ({self.input}), written by benchmarks/bench_real_models.py."""\n\n'
            + PRELUDE
            + "\n\ndef build_model():\n    torch.manual_seed(0)\n"
            + textwrap.indent(textwrap.dedent(self.build).strip(), "    ")
            + "\n\n\ndef example_inputs():\n    torch.manual_seed(1)\n"
            + textwrap.indent(textwrap.dedent(self.inputs).strip(), "    ")
            + "\n"
        )


def _image(px: int) -> str:
    return f"return torch.randn(1, 3, {px}, {px})"


def _tv(name: str, px: int, args: str = "") -> Case:
    return Case(name, "torchvision", f"1×3×{px}×{px}",
                f"from torchvision import models\nreturn models.{name}(weights=None{args})", _image(px))  # fmt: skip


def _timm(name: str, px: int) -> Case:
    return Case(name, "timm", f"1×3×{px}×{px}", f"import timm\nreturn timm.create_model({name!r}, pretrained=False)",
                _image(px))  # fmt: skip


_HF_TEXT = "vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8"

CASES: list[Case] = [
    _tv("inception_v3", 96, ", aux_logits=False, init_weights=False"),
    _tv("googlenet", 96, ", aux_logits=False, init_weights=False"),
    _tv("squeezenet1_1", 128),
    _tv("shufflenet_v2_x1_0", 128),
    _timm("inception_v4", 96),
    _timm("skresnet18", 128),
    _timm("res2net50_14w_8s", 96),
    _timm("dla34", 128),
    _timm("hrnet_w18_small", 128),
    Case("T5", "transformers", "64 tokens in, 16 out; d_model 256, 2+2 layers",
         """\
         from transformers import T5Config, T5Model
         return T5Model(T5Config(vocab_size=512, d_model=256, d_kv=32, d_ff=512, num_layers=2, num_decoder_layers=2,
                                 num_heads=8, use_cache=False))""",
         """\
         return {"input_ids": torch.randint(0, 512, (1, 64)), "decoder_input_ids": torch.randint(0, 512, (1, 16))}"""),
    Case("Llama", "transformers", "64 tokens; hidden 256, 2 layers",
         f"""\
         from transformers import LlamaConfig, LlamaModel
         return LlamaModel(LlamaConfig({_HF_TEXT}, num_key_value_heads=8, max_position_embeddings=128, use_cache=False))""",
         """\
         ids = torch.randint(0, 512, (1, 64))
         return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}"""),
    Case("CLIP", "transformers", "2 texts of 16 tokens, 2 images 64 px; hidden 256, 2+2 layers",
         f"""\
         from transformers import CLIPConfig, CLIPModel
         text = dict({_HF_TEXT}, max_position_embeddings=32, bos_token_id=0, eos_token_id=2, pad_token_id=1)
         vision = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                       image_size=64, patch_size=8)
         return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=128))""",
         """\
         ids = torch.randint(0, 512, (2, 16))
         return {"input_ids": ids, "pixel_values": torch.randn(2, 3, 64, 64), "attention_mask": torch.ones_like(ids)}"""),
    Case("Whisper", "transformers", "80 mel bins × 128 frames, 16 tokens out; d_model 256, 2+2 layers",
         """\
         from transformers import WhisperConfig, WhisperModel
         return WhisperModel(WhisperConfig(vocab_size=512, d_model=256, encoder_layers=2, decoder_layers=2,
                                           encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=512,
                                           decoder_ffn_dim=512, num_mel_bins=80, max_source_positions=64,
                                           max_target_positions=64, pad_token_id=0, bos_token_id=1,
                                           eos_token_id=2, decoder_start_token_id=3, use_cache=False))""",
         """\
         return {"input_features": torch.randn(1, 80, 128), "decoder_input_ids": torch.randint(0, 512, (1, 16))}"""),
    Case("BERT", "transformers", "64 tokens; hidden 256, 2 layers",
         f"""\
         from transformers import BertConfig, BertModel
         return BertModel(BertConfig({_HF_TEXT}, max_position_embeddings=128))""",
         """\
         ids = torch.randint(0, 512, (1, 64))
         return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}"""),
    Case("inception (demo)", None, "the demo's own input", "", "", demo="inception"),
]  # fmt: skip
#: --quick: one model of each source, one round.
QUICK = ("squeezenet1_1", "dla34", "BERT", "inception (demo)")


def package_missing(case: Case) -> str | None:
    """Why the case's package cannot be imported here, or None."""
    if case.package is None:
        return None
    if importlib.util.find_spec(case.package) is None:
        return f"{case.package} is not installed (make bench-models installs it)"
    return None


def model_options(case: Case, steps: int, warmup: int, timeout: float) -> RunOptions:
    if case.demo:
        return RunOptions(demo=case.demo, steps=steps, warmup=warmup, timeout=timeout)
    path = MODEL_DIR / f"{case.name.lower().replace(' ', '_')}.py"
    return RunOptions(model=path, steps=steps, warmup=warmup, timeout=timeout)


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


# ---- in this process: discovery and the fork plan --------------------------------------------------
def tracer_times(model: Any, args: tuple, kwargs: dict) -> dict[str, dict]:
    """Each tracer as find_branches tries them, timed on its own, up to the first that succeeds."""
    import torch
    import torch.export
    import torch.fx

    from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, EXPORT_STRICT, FX

    tries = (
        (FX, lambda: torch.fx.symbolic_trace(model)),
        (EXPORT_NON_STRICT, lambda: torch.export.export(model, args, kwargs, strict=False)),
        (EXPORT_STRICT, lambda: torch.export.export(model, args, kwargs, strict=True)),
    )
    out: dict[str, dict] = {}
    for name, fn in tries:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            out[name] = {"ok": False, "s": round(time.perf_counter() - t0, 3), "error": _first_line(exc)}
            continue
        out[name] = {"ok": True, "s": round(time.perf_counter() - t0, 3)}
        break
    return out


def discover(case: Case, options: RunOptions) -> dict:
    """find_branches and fork's build_plan on a fresh model, in this process."""
    import torch

    from branchscope.profiling.run.branches import find_branches
    from branchscope.profiling.run.model_source import ModelSpec, load_model
    from branchscope.profiling.run.modes import ModeUnavailable
    from branchscope.profiling.run.modes.fork import build_plan

    torch.set_num_threads(1)
    spec = ModelSpec(demo=options.demo) if options.demo else ModelSpec(path=options.model)
    out: dict[str, Any] = {}
    try:
        loaded = load_model(spec)
        t0 = time.perf_counter()
        analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs)
        out["discovery_s"] = round(time.perf_counter() - t0, 3)
    except Exception as exc:
        out["error"] = _first_line(exc)
        out["traceback"] = traceback.format_exc(limit=5)
        return out
    branches = analysis.to_json()
    out.update(
        tracer=analysis.tracer,
        tracer_errors=analysis.tracer_errors,
        fx_error=analysis.fx_error,
        regions=len(analysis.regions),
        branches=len(branches),
        branch_names=[b["name"] for b in branches],
    )
    if analysis.graph_module is None:
        out["plan"] = {"ok": False, "error": f"no graph: {analysis.fx_error}"}
    elif not analysis.regions:
        out["plan"] = {"ok": False, "error": "no parallel branches found"}
    else:
        try:
            with torch.no_grad():
                plan = build_plan(loaded.model, analysis, "cpu")
            out["plan"] = {"ok": True, "build_s": round(plan.build_s or 0.0, 3), "compile_s": round(plan.compile_s or 0.0, 3)}
        except ModeUnavailable as exc:
            out["plan"] = {"ok": False, "error": str(exc)}
        except Exception as exc:
            out["plan"] = {"ok": False, "error": _first_line(exc)}
    # Each tracer on its own, on a fresh model (find_branches ran its example forward on this one).
    try:
        fresh = load_model(spec)
        out["tracers"] = tracer_times(fresh.model, tuple(fresh.inputs), dict(fresh.kwargs))
    except Exception as exc:
        out["tracers"] = {"error": _first_line(exc)}
    return out


# ---- through the runner: step times ----------------------------------------------------------------
def one_run(options: RunOptions, mode: str, interop: int, intra: int) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_real_") as tmp:
        result = run_profile(RunRequest(mode, interop, intra, Path(tmp) / "run", options=options))
    wall = round(time.perf_counter() - t0, 1)
    if not result.ok or result.run is None:
        return {"ok": False, "exit_code": result.exit_code, "message": result.message, "wall_s": wall}
    run = result.run
    return {
        "ok": True,
        "unprofiled_median_ms": run.unprofiled_median_ms,
        "unprofiled_spread_ms": run.unprofiled_spread_ms,
        "unprofiled_steps": len(run.unprofiled_steps_ms or []),
        "max_abs_diff": run.max_abs_diff,
        "regions": run.regions,
        "wall_s": wall,
    }


def config_key(mode: str, interop: int, intra: int) -> str:
    return f"{mode} {interop}x{intra}"


def measure(options: RunOptions, rounds: int, log: Any) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {config_key(*c): [] for c in CONFIGS}
    unavailable: set[str] = set()
    for r in range(rounds):
        for mode, interop, intra in CONFIGS:
            key = config_key(mode, interop, intra)
            if key in unavailable:
                continue
            res = one_run(options, mode, interop, intra)
            runs[key].append(res)
            ms = res.get("unprofiled_median_ms")
            log(f"  round {r + 1}/{rounds} {key}: " + (f"{ms:.2f} ms" if res["ok"] else f"exit {res['exit_code']}: {res['message']}"))
            if not res["ok"] and res["exit_code"] == EXIT_MODE:
                unavailable.add(key)
    return runs


def summarize(runs: dict[str, list[dict]], cores: int) -> dict:
    """The median of the rounds per configuration, fork's speedup and the advice (fork 2×1 vs sequential 1×2)."""
    medians: dict[str, float | None] = {}
    measured = []
    for mode, interop, intra in CONFIGS:
        ok = [r for r in runs[config_key(mode, interop, intra)] if r["ok"]]
        values = [r["unprofiled_median_ms"] for r in ok]
        medians[config_key(mode, interop, intra)] = statistics.median(values) if values else None
        stats = StepStats.of(values)
        if len(ok) == 1 and ok[0]["unprofiled_spread_ms"]:  # one round: the noise is that run's own spread
            lo, q1, q3, hi = ok[0]["unprofiled_spread_ms"]
            stats = StepStats(ok[0]["unprofiled_steps"], values[0], lo, q1, q3, hi)
        if stats is not None:
            measured.append(Measured(mode, interop, intra, stats, cores))
    fork, seq = medians[config_key(FORK, 2, 1)], medians[config_key(SEQUENTIAL, 1, 1)]
    advice = advise(measured)
    return {
        "median_ms": medians,
        "fork_speedup": round(seq / fork, 3) if fork and seq else None,
        "advice": None if advice is None else advice.text,
        "advice_short": None if advice is None else _short_advice(advice),
    }


def _short_advice(advice: Any) -> str:
    if advice.faster is None:
        return f"within noise ({advice.ratio:.2f}×)"
    return f"{'seq 1×2' if advice.faster == SEQUENTIAL else 'fork 2×1'} {advice.ratio:.2f}× faster"


# ---- the table -------------------------------------------------------------------------------------
def _ms(x: float | None) -> str:
    return "–" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


def _tracers_text(d: dict) -> str:
    t = d.get("tracers") or {}
    if "error" in t:
        return "–"
    short = {"torch.fx": "fx", "torch.export (non-strict)": "export", "torch.export (strict)": "strict"}
    return ", ".join(f"{short.get(k, k)} {'✓' if v['ok'] else '✗'} {v['s']:.2f}" for k, v in t.items())


def _fork_text(m: dict) -> str:
    plan = (m.get("discovery") or {}).get("plan") or {}
    fork_runs = (m.get("runs") or {}).get(config_key(FORK, 2, 1), [])
    if any(r["ok"] for r in fork_runs):
        diff = max((r["max_abs_diff"] or 0.0) for r in fork_runs if r["ok"])
        return f"yes (max abs diff {diff:.1g})"
    failed = [r for r in fork_runs if not r["ok"]]
    why = failed[0]["message"] if failed else plan.get("error", "not run")
    return "no: " + str(why).replace("|", "/").replace("\n", " ")[:240]


def markdown(out: dict) -> str:
    rows = [
        "| model | input | regions / branches | tracers (✓ found the graph; s each) | discovery s | fork plan: build + compile s | "
        "seq 1×1 ms | seq 1×2 ms | fork 2×1 ms | fork 2×1 vs seq 1×1 | fork 2×1 vs seq 1×2 | fork ran? |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for name, m in out["models"].items():
        if m.get("skipped"):
            rows.append(f"| {name} | {m.get('input', '')} | | | | | | | | | | skipped: {m['skipped']} |")
            continue
        d = m.get("discovery") or {}
        if "error" in d:
            rows.append(f"| {name} | {m['input']} | | | | | | | | | | model failed to load: {d['error']} |")
            continue
        plan = d.get("plan") or {}
        compile_text = f"{plan['build_s']:.2f} + {plan['compile_s']:.2f}" if plan.get("ok") else "–"
        s = m.get("summary") or {}
        med = s.get("median_ms") or {}
        speed = s.get("fork_speedup")
        rows.append(
            f"| {name} | {m['input']} | {d.get('regions', '–')} / {d.get('branches', '–')} | {_tracers_text(d)} | "
            f"{d.get('discovery_s', 0):.2f} | {compile_text} | {_ms(med.get('sequential 1x1'))} | "
            f"{_ms(med.get('sequential 1x2'))} | {_ms(med.get('fork 2x1'))} | "
            f"{'–' if speed is None else f'{speed:.2f}×'} | {s.get('advice_short') or '–'} | {_fork_text(m)} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, one round, 3 steps")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of the three configurations (default 3; --quick 1)")
    ap.add_argument("--steps", type=int, default=None, help="profiled steps per run (default 4; --quick 3)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run's worker is stopped")
    ap.add_argument("--models", help="comma-separated model names (default: all; see CASES)")
    ap.add_argument("--update", action="store_true",
                    help="replace only these models' rows in the results written before (same rounds and steps)")  # fmt: skip
    args = ap.parse_args()
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    steps = args.steps if args.steps is not None else (3 if args.quick else 4)
    cases = CASES
    if args.models:
        wanted = {n.strip().lower() for n in args.models.split(",")}
        cases = [c for c in CASES if c.name.lower() in wanted]
    elif args.quick:
        cases = [c for c in CASES if c.name in QUICK]
    from branchscope.profiling.machine import usable_cores

    if str(EXTRAS) not in sys.path:  # torchvision and timm, as the model files find them
        sys.path.append(str(EXTRAS))

    cores = usable_cores()
    started = time.perf_counter()
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cores": cores, "cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_average_at_start": os.getloadavg()[0]},  # fmt: skip
        "rounds": rounds,
        "steps": steps,
        "warmup": args.warmup,
        "quick": args.quick,
        "models": {},
    }
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    earlier = RESULTS / f"{_results_name(out)}.json"
    if args.update and earlier.exists():
        before = json.loads(earlier.read_text(encoding="utf-8"))
        if (before.get("rounds"), before.get("steps")) != (rounds, steps):
            ap.error(f"--update: {earlier} was measured with {before.get('rounds')} rounds of {before.get('steps')} steps")
        out["models"] = before.get("models", {})
        out["updated"] = {**before.get("updated", {}), **{c.name: out["date"] for c in cases}}
        out["date"] = before.get("date", out["date"])

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    order = [c.name for c in CASES]
    for case in cases:
        entry: dict[str, Any] = {"input": case.input, "package": case.package}
        out["models"][case.name] = entry
        missing = package_missing(case)
        if missing:
            entry["skipped"] = missing
            log(f"{case.name}: skipped: {missing}")
            continue
        options = model_options(case, steps, args.warmup, args.timeout)
        if options.model is not None:
            options.model.write_text(case.source(), encoding="utf-8")
            entry["model_file"] = str(options.model.relative_to(ROOT))
        log(f"{case.name}: discovery and fork plan…")
        entry["discovery"] = discover(case, options)
        log(f"{case.name}: {json.dumps({k: v for k, v in entry['discovery'].items() if k != 'branch_names'})[:600]}")
        if "error" in entry["discovery"]:
            continue
        entry["runs"] = measure(options, rounds, log)
        entry["summary"] = summarize(entry["runs"], cores)
        log(f"{case.name}: {entry['summary']}")
        out["models"] = {k: out["models"][k] for k in sorted(out["models"], key=lambda k: order.index(k) if k in order else len(order))}
        _write(out, started)
    _write(out, started)
    print(markdown(out))
    return 0


def _results_name(out: dict) -> str:
    return "real_models_quick" if out["quick"] else "real_models"


def _write(out: dict, started: float) -> None:
    out["seconds"] = round(time.perf_counter() - started, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = _results_name(out)
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (RESULTS / f"{name}.md").write_text(
        f"{out['date']}, {out['machine']['cores']} cores, {out['rounds']} rounds, {out['steps']} steps"
        + "".join(f"; {k} measured again {v}" for k, v in out.get("updated", {}).items())
        + "\n\n"
        + markdown(out)
        + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    sys.exit(main())
