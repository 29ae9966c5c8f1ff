"""The benchmark's modules live in ``bench/`` at the repository root (not in the
installed package); make them importable for the tests here."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
