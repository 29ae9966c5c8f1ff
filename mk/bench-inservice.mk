# Health in service at N nodes (issue 23, item 8; bench/inservice_fleet.py, docs/benchmarks.md):
# the fleet benchmark's operator accepts INSVC_NODES nodes, then watches them in service
# (inService on, one watch pod per node and INSVC_WINDOW-second window, quiet reports);
# then 20 nodes get an Xid 79 in their next window. Prints requests/s against the floor
# (create + status write + delete per node and window), CPU per node-window, peak RSS,
# fatal event → quarantine taint p50/p95; exits 1 on a fatal node left untainted or a
# false quarantine.
#   make bench-inservice                                   N=500, 60 s windows (~8 min)
#   make bench-inservice INSVC_NODES=5000 INSVC_WINDOW=240 BENCH_ARGS="--warmup-windows 1.25 --steady-windows 2"

INSVC_NODES ?= 500
INSVC_WINDOW ?= 60

.PHONY: bench-inservice

bench-inservice: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.inservice_fleet --label bench-inservice-n$(INSVC_NODES) \
		--nodes $(INSVC_NODES) --window-seconds $(INSVC_WINDOW) $(BENCH_ARGS)
