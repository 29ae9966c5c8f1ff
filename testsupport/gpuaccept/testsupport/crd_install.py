"""Install the project's CRDs on a control plane and wait until they are served.

Shared by the integration tests, ``make demo`` and the benchmark (test support,
not part of the shipped operator: in a cluster, Helm installs the CRDs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuaccept.testsupport.controlplane import repo_root


def apply_crds(
    api: client.ApiClient, directory: Path | None = None, *, timeout: float = 60.0
) -> list[str]:
    """Create or replace every CRD in ``directory`` (default: the repo's ``crds/``),
    then wait until each is ``Established``. Returns the CRD names."""
    ext = client.ApiextensionsV1Api(api)
    names: list[str] = []
    for path in sorted((directory or repo_root() / "crds").glob("*.yaml")):
        for body in yaml.safe_load_all(path.read_text()):
            if not body:
                continue
            name = body["metadata"]["name"]
            names.append(name)
            try:
                ext.create_custom_resource_definition(body)
            except ApiException as error:
                if error.status != 409:
                    raise
                existing: Any = ext.read_custom_resource_definition(name)
                body["metadata"]["resourceVersion"] = existing.metadata.resource_version
                ext.replace_custom_resource_definition(name, body)
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(ext, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} was not Established within {timeout:.0f} s")
            time.sleep(0.2)
    return names


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    crd: Any = ext.read_custom_resource_definition(name)
    conditions = (crd.status and crd.status.conditions) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)
