"""The operator's tests: ``core/`` (the pure reconcile core, on plain data) and
``runtime/`` (the cache, the executor, the loops, the command line, without a
server). Their shared helpers (the in-memory world, fabric fleets and pods) live
here, beside this file."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
