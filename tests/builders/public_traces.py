"""Facts of the real public traces in ../shared/traces (its README): per file, its events, and the
event counts of its CPU lanes and of its GPU lanes, each sorted."""

from pathlib import Path

import pytest

FACTS = {
    "hta_amd_mi250_relative_ts.json.gz": (112, [43, 51], [18]),
    "hta_cpu_only.pt.trace.json.gz": (15, [5, 5, 5], []),
    "hta_event_sync_multi_stream.json.gz": (56, [45], [2, 2, 3, 4]),
    "hta_gpu_6streams_rank0.json.gz": (67216, [42, 66, 66, 135, 25470, 33690], [22, 22, 35, 36, 370, 7262]),
    "hta_gpu_memory_2streams.json.gz": (123378, [31538, 69550], [2020, 20270]),
    "hta_ns_resolution_fwdbwd.pt.trace.json.gz": (45419, [58, 18815, 20436], [6110]),
    "kineto_legacy_resnet50_v100.pt.trace.json.gz": (44665, [13992, 21577], [9096]),
    "hta_two_ranks/rank-0.json.gz": (4810, [1778, 1828], [2, 8, 16, 126, 1052]),
    "hta_two_ranks/rank-1.json.gz": (4675, [1742, 1779], [2, 8, 16, 126, 1002]),
}


def public_trace_path(shared_traces: Path, name: str) -> Path:
    """`name` in ../shared/traces; skips the test when that file is absent."""
    path = shared_traces / name
    if not path.exists():
        pytest.skip(f"{name} absent")
    return path
