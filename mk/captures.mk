# The capture corpus (tests/captures, issue 38): docs/probe.md's table of it is generated
# from the corpus and its replay (gpuaccept.testsupport.captures.table):
#   make captures-table        rewrite the table between <!-- BEGIN/END CAPTURES TABLE -->
#   make captures-table-check  only report a stale table (exit 1);
#                              tests/probe/test_capture_replay.py fails until you do
.PHONY: captures-table captures-table-check
captures-table: venv
	$(VENV)/bin/python -m gpuaccept.testsupport.captures.table

captures-table-check: venv
	$(VENV)/bin/python -m gpuaccept.testsupport.captures.table --check
