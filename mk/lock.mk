# Pinned Python dependencies (issue 26): one lock file per environment the project
# ships or tests in, made by uv (`uv pip compile --universal --generate-hashes`)
# from pyproject.toml and requirements/pins.txt. docs/install.md, "Pinned
# dependencies", says when and how to update them.
#
#   make lock          re-resolve after a pyproject.toml or pins.txt change; versions
#                      already in a lock stay where they are when they still fit
#   make lock-upgrade  move every lock to the newest versions that fit
#   make lock-check    exit 1 when a lock is not what `make lock` writes (needs PyPI)
#
#   requirements/dev.txt       the dev/test venv (make venv): every extra
#   requirements/operator.txt  operator/Dockerfile: the operator extra
#   requirements/probe.txt     probes/Dockerfile: the probe extra
#   requirements/uv.txt        uv itself, with hashes, installed by pip first
#
# The image locks are resolved with the dev lock as a constraint, so every package
# they share has the dev venv's version: the tests run on the probe image's torch,
# CUDA libraries and NCCL. tests/contracts/test_locks.py fails when a lock and
# pyproject.toml disagree, and when the running venv holds a version the lock does not.

LOCK_DIR := requirements
UV_COMPILE = $(UV) --quiet pip compile pyproject.toml --universal --python-version 3.11 \
  --generate-hashes --no-strip-extras --annotation-style split \
  --constraint $(LOCK_DIR)/pins.txt --custom-compile-command "make lock" $(LOCK_ARGS)
LOCK_ARGS ?=

.PHONY: lock lock-upgrade lock-check

lock: $(UV)
	$(UV_COMPILE) --extra probe --extra operator --extra dev -o $(LOCK_DIR)/dev.txt
	$(UV_COMPILE) --extra operator --constraint $(LOCK_DIR)/dev.txt -o $(LOCK_DIR)/operator.txt
	$(UV_COMPILE) --extra probe --constraint $(LOCK_DIR)/dev.txt -o $(LOCK_DIR)/probe.txt
	@uv_version=$$(awk -F'[= ]+' '/^uv==/{print $$2; exit}' $(LOCK_DIR)/dev.txt); \
	  echo "uv==$$uv_version" | $(UV) --quiet pip compile - --universal --python-version 3.11 \
	    --generate-hashes --custom-compile-command "make lock" -o $(LOCK_DIR)/uv.txt

lock-upgrade:
	$(MAKE) --no-print-directory lock LOCK_ARGS=--upgrade

lock-check: $(UV)
	@rm -rf .cache/lock-check && mkdir -p .cache/lock-check && cp $(LOCK_DIR)/*.txt .cache/lock-check/
	$(MAKE) --no-print-directory lock
	@status=0; for f in .cache/lock-check/*.txt; do \
	  cmp -s $$f $(LOCK_DIR)/$$(basename $$f) || { echo "stale: $(LOCK_DIR)/$$(basename $$f)"; status=1; }; \
	done; exit $$status

# A probe lock for another torch (it pins its own CUDA and NCCL), for
# `docker build --build-arg PROBE_LOCK=requirements/probe-torch$(TORCH_VERSION).txt`:
#   make probe-lock-torch TORCH_VERSION=2.5.1
.PHONY: probe-lock-torch
probe-lock-torch: $(UV)
	@test -n "$(TORCH_VERSION)" || { echo "usage: make probe-lock-torch TORCH_VERSION=X.Y.Z"; exit 2; }
	@mkdir -p .cache && sed 's/^torch==.*/torch==$(TORCH_VERSION)/' $(LOCK_DIR)/pins.txt > .cache/pins-torch.txt
	$(UV) --quiet pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
	  --no-strip-extras --annotation-style split --constraint .cache/pins-torch.txt \
	  --custom-compile-command "make probe-lock-torch TORCH_VERSION=$(TORCH_VERSION)" \
	  --extra probe -o $(LOCK_DIR)/probe-torch$(TORCH_VERSION).txt
