"""Time from launching the GUI process to its window on screen (goal: within 1.5 s), torch-free.

Each run is a fresh `python` process that imports the app, builds the main window (without
starting a run) and shows it; it reports the time since the process was created (from the OS's
process start time, so interpreter start-up and imports count) and whether torch got imported.
Run: `QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_startup.py`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import sys, time, psutil
from PySide6.QtWidgets import QApplication
from branchscope.app.main_window import MainWindow
app = QApplication([])
window = MainWindow()
window.resize(1600, 1000)
window.show()
app.processEvents()
shown = time.time() - psutil.Process().create_time()
print(f'{{"seconds": {shown:.4f}, "torch_imported": {str("torch" in sys.modules).lower()}}}')
"""


def main() -> int:
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    times, torch_seen = [], False
    for _ in range(7):
        out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(row["seconds"])
        torch_seen |= row["torch_imported"]
    median = statistics.median(times)
    print(f"launch to window shown: median {median:.3f} s, min {min(times):.3f} s, max {max(times):.3f} s (goal <= 1.5 s)")
    print(f"torch imported by the GUI process: {torch_seen}")
    result = {"median_s": median, "runs_s": times, "torch_imported": torch_seen}
    path = ROOT / "benchmarks" / "results" / "startup.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
