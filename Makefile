# make lab   create .venv, install the course, start JupyterLab on the chapters
# make test  create .venv, install the course, run every test (kernels, model, notebooks)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tritonllm-installed
LAB_ARGS ?=

.PHONY: install lab test exercises student-copy gpu-check clean

$(STAMP): requirements.txt pyproject.toml scripts/install.py
	python3 scripts/install.py --venv $(VENV)

install: $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

test: $(STAMP)
	TRITONLLM_KERNELS=solutions $(PY) -m pytest -q

exercises: $(STAMP)   ## regenerate exercises/ from solutions/
	$(VENV)/bin/tritonllm-course make-exercises

student-copy: $(STAMP)   ## make DEST=dir: the course without solutions/
	$(VENV)/bin/tritonllm-course student-copy $(DEST)

gpu-check:   ## on a GPU machine: GPU tests, notebooks, benchmarks -> $(OUT)
	scripts/gpu_check.sh $(OUT)

clean:
	rm -rf $(VENV) .pytest_cache
