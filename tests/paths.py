"""Where the tests find the project and their fixtures, whatever folder a test file is in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: The checkout's root (the repository).
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
#: Model files the tests run (build_model, example_inputs).
MODELS = FIXTURES / "models"
#: Real traces from public projects, beside the checkout (never copied into it).
SHARED_TRACES = ROOT.parent / "shared" / "traces"
