"""Every generator of the repository, in the order their inputs need: ``make generate``
runs them all, ``make generate-check`` (and tests/test_generated.py) only reports
what is stale. A generator with its own make target (``make crds``, ``make docs``, …)
is a step here too: tests/test_generated.py fails on a target of mk/*.mk that has a
``-check`` twin and is not a step.

    python3 hack/generate.py           write every generated file
    python3 hack/generate.py --check   exit 1 naming each stale step
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CRD_DIRS = ("crds", "charts/gpuaccept/crds", "charts/gpuaccept-crds/files")


@dataclass(frozen=True)
class Step:
    target: str  # its make target (mk/*.mk), or the name it goes by here
    writes: str  # what it writes, for people
    argv: tuple[str, ...]  # run with the venv's python; --check appended to check
    env: tuple[tuple[str, str], ...] = ()


OUT_DIRS = tuple(arg for d in CRD_DIRS for arg in ("--out", d))
STEPS = (
    Step(
        "crds", "the CRDs (crds/, the charts' copies)", ("-m", "gpuaccept.cli", "crds", *OUT_DIRS)
    ),
    Step(
        "default-policy",
        "policies/default-h100-h200.yaml, from each check's CheckSpec.shipped",
        ("-m", "gpuaccept.checks.gen.default_policy"),
    ),
    # after the default policy: docs/probe.md's budget table reads it
    Step(
        "docs", "the docs' generated sections, from the registry", ("-m", "gpuaccept.cli", "docs")
    ),
    # after the CRDs: values.schema.json takes defaultPolicy from the policy CRD
    Step("chart-docs", "the chart's values.schema.json", ("hack/chart/values_schema.py",)),
    Step("chart-docs", "the chart README's values table", ("hack/chart/values_docs.py",)),
    Step(
        "captures-table",
        "docs/probe.md's capture table",
        ("-m", "gpuaccept.testsupport.captures.table"),
    ),
    # after the default policy: the pods carry the probe policy
    Step(
        "pod-manifests",
        "tests/operator/core/pod_manifests.golden.json",
        ("tests/operator/core/test_pod_manifests_rendered.py",),
        env=(("PYTHONPATH", "tests/operator"),),
    ),
)


def run(
    step: Step, *, check: bool, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    argv = [python, *step.argv, *(["--check"] if check else [])]
    env = {**os.environ, **dict(step.env)}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run (or check) every generator.")
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    args = parser.parse_args(argv)
    failed = []
    for step in STEPS:
        done = run(step, check=args.check)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            failed.append(f"{step.target} ({step.writes})")
    if failed:
        verb = "stale" if args.check else "failed"
        sys.stderr.write(f"{verb}: {'; '.join(failed)}; run `make generate`\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
