"""Write a large torch.profiler-like trace with the mix of a real GPU trace, for load benchmarks.

The events follow kineto's shapes and proportions (as in the public 54 MB 2-stream trace): CPU ops
nested two deep on the main and autograd threads, `cudaLaunchKernel` / `cudaMemcpyAsync` runtime
calls each with an `ac2g` flow start, the kernel or memcpy on one of two GPU streams with the flow's
end, `[memory]` allocations and frees with addresses and totals, many args per event, and
timestamps in µs with ns decimals (`1712195495519695.812`). Size it by `--events` or by `--mb`
(megabytes of JSON): at a real trace's ~250 bytes per event, `--mb 1000` is about 4M events (half
of them complete events) and `--events 8000000` about 2 GB. Output is gzipped when the name ends in
`.gz` (ISA-L, fastest level: about 8x smaller; real traces, gzipped harder, 18x).

Run: `.venv/bin/python benchmarks/gen_large_trace.py --mb 200 /tmp/large.json.gz`
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PID, MAIN, AUTOGRAD, GPU_PID, STREAMS = 783658, 783658, 785244, 1, (7, 20)
EPOCH_US = 1_712_195_495_519_689
OPS = ["aten::linear", "aten::addmm", "aten::relu", "aten::add_", "aten::mul", "aten::cat", "aten::layer_norm"]
KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "ampere_sgemm_128x64_tn",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
    "(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, "
    "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4>(Params)",
]
#: Events written per unit of work: outer op, inner op, launch, flow start, kernel, flow end, alloc, free.
PER_UNIT = 8


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def header(n_units: int) -> str:
    meta = {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_031_714_816, "computeMajor": 8,
             "computeMinor": 0, "maxThreadsPerBlock": 1024, "numSms": 108, "warpSize": 32},
        ],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "record_shapes": 1,
        "profile_memory": 1,
        "traceName": f"generated: {n_units * PER_UNIT} events",
    }  # fmt: skip
    text = json.dumps(meta)[:-1] + ',\n  "traceEvents": [\n'
    names = [
        {"name": "process_name", "ph": "M", "ts": EPOCH_US, "pid": PID, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": EPOCH_US, "pid": GPU_PID, "tid": 0, "args": {"labels": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": EPOCH_US, "pid": PID, "tid": MAIN, "args": {"name": "thread 783658 (python3)"}},
        {"name": "thread_name", "ph": "M", "ts": EPOCH_US, "pid": PID, "tid": AUTOGRAD, "args": {"name": "thread 785244 (pt_autograd_0)"}},
    ]  # fmt: skip
    return text + "".join(f"  {json.dumps(e)},\n" for e in names)


def units(first: int, count: int, rng: np.random.Generator) -> str:
    """`count` units of work from unit number `first`, as JSON event lines (each ending with ',')."""
    out = []
    ids = range(first, first + count)
    gaps = rng.integers(2_000, 40_000, count)  # ns between units
    op_ns = rng.integers(20_000, 120_000, count)
    kernel_ns = rng.integers(1_000, 160_000, count)
    sizes = rng.integers(1, 64, count) * 4096
    t = EPOCH_US * 1000 + first * 120_000
    stream_free = dict.fromkeys(STREAMS, 0)  # a stream runs one kernel at a time
    for k, i in enumerate(ids):
        t += int(gaps[k])
        tid = AUTOGRAD if i % 3 == 2 else MAIN
        op, dur = OPS[i % len(OPS)], int(op_ns[k])
        inner_start, inner_dur = t + 1_517, dur - 3_031
        launch, launch_dur = inner_start + 2_113, 4_219
        kernel = KERNELS[i % len(KERNELS)]
        stream = STREAMS[i % 2]
        k_start, k_dur = max(launch + 6_007, stream_free[stream]), int(kernel_ns[k])
        stream_free[stream] = k_start + k_dur
        corr = 100_000 + i
        addr = 139_926_520_725_504 + (i % 5000) * 65_536
        size = int(sizes[k])
        total = 5_435_638_784 + (i % 977) * 4096
        out.append(
            f'  {{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {PID}, "tid": {tid}, "ts": {_us(t)}, '
            f'"dur": {_us(dur)}, "args": {{"External id": {i}, "Sequence number": {i // 2}, '
            f'"Fwd thread id": 1, "Ev Idx": {i * PER_UNIT}, "Input Dims": [[32, 64], [64, 64], []], '
            f'"Input type": ["float", "float", "Scalar"]}}}},\n'
            f'  {{"ph": "X", "cat": "cpu_op", "name": "{op}_impl", "pid": {PID}, "tid": {tid}, '
            f'"ts": {_us(inner_start)}, "dur": {_us(inner_dur)}, "args": {{"External id": {i}, '
            f'"Ev Idx": {i * PER_UNIT + 1}}}}},\n'
            f'  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {tid}, '
            f'"ts": {_us(launch)}, "dur": {_us(launch_dur)}, "args": {{"External id": {i}, "cbid": 211, '
            f'"correlation": {corr}}}}},\n'
            f'  {{"ph": "s", "id": {corr}, "pid": {PID}, "tid": {tid}, "ts": {_us(launch)}, "cat": "ac2g", '
            f'"name": "ac2g"}},\n'
            f'  {{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": {GPU_PID}, "tid": {stream}, '
            f'"ts": {_us(k_start)}, "dur": {_us(k_dur)}, "args": {{"External id": {i}, "queued": 0, '
            f'"device": 0, "context": 1, "stream": {stream}, "correlation": {corr}, '
            f'"registers per thread": 32, "shared memory": 0, "blocks per SM": 5.3, "warps per SM": 21.2, '
            f'"grid": [4, 106, 1], "block": [128, 1, 1], "est. achieved occupancy %": 33}}}},\n'
            f'  {{"ph": "f", "id": {corr}, "pid": {GPU_PID}, "tid": {stream}, "ts": {_us(k_start)}, '
            f'"cat": "ac2g", "name": "ac2g", "bp": "e"}},\n'
            f'  {{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {PID}, '
            f'"tid": {tid}, "ts": {_us(inner_start + 900)}, "args": {{"Device Type": 1, "Device Id": 0, '
            f'"Addr": {addr}, "Bytes": {size}, "Total Allocated": {total + size}, '
            f'"Total Reserved": 12782141440, "Ev Idx": {i * PER_UNIT + 6}}}}},\n'
            f'  {{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {PID}, '
            f'"tid": {tid}, "ts": {_us(t + dur - 700)}, "args": {{"Device Type": 1, "Device Id": 0, '
            f'"Addr": {addr}, "Bytes": -{size}, "Total Allocated": {total}, '
            f'"Total Reserved": 12782141440, "Ev Idx": {i * PER_UNIT + 7}}}}},\n'
        )
        t += dur
    return "".join(out)


def bytes_per_event() -> float:
    """JSON bytes per event of this generator (measured on a sample)."""
    return len(units(0, 1000, np.random.default_rng(0)).encode()) / (1000 * PER_UNIT)


def write(path: Path, events: int, seed: int = 0) -> int:
    """Write about `events` events (a multiple of 8) to `path`; returns the JSON's size in bytes."""
    n_units = max(1, events // PER_UNIT)
    rng = np.random.default_rng(seed)
    if path.name.endswith(".gz"):
        from isal import igzip

        f = igzip.open(path, "wb", compresslevel=0)
    else:
        f = open(path, "wb")  # noqa: SIM115 - closed below
    size = 0
    with f:
        for text in _pieces(n_units, rng):
            data = text.encode()
            size += len(data)
            f.write(data)
    return size


def _pieces(n_units: int, rng: np.random.Generator):
    yield header(n_units)
    step = 20_000
    for first in range(0, n_units, step):
        text = units(first, min(step, n_units - first), rng)
        if first + step >= n_units:
            text = text[:-2] + "\n"  # no comma after the last event
        yield text
    yield "  ]\n}\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="file to write (.json, or .json.gz to gzip it)")
    size_arg = ap.add_mutually_exclusive_group()
    size_arg.add_argument("--events", type=int, help="events to write (default: 800000, about 200 MB)")
    size_arg.add_argument("--mb", type=float, help="megabytes of JSON to write instead (1000: about 4M events)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    events = int(args.mb * 1e6 / bytes_per_event()) if args.mb else args.events or 800_000
    size = write(Path(args.out), events, args.seed)
    print(f"{args.out}: {events // PER_UNIT * PER_UNIT} events, {size / 1e6:.0f} MB of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
