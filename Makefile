# make lab   create .venv, install the course, start JupyterLab on the chapters
# make test  create .venv, install the course, run every test (kernels, model, notebooks)
# The course's command line is $(VENV)/bin/tritonllm-course (on PATH in JupyterLab's terminals).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tritonllm-installed
LAB_ARGS ?=

.PHONY: install lab test test-window release-check exercises student-copy student-branch gpu-check clean

$(STAMP): requirements.txt pyproject.toml scripts/install.py
	python3 scripts/install.py --venv $(VENV)

install: $(STAMP)

# JupyterLab's terminals inherit the server's PATH, .venv/bin first, so `tritonllm-course` is at hand there;
# their shell is $SHELL started as a non-login shell (a login shell would reset PATH from /etc/profile)
lab: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks --ServerApp.terminado_settings="shell_command=$${SHELL:-/bin/sh}" \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# the solutions where there are some; in a student version (no solutions/) the learner's exercises.
# JOBS pytest workers (default: one per core; a chapter's cells stay together on one), then the tests
# that assert a GPU timing or need its memory, one at a time (skipped without a GPU)
JOBS ?= auto
TEST_KERNELS = TRITONLLM_KERNELS=$(if $(wildcard solutions),solutions,exercises)
test: $(STAMP)
	$(TEST_KERNELS) $(PY) -m pytest -q -n $(JOBS) --dist load -m "not timing and not alone"
	@# exit 5 is pytest's "nothing collected": a student version whose unfilled exercises skip the timing tests'
	@# modules at import has none to run, which is no failure
	$(TEST_KERNELS) $(PY) -m pytest -q -m "timing or alone" || [ $$? -eq 5 ]

# The supported window (pyproject.toml): the kernels and the engine under the interpreter with its oldest and
# newest triton and transformers (TRITON/TRANSFORMERS), each in a venv of .venv's packages but those two
# ($(VENV)/window/triton-X-transformers-Y; only they are downloaded, no pip cache). CI runs it after `make test`;
# without the network it fails, saying so.
WINDOW ?= 3.5.0/5.23.0 3.9.0/5.25.0
# the kernels' families whole; of the engine, the runs end to end (tokens against transformers through the
# command line, a chat's chunks and turns, seeded sampling): a few minutes a version on two cores
WINDOW_TESTS ?= tests/kernels/test_rmsnorm.py tests/kernels/test_rope.py tests/kernels/test_attention.py \
	tests/kernels/test_delta_rule.py tests/kernels/test_quant.py tests/kernels/test_tma_gemm.py \
	tests/model/test_weights.py tests/model/test_engine.py::test_cli_triton_backend_gives_transformers_greedy_tokens \
	tests/model/test_engine.py::test_prompt_chunks_and_chat_turns_continue_the_same_sequence \
	tests/model/test_engine.py::test_sampling_is_seeded_through_the_sampling_kernel
test-window: $(STAMP)
	@set -e; for v in $(WINDOW); do t=$${v%/*}; h=$${v#*/}; \
		$(PY) scripts/install.py --venv $(VENV) --window $$t --transformers $$h; \
		echo "== triton $$t, transformers $$h: $(WINDOW_TESTS)"; \
		$(TEST_KERNELS) $(VENV)/window/triton-$$t-transformers-$$h/bin/python -m pytest -q -p no:cacheprovider \
			-o addopts= -n $(JOBS) $(WINDOW_TESTS); \
	done

# before committing chapters (instructors): the notebooks as they are on disk carry no outputs, every line is
# within 120 characters, exercises/ matches solutions/. (`make test` reads the chapters as committed instead:
# the outputs a learner's JupyterLab saves are the learner's.)
release-check: $(STAMP)
	TRITONLLM_RELEASE_CHECK=1 $(PY) -m pytest -q -p no:cacheprovider -o addopts= \
		tests/tools/test_notebook_metadata.py tests/tools/test_style.py
	$(VENV)/bin/tritonllm-course make-exercises --check

exercises: $(STAMP)   ## regenerate exercises/ from solutions/
	$(VENV)/bin/tritonllm-course make-exercises

student-copy: $(STAMP)   ## make DEST=dir: the course without solutions/
	$(VENV)/bin/tritonllm-course student-copy $(DEST)

student-branch: $(STAMP)   ## the student version of HEAD as a new commit on the branch `student` (BRANCH=...)
	$(VENV)/bin/tritonllm-course student-branch --branch $(or $(BRANCH),student)

PART ?= quick
OUT ?= gpu_results/$(shell date +%Y-%m-%dT%H%M%S)
gpu-check:   ## on a GPU machine: one part of the GPU verification (PART=quick, kernels, ...) -> a new $(OUT)
	scripts/gpu_check.sh $(PART) $(OUT)

clean:
	rm -rf $(VENV) .pytest_cache
