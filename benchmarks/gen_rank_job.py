"""Write a folder of N rank traces of one distributed job, from a real trace's mix (issue 23).

Every rank is the template trace (by default ../shared/traces/hta_two_ranks/rank-0.json.gz, a rank
of a real 128-rank NCCL job: CPU ops, CUDA runtime calls, kernels on 5 streams, two
`ProfilerStep#N`) with its events shifted by a small per-rank offset and stretched by a per-rank
factor near 1 (jitter, ±2%), `distributedInfo` {rank, world_size, backend} set to its place, and
CUDA `[memory]` events added (allocations inside each step, freed at its end; the template has
none). Planted, and written to `planted.txt` (JSON; not named .json, so no reader takes it for a rank) beside the ranks:

- stragglers: a few ranks (1 in 16, at least 1) whose timeline is stretched 20-40%, so their
  steps are that much longer;
- one rank with unbalanced memory: its allocations are 1.6x the others', so its peak is the highest.

Deterministic for a seed. Files are named as real jobs name them: `rank-K.json.gz` (HTA's
samples) or, with `--naming pt`, `rank_K.pt.trace.json.gz` (tensorboard_trace_handler).

    python benchmarks/gen_rank_job.py OUT --ranks 64 [--seed 0] [--repeat 1] [--max-events N]

`--repeat R` tiles the template's steps R times (a longer rank: R times the events and bytes);
`--max-events N` keeps about N of its complete events (every step annotation kept): a small job
for tests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "hta_two_ranks" / "rank-0.json.gz"
#: The heavy rank's allocations against the others'.
HEAVY_FACTOR = 1.6
#: How much longer a straggler's timeline is (drawn in this range).
STRAGGLER_RANGE = (1.2, 1.4)
#: Every other rank's stretch (jitter), drawn in 1 ± this.
JITTER = 0.02
#: Each step's allocations: this many blocks of about this many bytes.
BLOCKS, BLOCK_BYTES = 8, 256 << 20
#: What was planted, beside the ranks.
PLANTED = "planted.txt"


@dataclass(frozen=True)
class Planted:
    ranks: int
    seed: int
    stragglers: list[int]
    stretch: dict[int, float]  # per straggler
    heavy_rank: int
    files: list[str]


def read_template(path: Path, max_events: int | None = None, repeat: int = 1) -> dict[str, Any]:
    """The template's document with only its complete and metadata events (`max_events`: about
    that many complete events, step annotations always kept), its steps tiled `repeat` times."""
    with gzip.open(path) if path.name.endswith(".gz") else open(path, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    complete = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    if max_events is not None and len(complete) > max_events:
        every = len(complete) / max_events
        keep = {int(k * every) for k in range(max_events)}
        complete = [e for k, e in enumerate(complete) if k in keep or _is_step(e)]
    if repeat > 1:
        lo = min(e["ts"] for e in complete)
        hi = max(e["ts"] + e.get("dur", 0) for e in complete)
        period = hi - lo + 100
        tiled = []
        for r in range(repeat):
            for e in complete:
                c = dict(e, ts=e["ts"] + r * period)
                if _is_step(e):
                    c["name"] = f"ProfilerStep#{_step_no(e) + r * 1000}"
                tiled.append(c)
        complete = tiled
    doc["traceEvents"] = meta + complete
    return doc


def _is_step(e: dict[str, Any]) -> bool:
    return str(e.get("name", "")).startswith("ProfilerStep#")


def _step_no(e: dict[str, Any]) -> int:
    try:
        return int(str(e["name"]).split("#", 1)[1])
    except ValueError:
        return 0


def plant(ranks: int, seed: int) -> tuple[list[int], dict[int, float], int]:
    """(stragglers, their stretch, the heavy rank) for a job of `ranks`, from the seed."""
    rng = random.Random(seed)
    count = max(1, ranks // 16)
    stragglers = sorted(rng.sample(range(ranks), count))
    stretch = {r: round(rng.uniform(*STRAGGLER_RANGE), 3) for r in stragglers}
    heavy = rng.choice([r for r in range(ranks) if r not in stretch] or [0])
    return stragglers, stretch, heavy


def rank_document(
    template: dict[str, Any], rank: int, world: int, stretch: float, offset_us: float, memory_scale: float, rng: random.Random
) -> dict[str, Any]:
    """The template as rank `rank` of `world`: stretched by `stretch` about its first timestamp,
    shifted by `offset_us`, with [memory] events of `memory_scale` times the base allocations."""
    events = template["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in complete)
    out: list[dict[str, Any]] = [e for e in events if e.get("ph") != "X"]
    for e in complete:
        c = dict(e)
        c["ts"] = round(t0 + (e["ts"] - t0) * stretch + offset_us, 3)
        if "dur" in e:
            c["dur"] = round(e["dur"] * stretch, 3)
        out.append(c)
    steps = sorted((c for c in out if c.get("ph") == "X" and _is_step(c)), key=lambda c: c["ts"])
    main = steps[0] if steps else complete[0]
    total = 0
    for step in steps:
        addr = 0x7F0000000000 + rank * (1 << 36)
        live = []
        for b in range(BLOCKS):
            size = int(BLOCK_BYTES * memory_scale * rng.uniform(0.95, 1.05))
            total += size
            ts = round(step["ts"] + step.get("dur", 0) * (b + 1) / (BLOCKS + 2), 3)
            out.append(_memory(main, ts, addr, size, total))
            live.append((addr, size))
            addr += size
        end = round(step["ts"] + step.get("dur", 0) * (BLOCKS + 1.5) / (BLOCKS + 2), 3)
        for a, size in live:
            total -= size
            out.append(_memory(main, end, a, -size, total))
    doc = {k: v for k, v in template.items() if k != "traceEvents"}
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    doc["traceEvents"] = out
    return doc


def _memory(near: dict[str, Any], ts: float, addr: int, size: int, total: int) -> dict[str, Any]:
    return {
        "ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": near["pid"], "tid": near["tid"],
        "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": size,
                           "Total Allocated": total, "Total Reserved": total + (64 << 20)},
    }  # fmt: skip


def kineto_text(doc: dict[str, Any]) -> str:
    """The document laid out as torch.profiler writes it: a top-level key a line (`"rank": 3`, which
    HTA finds by a regular expression that wants the space), then one event a line."""
    head = [f"  {json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}" for k, v in doc.items() if k != "traceEvents"]
    events = ",\n".join("    " + json.dumps(e, separators=(", ", ": ")) for e in doc["traceEvents"])
    return "{\n" + ",\n".join(head) + ',\n  "traceEvents": [\n' + events + "\n  ]\n}\n"


def file_name(rank: int, naming: str) -> str:
    return f"rank_{rank}.pt.trace.json.gz" if naming == "pt" else f"rank-{rank}.json.gz"


def generate(
    out: Path,
    ranks: int,
    *,
    seed: int = 0,
    template: Path = TEMPLATE,
    max_events: int | None = None,
    repeat: int = 1,
    naming: str = "hta",
    compresslevel: int = 1,
) -> Planted:
    """Write the job's rank files and `PLANTED` into `out` (created; refused if it holds other files)."""
    ours = {file_name(r, naming) for r in range(ranks)} | {PLANTED}
    if out.exists() and any(p.name not in ours for p in out.iterdir()):
        raise FileExistsError(f"{out} holds files this generator did not write: give a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    doc = read_template(template, max_events, repeat)
    stragglers, stretch, heavy = plant(ranks, seed)
    files = []
    for rank in range(ranks):
        rng = random.Random(f"{seed}/{rank}")
        factor = stretch.get(rank, 1 + rng.uniform(-JITTER, JITTER))
        offset = rng.uniform(0, 500)
        scale = HEAVY_FACTOR if rank == heavy else 1.0
        data = kineto_text(rank_document(doc, rank, ranks, factor, offset, scale, rng))
        path = out / file_name(rank, naming)
        with gzip.open(path, "wb", compresslevel=compresslevel) as f:
            f.write(data.encode())
        files.append(path.name)
    planted = Planted(ranks=ranks, seed=seed, stragglers=stragglers, stretch=stretch, heavy_rank=heavy, files=files)
    (out / PLANTED).write_text(json.dumps(asdict(planted), indent=1))
    return planted


def parser() -> argparse.ArgumentParser:
    """The command line, every option described."""
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"What was planted (stragglers, their stretch, the heavy rank) is printed as JSON and written to OUT/{PLANTED}.",
    )
    ap.add_argument("out", type=Path, help="the folder to write the rank traces into: new, empty, or one it wrote before (a folder holding other files is refused)")
    ap.add_argument("--ranks", type=int, default=8, help="how many ranks (files) the job has, at least 2 (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the jitter, the stragglers and the heavy rank: the same seed, the same job (default: %(default)s)")
    ap.add_argument("--template", type=Path, default=TEMPLATE, help="the real rank trace every rank is made from (default: ../shared/traces/hta_two_ranks/rank-0.json.gz)")
    ap.add_argument(
        "--max-events", type=int, default=None, help="keep about this many of the template's complete events (step annotations always kept): a small job for tests (default: all of them)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="tile the template's steps this many times: a longer rank, that many times the events and bytes (default: %(default)s)")
    ap.add_argument(
        "--naming", choices=("hta", "pt"), default="hta", help="file names: rank-K.json.gz (hta, as HTA's samples) or rank_K.pt.trace.json.gz (pt, as tensorboard_trace_handler); default: %(default)s"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.ranks < 2 or args.repeat < 1:
        print("error: --ranks must be at least 2 and --repeat at least 1", file=sys.stderr)
        return 2
    if not args.template.is_file():
        print(f"error: {args.template}: no such template trace", file=sys.stderr)
        return 2
    try:
        planted = generate(
        args.out, args.ranks, seed=args.seed, template=args.template, max_events=args.max_events,
        repeat=args.repeat, naming=args.naming,
        )  # fmt: skip
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(planted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
