"""The gpuaccept-crds chart: the CRDs as ordinary chart objects, so `helm upgrade`
upgrades them (Helm never upgrades a chart's crds/ directory). They are the
generated CRDs unchanged, plus labels and the keep annotation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuaccept.testsupport.chart_rbac import chart_dir, helm

ROOT = Path(__file__).resolve().parents[2]
CRD_CHART = ROOT / "charts" / "gpuaccept-crds"


def _render(*args: str) -> list[dict[str, Any]]:
    out = helm("template", "gpuaccept-crds", str(CRD_CHART), *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_lint() -> None:
    proc = helm("lint", "--strict", str(CRD_CHART), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_files_are_the_generated_crds() -> None:
    files = sorted(p.name for p in (CRD_CHART / "files").glob("*.yaml"))
    assert files == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for name in files:
        assert (CRD_CHART / "files" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"{name}: run `make crds`"
        )


def test_rendered_crds_are_the_generated_ones_plus_metadata() -> None:
    """Rendering through fromYaml/toYaml changes no value (numbers, strings, CEL)."""
    rendered = {d["metadata"]["name"]: d for d in _render()}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        generated = yaml.safe_load(path.read_text())
        crd = rendered.pop(generated["metadata"]["name"])
        metadata = crd.pop("metadata")
        assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert metadata["labels"]["app.kubernetes.io/part-of"] == "gpuaccept"
        generated.pop("metadata")
        assert crd == generated, path.name
    assert not rendered


def test_keep_can_be_turned_off_and_labels_added() -> None:
    for crd in _render("--set", "keep=false", "--set", "commonLabels.team=gpu"):
        assert "annotations" not in crd["metadata"]
        assert crd["metadata"]["labels"]["team"] == "gpu"


def test_versions_follow_the_operator_chart() -> None:
    ours = yaml.safe_load((CRD_CHART / "Chart.yaml").read_text())
    operator = yaml.safe_load((chart_dir() / "Chart.yaml").read_text())
    assert (ours["version"], ours["appVersion"]) == (operator["version"], operator["appVersion"])
