# The fleet benchmark (issue 6): N simulated GPU nodes join at once; the
# operator and the API floor script (bench/floor.py) each decide all of them on
# a fresh control plane with kube-apiserver's audit log on. See docs/benchmarks.md.
#
#   make bench-quick   N=100 (last line: bench-quick: nodes=… decided=… req_per_node=…)
#   make bench         N=100, 500, 2000 (tens of minutes on 2 cores)
#   make bench-5k      N=500, 5000 (the design target; ~6.5 min on 2 cores, nothing
#                      else running), then the CPU-per-node plot over the runs of these targets in
#                      bench/out/bench*/ (bench/out/cpu-per-node.png)
#   make bench-full    the join with the full policy: in service (watch pods) and
#                      re-verification on, at their defaults (--full-policy), at FULL_NODES
#                      (500 5000); the join's accounting adds the in-service loop
#   make bench-check   N=10-30, correctness and the per-loop request accounting of the join,
#                      re-verification and in service (what `make test` runs, via tests/bench)
#   make bench-reverify  the re-verification phase (issue 24; bench/reverify_fleet.py): the
#                      operator accepts REVERIFY_NODES (5000) healthy nodes, then re-verifies
#                      them for REVERIFY_SECONDS (300) under reverify (idle 10 s, period 60 s,
#                      sample 30 s), quarantineRate 1%/60 s, maxQuarantined 2%, every 50th node
#                      busy; exits 1 if more were out at once, or taken out per window, than allowed;
#                      binds= on the last line: which of the policy's limits was reached
#   make bench-dra     the operator's requests per node with DRA-published nodes (issue 39):
#                      the same fleet at DRA_NODES (100 300), all through the device plugin
#                      (bench/out/bench-dra-none), then half of it DRA-published
#                      (bench/out/bench-dra-half; kube-scheduler allocates the probe claims)
#
#   BENCH_ARGS=...     extra options, e.g. BENCH_ARGS=--profile-operator (pyinstrument)
#                      or BENCH_ARGS=--keep-cluster; see `python -m bench.fleet_bench -h`

BENCH_PY ?= .venv/bin/python
BENCH_ARGS ?=
REVERIFY_NODES ?= 5000
REVERIFY_SECONDS ?= 300
DRA_NODES ?= 100 300
FULL_NODES ?= 500 5000

.PHONY: bench bench-quick bench-5k bench-full bench-check bench-reverify bench-dra

bench: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench --nodes 100 --nodes 500 --nodes 2000 $(BENCH_ARGS)

bench-5k: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-5k --nodes 500 --nodes 5000 $(BENCH_ARGS)
	$(BENCH_PY) -m bench.plot bench/out/cpu-per-node.png bench/out/bench*/results.json

bench-full: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-full --full-policy \
		$(foreach n,$(FULL_NODES),--nodes $(n)) $(BENCH_ARGS)

bench-quick: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-quick --nodes 100 $(BENCH_ARGS)

bench-check: venv $(BIN)/controlplane
	$(BENCH_PY) -m pytest -q tests/bench

bench-reverify: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-reverify --arms operator \
		--nodes $(REVERIFY_NODES) --fail-every 0 --reverify-seconds $(REVERIFY_SECONDS) $(BENCH_ARGS)

bench-dra: venv $(BIN)/controlplane $(BIN)/kube-scheduler
	$(BENCH_PY) -m bench.fleet_bench --label bench-dra-none --arms operator \
		$(foreach n,$(DRA_NODES),--nodes $(n)) $(BENCH_ARGS)
	$(BENCH_PY) -m bench.fleet_bench --label bench-dra-half --arms operator --dra-every 2 \
		$(foreach n,$(DRA_NODES),--nodes $(n)) $(BENCH_ARGS)
