"""A Perfetto protobuf trace in every way in: `inspect`, `memory` and `compare` (--json) say of a
`.pftrace` what they say of its kineto JSON twin (the same events written as JSON,
`perfetto_traces.chrome_json`), a bad one is refused in one `error:` line with exit 2, the window
opens one, and reading JSON never imports protobuf."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from branchscope.app.cli import main
from tests.builders import perfetto_traces as pt
from tests.builders.perfetto_facts import assert_facts, chrome_json
from tests.paths import ROOT


def twins(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """Trace `name` of perfetto_traces as NAME.pftrace and as its JSON twin NAME.json."""
    built = pt.ALL[name]()
    return (pt.write(tmp_path / f"{name}.pftrace", built.data),
            pt.write(tmp_path / f"{name}.json", chrome_json(built.facts)))  # fmt: skip


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def without(doc: Any, keys: set[str]) -> Any:
    """`doc` without the keys that name a file (its path, its label), at every depth."""
    if isinstance(doc, dict):
        return {k: without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [without(v, keys) for v in doc]
    return doc


NAMING = {"path", "label", "paths", "file", "source"}


@pytest.mark.parametrize("name", ["threads", "gpu", "counters", "clocks"])
def test_inspect_says_of_a_pftrace_what_it_says_of_its_json_twin(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 name: str) -> None:  # fmt: skip
    proto, twin = twins(tmp_path, name)
    doc = cli_json(capsys, "inspect", str(proto))
    assert without(doc, NAMING) == without(cli_json(capsys, "inspect", str(twin)), NAMING)
    assert doc["events"] == pt.ALL[name]().facts.event_count


def test_inspect_counts_launch_arrows_of_a_pftrace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proto, _ = twins(tmp_path, "gpu")
    assert cli_json(capsys, "inspect", str(proto))["flows"]["from_events"] == len(pt.gpu_trace().facts.arrows)


def test_memory_says_of_a_pftrace_what_it_says_of_its_json_twin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proto, twin = twins(tmp_path, "counters")
    doc = cli_json(capsys, "memory", str(proto))
    assert without(doc, NAMING) == without(cli_json(capsys, "memory", str(twin)), NAMING)
    facts = pt.counters_trace().facts.memory
    assert {d["device"]: d["peak_bytes"] for d in doc["devices"]} == {dev: max(s["total_bytes"]) for dev, s in facts.items()}


def test_compare_two_pftraces_as_their_json_twins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (a, a_json), (b, b_json) = twins(tmp_path, "threads"), twins(tmp_path, "gpu")
    doc = cli_json(capsys, "compare", str(a), str(b))
    assert without(doc, NAMING) == without(cli_json(capsys, "compare", str(a_json), str(b_json)), NAMING)


def test_a_rank_folder_of_pftraces_inspects_as_a_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = cli_json(capsys, "inspect", str(pt.write_rank_folder(tmp_path / "job")))
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1]
    assert doc["events"] == sum(pt.rank_trace(r).facts.event_count for r in (0, 1))


# ---- bad files ---------------------------------------------------------------------------------

BAD = {
    "random.pftrace": bytes(range(7, 200)) * 3,
    "lie.pftrace": b"\x0a" + b"\xff\xff\xff\xff\xff\xff\xff\xff\x3f" + b"\x08\x01",  # a packet of 2^62 bytes
    "cut.pftrace": pt.gpu_trace().data[:-7],
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("command", ["inspect", "memory"])
def test_a_bad_pftrace_is_one_error_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                    command: str) -> None:  # fmt: skip
    path = pt.write(tmp_path / name, BAD[name])
    rc = main([command, str(path)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and name in err


def test_the_command_line_refuses_a_bad_pftrace(tmp_path: Path) -> None:
    """The installed entry point: `branchscope inspect BAD.pftrace` (python -m branchscope.app.cli)."""
    path = pt.write(tmp_path / "bad.pftrace", BAD["lie.pftrace"])
    proc = subprocess.run([sys.executable, "-m", "branchscope.app.cli", "inspect", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr


# ---- protobuf stays unimported for JSON --------------------------------------------------------


def test_json_traces_never_import_protobuf(tmp_path: Path) -> None:
    """The CLI and the JSON reader import neither protobuf nor perfetto (the window starts as fast
    as before); opening a JSON trace named .pftrace does not either."""
    _, twin = twins(tmp_path, "gpu")
    disguised = pt.write(tmp_path / "json.pftrace", twin.read_bytes())
    script = f"""
import sys
import branchscope.app.cli
from branchscope.app.cli import main
from branchscope.profiling import load_trace
load_trace({str(twin)!r}); load_trace({str(disguised)!r})
assert main(["inspect", {str(twin)!r}, "--json"]) == 0
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("google", "perfetto"))
print("LOADED", loaded, file=sys.stderr)
sys.exit(1 if loaded else 0)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---- the window ----------------------------------------------------------------------------------


def test_the_window_opens_a_pftrace(window, tmp_path: Path) -> None:
    from branchscope.app.pages.run_page import RunPage

    built = pt.gpu_trace()
    path = pt.write(tmp_path / "gpu.pftrace", built.data)
    assert window.open_trace_files([str(path)]) == 1
    assert_facts(window.page(RunPage).timeline.trace, built.facts)
    assert window.runs_table.rowCount() == 1


def test_the_window_says_why_a_bad_pftrace_is_refused(window, tmp_path: Path) -> None:
    from branchscope.profiling import TraceFormatError, load_trace

    bad = pt.write(tmp_path / "bad.pftrace", BAD["lie.pftrace"])
    with pytest.raises(TraceFormatError) as err:
        load_trace(bad)
    assert window.open_trace_files([str(bad)]) == 0
    assert window.message_box is not None and window.message_box.text() == str(err.value)
    assert window.runs_table.rowCount() == 0
