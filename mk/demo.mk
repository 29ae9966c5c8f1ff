# make demo: the operator on the local control plane with a simulated GPU fleet
# (see scripts/demo.py). KEEP=1 leaves it running; make demo-down stops what the
# demo started (the control plane too, if it started it); make cluster-down stops
# the control plane and any demo attached to it. kube-scheduler (mk/node.mk) allocates
# the DRA nodes' probe claims.

.PHONY: demo demo-down

demo: venv $(BIN)/controlplane $(BIN)/kubectl $(BIN)/kube-scheduler
	$(PY) scripts/demo.py

demo-down: venv
	$(PY) scripts/demo.py down
