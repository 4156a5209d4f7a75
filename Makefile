# One command to run the main job on the embedded default, one to set up and pass the tests.
#   make demo   -> venv, install, default local model, 12 held-out mixed problems through the pipeline
#   make test   -> venv, install, services, the whole suite (core, then the vLLM and Phoenix stages)

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
DATA   ?= ../shared/data
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup model demo services test test-core test-vllm vllm-venv test-phoenix phoenix-venv lint bench train-local clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	# Made once: re-running venv over an existing one with another python3.11 first on PATH breaks it.
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: pip takes the CPU build from the machine's local wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

model: setup
	$(BIN)/conductor models pull

# The first 12 problems of the held-out mixed file (two of each of six kinds, in templates, words and facts the
# training generator never wrote), run by the trained Conductor with its workflows and a right/wrong mark
# each: different kinds get different workflows. Then, on the same 12, the pool's two models alone (smol-precise
# is the best single worker on the whole held-out file, README) and Mixture-of-Agents (the best fixed route
# there, 19 of 120). Problems are the first N of the file, not picked after the fact.
HELDOUT := reward_pipeline/evaluation/data/mixed_heldout.jsonl
DEMO_N  ?= 12
DEMO_BASELINES ?= single:smol-precise,single:smol-creative,moa
demo: model
	$(BIN)/conductor run $(HELDOUT) --limit $(DEMO_N) --show-workflows --out results/demo.jsonl
	@echo "--- the same $(DEMO_N) problems: each pool model alone, and Mixture-of-Agents (the best fixed route on all 120):"
	$(BIN)/conductor eval -b $(HELDOUT) -n $(DEMO_N) -m $(DEMO_BASELINES) -o results/demo-baselines --no-progress
	@echo "results in results/demo.jsonl and results/demo-baselines/"

services:
	scripts/ensure_services.sh

test: lint test-core test-vllm test-phoenix

# One test process per core, up to four (pytest-xdist, a file per process at a time): most of the core
# suite waits on worker processes and services, not on the CPU. The vLLM stage runs one server at a time.
test-core: model services
	$(BIN)/python -m pytest -m "not vllm and not phoenix" -q --durations=25 -n auto --maxprocesses 4 --dist loadfile

vllm-venv:
	scripts/setup_vllm_venv.sh

test-vllm: model vllm-venv
	CONDUCTOR_TEST_REQUIRE_VLLM=1 $(BIN)/python -m pytest -m vllm -q --durations=10

# A job's trace checked in Arize Phoenix, a real OTLP receiver (tests/integration/test_phoenix_trace.py):
# Phoenix in a venv of its own (it pins its own stack), the test in a process of its own (OpenTelemetry keeps
# the first tracer provider a process installs, and the core suite's tracing tests install theirs).
phoenix-venv:
	scripts/setup_phoenix_venv.sh

test-phoenix: setup services phoenix-venv
	CONDUCTOR_TEST_REQUIRE_PHOENIX=1 $(BIN)/python -m pytest -m phoenix -q --durations=5

lint: setup
	$(BIN)/ruff check conductor tasks reward_pipeline schedulers api tests benchmarks
	$(BIN)/ruff format --check conductor tasks reward_pipeline schedulers api tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# The CPU retraining run that produces the shipped adapter, on the mixed curriculum (six kinds of question
# whose best route through the local pool differs: reward_pipeline/training/curriculum.py). Warm-up: every
# one-step route of 200 problems of each kind and 200 GSM8K word problems is run (models on a private vLLM
# server, tools in their sandbox) and scored; 1,920 examples are drawn from the routes that earned reward,
# on random renumbered subsets of the pool, a fifth of them replan rounds; SFT one epoch. Then gated
# against the base model on the mixed dev set through the queue, promoted, probed on unseen benchmarks, the
# active policy exported beside the local pool, and the report drawn. CYCLES=N adds GRPO cycles on mixed
# problems of another seed (2 iterations x 6 problems x G=8 each, then a gate against the active policy);
# the default is 0: the one cycle tried (README) moved the plans towards one model and still passed the gate.
# POOL_DRAW: the shipped adapter was trained with each example's question drawn before its pool subset
# (problem-first); `make train-local POOL_DRAW=subset-first` trains the 2026-12-07 candidate's way (README).
# RESAMPLES=N asks the sampling model worker N more times on every problem no route trial solved (README).
# SEEDS="0 1" runs the warm-up once per seed (each its own problems, draw and LoRA start) and gates the soup
# of the runs, one adapter with the mean of their weight changes (README, "A second seed and the soup").
TRAIN_HOME ?= .conductor/train-local
SHIPPED    ?= conductor/config/adapters/smollm2-conductor
CYCLES     ?= 0
POOL_DRAW  ?= problem-first
RESAMPLES  ?= 0
SEEDS      ?= 0
train-local: model vllm-venv
	mkdir -p $(TRAIN_HOME) && ln -sfn $(abspath .conductor/models) $(TRAIN_HOME)/models
	for seed in $(SEEDS); do \
		CONDUCTOR_HOME=$(TRAIN_HOME) $(BIN)/conductor train warmup --mixed 200 --expressions 200 --replan-share 0.2 \
			--examples 1920 --epochs 1 --lr 1e-3 --pool-draw $(POOL_DRAW) --resamples $(RESAMPLES) --seed $$seed \
			|| exit 1; \
	done
	if [ $(words $(SEEDS)) -gt 1 ]; then CONDUCTOR_HOME=$(TRAIN_HOME) $(BIN)/conductor train soup --last $(words $(SEEDS)); fi
	CONDUCTOR_HOME=$(TRAIN_HOME) $(BIN)/conductor train online --cycles $(CYCLES) --iterations 2 --problems 6 --samples 8 \
		--mixed 50 --expressions 100 --lr 2e-4 --report-dir results/train-local
	CONDUCTOR_HOME=$(TRAIN_HOME) $(BIN)/conductor checkpoints export active --to $(SHIPPED)
	$(BIN)/python benchmarks/retraining_cpu.py --results results/train-local --db $(TRAIN_HOME)/conductor.db

# Every benchmark, building what it needs (the vLLM venv for local_inference.py). The 100k batch
# takes about 45 min on 2 cores: `python benchmarks/batch_scale.py --problems 10000,100000`.
bench: model services vllm-venv
	$(BIN)/python benchmarks/orchestration_overhead.py --litellm
	$(BIN)/python benchmarks/orchestration_overhead.py --figures
	$(BIN)/python benchmarks/step_cost.py
	$(BIN)/python benchmarks/chaos.py --problems 200 --events 2
	$(BIN)/python benchmarks/batch_scale.py --problems 10000
	$(BIN)/python benchmarks/api_load.py
	$(BIN)/python benchmarks/verifiers.py --n 50
	$(BIN)/python benchmarks/local_inference.py

clean:
	rm -rf $(VENV) .venv-vllm .venv-phoenix .conductor results
