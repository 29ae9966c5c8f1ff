# The probe agent (issue 2).
#   make test-probe     probe unit, CLI and torch.distributed (gloo) tests
#   make device-check   on a GPU host: the real probe + tests/device (scripts/device-check.sh)
.PHONY: test-probe device-check

test-probe: venv
	$(VENV)/bin/python -m pytest -q -m "not device" tests/probe tests/device

device-check:
	scripts/device-check.sh $(OUT)
