# tinyol: the two commands a newcomer needs are `make demo` and `make test`.
# Both run scripts/setup.sh first (idempotent; about a second once installed).

VENV      := .venv
PY        := $(VENV)/bin/python
PYTEST    := $(PY) -m pytest
export PLATFORMIO_CORE_DIR := $(CURDIR)/.pio-core
export PYTHONDONTWRITEBYTECODE := 1
# Parallel test workers (pytest-xdist). Most of the suite waits on emulators and builds, so more
# workers than cores pays on 2 cores (docs/project.md has the measurements); JOBS=1 runs serially.
# --dist loadfile: a file's tests share one worker, so its module fixtures (exports, builds) run once.
JOBS      ?= 4
XDIST     := $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile)

.PHONY: setup demo test test-fast firmware bench study clean help

help:
	@echo "make demo       build the firmware, boot it in QEMU, stream digits, show it learn"
	@echo "make test       all tests (host C, protocol, learner, kernels, QEMU, native, Renode checks)"
	@echo "make test-fast  the quick inner-loop subset (no emulator boots, no TensorFlow)"
	@echo "make firmware   build every board's firmware with PlatformIO (offline)"
	@echo "make bench      instruction counts under QEMU -icount (+ Cortex-M4 cycle estimates) -> docs/benchmarks.md"
	@echo "make study      the forgetting / latent-replay study -> docs/study.md"
	@echo "make setup      install what is missing (apt packages, .venv, PlatformIO core)"

setup:
	@scripts/setup.sh

demo: setup
	$(VENV)/bin/tinyol demo

test: setup
	$(PYTEST) -q -ra $(XDIST)

test-fast: setup
	$(PYTEST) -q -ra $(XDIST) -m "not slow"

firmware: setup
	@for e in nucleo_l476rg nucleo_l432kc disco_l475vg_iot01a nucleo_l4r5zi native; do \
		$(VENV)/bin/tinyol build --board $$e || exit 1; done

bench: setup
	$(VENV)/bin/tinyol bench $(if $(wildcard ../shared/tflm),--tflm ../shared/tflm --cycles)

# the studies live beside the product (studies/tinyol_studies/, not in the wheel)
study: setup
	PYTHONPATH=host:studies $(PY) -m tinyol_studies.replay
	PYTHONPATH=host:studies $(PY) -m tinyol_studies.depth --json docs/study_depth.json

clean:
	rm -rf .pio build
