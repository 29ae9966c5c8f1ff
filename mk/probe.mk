# The probe agent (issue 2).
#   make test-probe     probe unit, CLI and torch.distributed (gloo) tests
#   make device-wheels  on a machine with network: the wheels of the probe's small
#                       dependencies for the GPU host's Python, into $(DEVICE_WHEELS)
#                       (ignored by git; carry it to the GPU host with the tree)
#   make device-check   on a GPU host: scripts/device-check.sh (offline, one GPU is enough)
.PHONY: test-probe device-check device-wheels

# The GPU host's Python (this project's device machines: 3.12) and its platforms.
DEVICE_PYTHON_VERSION ?= 3.12
DEVICE_PLATFORMS ?= manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
DEVICE_WHEELS ?= .device-wheels
# The versions this project is tested with (the venv's), so the GPU host runs the same.
DEVICE_PACKAGES = pydantic nvidia-ml-py rich PyYAML pytest pytest-timeout

test-probe: venv
	$(VENV)/bin/python -m pytest -q -m "not device" tests/probe tests/device

device-wheels: venv
	rm -rf $(DEVICE_WHEELS)
	$(VENV)/bin/python -m pip download --quiet --disable-pip-version-check \
	  --only-binary=:all: --implementation cp --python-version $(DEVICE_PYTHON_VERSION) \
	  $(addprefix --platform ,$(DEVICE_PLATFORMS)) --dest $(DEVICE_WHEELS) \
	  $$($(VENV)/bin/python -c 'import sys; from importlib.metadata import version; \
	    print(" ".join(f"{n}=={version(n)}" for n in sys.argv[1:]))' $(DEVICE_PACKAGES))
	@du -sh $(DEVICE_WHEELS); ls $(DEVICE_WHEELS)

device-check:
	DEVICE_WHEELS=$(DEVICE_WHEELS) scripts/device-check.sh $(OUT)
