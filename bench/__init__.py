"""The fleet benchmark (issue 6): the operator against the API request floor.

Run it with ``make bench-quick`` (N=100) or ``make bench`` (N=100, 500, 2000);
``python -m bench.fleet_bench --help`` lists the options. See docs/benchmarks.md.
"""
