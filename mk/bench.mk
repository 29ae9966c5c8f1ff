# The fleet benchmark (issue 6): N simulated GPU nodes join at once; the
# operator and the API floor script (bench/floor.py) each decide all of them on
# a fresh control plane with kube-apiserver's audit log on. See docs/benchmarks.md.
#
#   make bench-quick   N=100 (last line: bench-quick: nodes=… decided=… req_per_node=…)
#   make bench         N=100, 500, 2000 (tens of minutes on 2 cores)
#   make bench-5k      N=500, 5000 (the design target; ~6.5 min on 2 cores, nothing
#                      else running), then the CPU-per-node plot over the runs of these targets in
#                      bench/out/bench*/ (bench/out/cpu-per-node.png)
#   make bench-check   N=20, correctness only (what `make test` runs, via tests/bench)
#
#   BENCH_ARGS=...     extra options, e.g. BENCH_ARGS=--profile-operator (pyinstrument)
#                      or BENCH_ARGS=--keep-cluster; see `python -m bench.fleet_bench -h`

BENCH_PY ?= .venv/bin/python
BENCH_ARGS ?=

.PHONY: bench bench-quick bench-5k bench-check

bench: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench --nodes 100 --nodes 500 --nodes 2000 $(BENCH_ARGS)

bench-5k: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-5k --nodes 500 --nodes 5000 $(BENCH_ARGS)
	$(BENCH_PY) -m bench.plot bench/out/cpu-per-node.png bench/out/bench*/results.json

bench-quick: venv $(BIN)/controlplane
	$(BENCH_PY) -m bench.fleet_bench --label bench-quick --nodes 100 $(BENCH_ARGS)

bench-check: venv $(BIN)/controlplane
	$(BENCH_PY) -m pytest -q tests/bench
