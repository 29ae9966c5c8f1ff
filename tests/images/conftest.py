"""tests/images import the Docker-free image builder (hack/images/build_image.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack" / "images"))
