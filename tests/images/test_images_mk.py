"""`make images-check` runs outside CI (it builds a 6.7 GB root filesystem), so
the files it names are checked here: a profile renamed or removed fails this
test instead of the next manual images-check."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_profile_images_check_names_exists() -> None:
    text = (ROOT / "mk" / "images.mk").read_text()
    named = set(re.findall(r"profiles/[\w./-]+\.yaml", text))
    assert named, "images.mk names no profile"
    assert {p for p in named if not (ROOT / p).is_file()} == set()
