"""The kind e2e scripts' flow, run against stand-in ``kind``/``docker``/``kubectl``/``helm``.

No Docker here, so the scripts cannot really run (e2e/README.md). These stand-ins
record every call and answer like the real tools would, so the test checks what
the scripts would do: the kind node config (GPU label, pending taint), the
image build through ``make images`` and the load into kind, the helm install
with those images, the node registration, the wait for a final phase, and the
teardown, in that order. It does not prove that kind, the images or the chart
work on a real cluster.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuaccept.testsupport.chart_rbac import chart_dir
from gpuaccept.testsupport.chart_rbac import helm as helm_cli

ROOT = Path(__file__).resolve().parents[2]

SHIM = r"""#!/usr/bin/env bash
# Stand-in for a CLI: log the call, answer like the real tool.
tool="$(basename "$0")"
printf '%s %s\n' "${tool}" "$*" >>"${SHIM_LOG}"
args=" $* "
case "${tool}" in
  kind)
    if [[ "${args}" == *" create cluster "* ]]; then
      while [[ $# -gt 0 ]]; do
        if [[ "$1" == "--config" ]]; then cp "$2" "${SHIM_DIR}/kind-config.yaml"; fi
        shift
      done
    fi
    ;;
  kubectl)
    if [[ "${args}" == *"{.spec.taints[*].key}"* ]]; then
      printf 'gpuaccept.io/pending'
    elif [[ "${args}" == *"--field-selector spec.nodeName="* ]]; then
      printf 'gpu-operator-node-feature-discovery-worker-x7k2=Running\n'
    elif [[ "${args}" == *"{.status.phase}"* ]]; then
      printf '%s' "${SHIM_PHASE:-Held}"
    elif [[ "${args}" == *"gpu\.present"* ]]; then
      printf 'true'
    elif [[ "${args}" == *"allocatable"* ]]; then
      printf '8'
    elif [[ "${args}" == *" logs "* ]]; then
      printf 'node gpuaccept-e2e-worker carries a pending taint and no policy matches it\n'
    fi
    ;;
esac
exit 0
"""


@pytest.fixture
def shims(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("kind", "docker", "kubectl", "helm"):
        path = bin_dir / tool
        path.write_text(SHIM)
        path.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SHIM_LOG": str(tmp_path / "calls.log"),
        "SHIM_DIR": str(tmp_path),
        "TIMEOUT_SECONDS": "30",
        "POLL_SECONDS": "0",
    }


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "e2e" / script)], env=env, capture_output=True, text=True, check=False, cwd=ROOT
    )


def test_run_sh_flow(shims: dict[str, str], tmp_path: Path) -> None:
    proc = _run("run.sh", shims)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()

    def index(prefix: str) -> int:
        found = [i for i, call in enumerate(calls) if call.startswith(prefix)]
        assert found, f"no call starting with {prefix!r} in:\n" + "\n".join(calls)
        return found[0]

    order = [
        index("kind create cluster --name gpuaccept-e2e"),
        index("docker build -f operator/Dockerfile -t ghcr.io/gpuaccept/operator:e2e ."),
        index("docker build -f probes/Dockerfile -t ghcr.io/gpuaccept/probe:e2e ."),
        index("kind load docker-image --name gpuaccept-e2e ghcr.io/gpuaccept/operator:e2e"),
        index("helm upgrade --install gpuaccept"),
        index("kubectl --context kind-gpuaccept-e2e -n gpuaccept-system rollout status"),
        index("kubectl --context kind-gpuaccept-e2e label node gpuaccept-e2e-worker"),
        index("kubectl --context kind-gpuaccept-e2e get nodeacceptance gpuaccept-e2e-worker"),
        index("kind delete cluster --name gpuaccept-e2e"),
    ]
    assert order == sorted(order), "\n".join(calls)

    helm = calls[index("helm upgrade --install")]
    for expected in (
        "image.repository=ghcr.io/gpuaccept/operator",
        "image.tag=e2e",
        "image.pullPolicy=Never",
        "probe.image.repository=ghcr.io/gpuaccept/probe",
        "probe.runtimeClassName=",  # GPU=0: no NVIDIA runtime in kind
        "--namespace gpuaccept-system --create-namespace",
        "--kube-context kind-gpuaccept-e2e",
    ):
        assert expected in helm, helm
    # The values install.sh passes are valid for the chart (values schema included).
    words = helm.split()
    sets = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    assert len(sets) > 8
    rendered = helm_cli(
        "template", "gpuaccept", str(chart_dir()), *[f"--set={value}" for value in sets]
    ).stdout
    assert "ghcr.io/gpuaccept/operator:e2e" in rendered
    assert "--probe-image=ghcr.io/gpuaccept/probe:e2e" in rendered
    assert "node-role.kubernetes.io/control-plane" in rendered
    # The pending taint was there already: no second taint call.
    assert not any(call.startswith("kubectl --context kind-gpuaccept-e2e taint") for call in calls)

    config = (tmp_path / "kind-config.yaml").read_text()
    assert "nvidia.com/gpu.present" in config
    assert "key: gpuaccept.io/pending" in config
    assert "nvidia-container-devices" not in config  # GPU=0


def test_gpu_mode_mounts_devices_and_keeps_the_runtime_class(
    shims: dict[str, str], tmp_path: Path
) -> None:
    env = {**shims, "GPU": "1", "KEEP": "1", "SHIM_PHASE": "Accepted"}
    proc = _run("run.sh", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert "probe.runtimeClassName=" not in calls
    assert "kind delete cluster" not in calls  # KEEP=1
    config = (tmp_path / "kind-config.yaml").read_text()
    assert "containerPath: /var/run/nvidia-container-devices/all" in config


def test_wait_fails_when_no_final_phase(shims: dict[str, str], tmp_path: Path) -> None:
    env = {**shims, "SHIM_PHASE": "Probing", "TIMEOUT_SECONDS": "1"}
    proc = _run("wait-decided.sh", env)
    assert proc.returncode != 0
    assert "was not decided" in proc.stderr
    assert "logs deployment/gpuaccept" in (tmp_path / "calls.log").read_text()


def test_gpu_operator_scenario_flow(shims: dict[str, str], tmp_path: Path) -> None:
    proc = _run("gpu-operator.sh", shims)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()

    def index(prefix: str) -> int:
        found = [i for i, call in enumerate(calls) if call.startswith(prefix)]
        assert found, f"no call starting with {prefix!r} in:\n" + "\n".join(calls)
        return found[0]

    values = chart_dir() / "examples" / "gpu-operator-values.yaml"
    order = [
        index("kind create cluster --name gpuaccept-e2e"),
        index("helm repo add nvidia https://helm.ngc.nvidia.com/nvidia"),
        index("helm upgrade --install gpu-operator nvidia/gpu-operator"),
        index("kubectl --context kind-gpuaccept-e2e -n gpu-operator get pods --field-selector"),
        index("docker build -f probes/Dockerfile"),
        index("helm upgrade --install gpuaccept"),
        index("kubectl --context kind-gpuaccept-e2e -n gpuaccept-system logs deployment/gpuaccept"),
        index("kind delete cluster --name gpuaccept-e2e"),
    ]
    assert order == sorted(order), "\n".join(calls)
    operator = calls[index("helm upgrade --install gpu-operator")]
    assert f"--values {values}" in operator  # the shipped values, as install.md says
    # GPU=0: gpuaccept watches every node, and reports the unlabelled one soon
    gpuaccept = calls[index("helm upgrade --install gpuaccept")]
    assert "operator.watchNodeSelector=" in gpuaccept
    assert "operator.unmatchedGraceSeconds=30" in gpuaccept
    # the worker joins under the pending taint and WITHOUT the GPU label: the GPU
    # Operator (from NFD's labels) must set it
    config = (tmp_path / "kind-config.yaml").read_text()
    assert "key: gpuaccept.io/pending" in config
    assert "nvidia.com/gpu.present" not in config


def test_gpu_operator_scenario_with_gpus_waits_for_the_verdict(
    shims: dict[str, str], tmp_path: Path
) -> None:
    env = {**shims, "GPU": "1", "SHIM_PHASE": "Held"}
    proc = _run("gpu-operator.sh", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert "get nodeacceptance gpuaccept-e2e-worker" in calls
    assert "operator.watchNodeSelector=" not in calls
