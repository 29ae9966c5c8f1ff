"""The CRDs' upgrade paths without a git checkout, on the real kube-apiserver.

Two releases: the gpuaccept-crds chart takes over CRDs a first install created
(--take-ownership), a `helm upgrade` to a newer chart version changes them, and
`helm uninstall` leaves them (helm.sh/resource-policy: keep).

One release: the gpuaccept chart with crds.enabled (and --skip-crds) does the same
with its own crds/ rendered as templates, beside the operator."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.testsupport.chart_rbac import apply_crds, helm
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD_CHART = ROOT / "charts" / "gpuaccept-crds"
CHART = ROOT / "charts" / "gpuaccept"
RELEASE = "gpuaccept-crds-test"
NAMESPACE = "gpuaccept-system"
NA_CRD = "nodeacceptances.gpuaccept.io"


def _crd(cp: ControlPlane) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(cp.kubectl("get", "crd", NA_CRD, "-o", "json").stdout)
    return obj


def _next_chart(tmp_path: Path, source: Path = CRD_CHART, crds: str = "files") -> Path:
    """The chart as its next version would ship: a new printer column on NodeAcceptance."""
    chart = tmp_path / source.name
    shutil.copytree(source, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.1.1-next"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    path = chart / crds / "gpuaccept.io_nodeacceptances.yaml"
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["versions"][0]["additionalPrinterColumns"].append(
        {"name": "Upgraded", "type": "string", "jsonPath": ".status.reason"}
    )
    path.write_text(yaml.safe_dump(crd))
    return chart


def test_crd_chart_takes_over_upgrades_and_keeps(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    apply_crds(cp)  # as the gpuaccept chart's crds/ (or kubectl apply) created them
    # --force-conflicts: the CRDs' fields may still be owned by whoever applied them
    # first (kubectl, the gpuaccept chart's crds/); this chart alone owns them now.
    common = ("-n", NAMESPACE, "--create-namespace", "--wait", "--force-conflicts")
    try:
        helm("upgrade", "--install", RELEASE, str(CRD_CHART), "--take-ownership", *common,
             kubeconfig=cp.kubeconfig)  # fmt: skip
        crd = _crd(cp)
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE

        helm("upgrade", RELEASE, str(_next_chart(tmp_path)), *common, kubeconfig=cp.kubeconfig)
        columns = _crd(cp)["spec"]["versions"][0]["additionalPrinterColumns"]
        assert "Upgraded" in [c["name"] for c in columns]

        helm("uninstall", RELEASE, "-n", NAMESPACE, kubeconfig=cp.kubeconfig)
        assert _crd(cp)["metadata"]["name"] == NA_CRD  # kept
    finally:
        helm("uninstall", RELEASE, "-n", NAMESPACE, kubeconfig=cp.kubeconfig, check=False)
        apply_crds(cp)  # back to the committed CRDs for later tests


def test_one_release_with_crds_enabled_takes_over_upgrades_and_keeps(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    apply_crds(cp)  # as an earlier install's crds/ (or kubectl apply) created them
    release, namespace = "gpuaccept-one", "gpuaccept-one"
    # --skip-crds: crds/ stays out; the CRDs are this release's templates instead.
    common = (
        "-n", namespace, "--create-namespace", "--skip-crds", "--force-conflicts",
        "--set", "crds.enabled=true", "--set", "defaultPolicy.name=one-release",
    )  # fmt: skip
    try:
        helm("upgrade", "--install", release, str(CHART), "--take-ownership", *common,
             kubeconfig=cp.kubeconfig)  # fmt: skip
        crd = _crd(cp)
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        # the release's policy went in against the CRDs it now owns
        assert cp.kubectl("get", "nap", "one-release").returncode == 0

        helm("upgrade", release, str(_next_chart(tmp_path, CHART, "crds")), *common,
             kubeconfig=cp.kubeconfig)  # fmt: skip
        columns = _crd(cp)["spec"]["versions"][0]["additionalPrinterColumns"]
        assert "Upgraded" in [c["name"] for c in columns]

        helm("uninstall", release, "-n", namespace, kubeconfig=cp.kubeconfig)
        assert _crd(cp)["metadata"]["name"] == NA_CRD  # kept
    finally:
        helm("uninstall", release, "-n", namespace, kubeconfig=cp.kubeconfig, check=False)
        cp.kubectl("delete", "nap", "one-release", "--ignore-not-found", check=False)
        cp.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        apply_crds(cp)  # back to the committed CRDs for later tests
