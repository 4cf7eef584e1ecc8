# `make run` and `make test` create .venv on first use and install the project into it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pyproject.toml takes a range of torch; constraints-dev.txt pins the development build (2.13.0, served
# locally as a CPU build on these machines): the pin keeps pip off CUDA wheels.
CONSTRAINTS := constraints-dev.txt
PIP_INSTALL := $(BIN)/python -m pip install --disable-pip-version-check -q -c $(CONSTRAINTS)

.PHONY: run test check lint docs bench bench-models bench-models-quick screenshots clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[test,dev]'
	touch $(STAMP)

run: $(STAMP)
	@$(BIN)/branchscope

test: check
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# ruff, the import contracts of ARCHITECTURE.md (pyproject's [tool.importlinter]), mypy on the Qt-free
# engines. mypy resolves branchscope.* through a link to this folder: the editable install maps the
# folders with an import hook, which mypy cannot follow.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	@mkdir -p $(VENV)/mypy-path && ln -sfn "$(CURDIR)" $(VENV)/mypy-path/branchscope
	MYPYPATH=$(VENV)/mypy-path $(BIN)/mypy -p branchscope.profiling

lint: check

# docs/cli.md, the command-line reference, from the parsers (tests/app/test_cli_reference.py checks it).
docs: $(STAMP)
	$(BIN)/python -m branchscope.app.cli_reference docs/cli.md

bench: $(STAMP)
	$(PIP_INSTALL) -e '.[bench]'
	$(BIN)/python benchmarks/bench_load_trace.py
	$(BIN)/python benchmarks/bench_many_lanes.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python benchmarks/bench_open_window.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python benchmarks/bench_timeline.py
	$(BIN)/python benchmarks/bench_fork_speedup.py
	$(BIN)/python benchmarks/bench_threads.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_paired.py
	$(BIN)/python benchmarks/bench_numbers.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/bench_snapshot.py
	$(BIN)/python benchmarks/bench_ddp.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python benchmarks/bench_startup.py

# Real models (benchmarks/bench_real_models.py): torchvision and timm model definitions beside the
# Hugging Face ones, installed into a folder of their own (never .venv: transformers imports any
# torchvision it finds, and the index's torchvision is a CUDA build whose compiled ops do not load
# with this CPU torch, so it would break the tests' Hugging Face models). --no-deps keeps pip off
# torch; the benchmark's model files put that folder on sys.path and stand in for torchvision's
# compiled-op registrations; timm's other needs (pyyaml, huggingface_hub, safetensors) come with
# transformers, of the test extra. The last line checks that torch is still the local 2.13.0 build.
MODEL_EXTRAS := build/model-extras
$(MODEL_EXTRAS)/.installed: $(STAMP)
	rm -rf $(MODEL_EXTRAS)
	$(PIP_INSTALL) --no-deps --target $(MODEL_EXTRAS) 'torchvision==0.28.0' 'timm==1.0.29' pillow
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

bench-models: $(MODEL_EXTRAS)/.installed
	$(BIN)/python benchmarks/bench_real_models.py

bench-models-quick: $(MODEL_EXTRAS)/.installed
	$(BIN)/python benchmarks/bench_real_models.py --quick

# The README's pictures: the inception demo sequential and forked (2 inter-op x 1 intra-op threads),
# the two compared side by side (with a sequential 1x1 baseline), the small-ops demo on Python threads
# (threads mode: the GIL band), a thread sweep's heatmap, and the
# memory of a built DataParallel-like step over 4 GPUs (tests/builders/memory.py writes it).
# Their runs go to build/screens (each folder replaced by the next `make screenshots`).
SHOTS := build/screens
screenshots: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope --demo inception --mode sequential --interop 2 --intra 1 \
	  --screenshot assets/screenshots/inception-sequential.png
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope --demo inception --mode fork --interop 2 --intra 1 \
	  --screenshot assets/screenshots/inception-fork.png
	$(BIN)/branchscope profile --demo inception --mode sequential --interop 1 --intra 1 --quiet --out $(SHOTS)/seq-1x1
	$(BIN)/branchscope profile --demo inception --mode fork --interop 2 --intra 1 --quiet --out $(SHOTS)/fork-2x1
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope compare $(SHOTS)/seq-1x1 $(SHOTS)/fork-2x1 \
	  --screenshot assets/screenshots/compare.png
	$(BIN)/branchscope profile --demo inception --mode threads --interop 2 --intra 1 --quiet --out $(SHOTS)/threads-2x1
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope compare $(SHOTS)/threads-2x1 $(SHOTS)/fork-2x1 \
	  --screenshot assets/screenshots/compare-threads.png
	$(BIN)/branchscope profile --demo small-ops --mode threads --interop 2 --intra 1 --quiet --out $(SHOTS)/small-ops-threads-2x1
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open $(SHOTS)/small-ops-threads-2x1 \
	  --screenshot assets/screenshots/small-ops-threads.png
	$(BIN)/branchscope sweep --demo lstm-ensemble --modes sequential,fork --interop 1,2 --intra 1,2 --steps 5 \
	  --out $(SHOTS)/sweep-lstm > /dev/null
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open $(SHOTS)/sweep-lstm --screenshot assets/screenshots/sweep.png
	$(BIN)/python -c "from tests.builders.memory import write_four_gpu_trace as w; w(__import__('pathlib').Path('$(SHOTS)/dataparallel-4gpu.json'))"
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open $(SHOTS)/dataparallel-4gpu.json --screenshot assets/screenshots/memory-run.png
	QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open $(SHOTS)/dataparallel-4gpu.json --tab memory \
	  --screenshot assets/screenshots/memory.png
	# The public two-rank trace beside the checkout (../shared/traces), when it is there.
	if [ -d ../shared/traces/hta_two_ranks ]; then QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open \
	  ../shared/traces/hta_two_ranks/rank-0.json.gz ../shared/traces/hta_two_ranks/rank-1.json.gz \
	  --screenshot assets/screenshots/two-ranks.png; fi
	# A job of 64 ranks generated from it (benchmarks/gen_rank_job.py): the ranks in view loaded.
	if [ -d ../shared/traces/hta_two_ranks ]; then rm -rf $(SHOTS)/ranks-64 && \
	  $(BIN)/python benchmarks/gen_rank_job.py $(SHOTS)/ranks-64 --ranks 64 > /dev/null && \
	  QT_QPA_PLATFORM=offscreen $(BIN)/branchscope open $(SHOTS)/ranks-64 --screenshot assets/screenshots/ranks-64.png; fi

clean:
	rm -rf $(VENV) build *.egg-info
