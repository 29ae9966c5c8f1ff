"""``gpuaccept operator``: run the operator (kopf, programmatically)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf
import kubernetes
from kubernetes.client.exceptions import ApiException
from prometheus_client import start_http_server

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.operator.controller import Controller, RuntimeSettings
from gpuaccept.operator.core.judge import judge
from gpuaccept.operator.core.model import OperatorConfig
from gpuaccept.operator.handlers import build_registry, configure, node_watch_filters
from gpuaccept.operator.health import serve_health
from gpuaccept.operator.kube import LOCK_NAMESPACE, ORIGIN_STARTUP, Kube
from gpuaccept.operator.leader import LeaseSettings
from gpuaccept.operator.options import (
    OptionError,
    base_node_selector,
    check_ranges,
    dra_device_class,
    dra_drivers,
    fabric_pods,
    owned_key_prefixes,
    parser,
    pod_annotations,
    pod_labels,
    probe_env,
    probe_resources,
    probe_tolerations,
)

__all__ = ["EXIT_USAGE", "OptionError", "main", "parser", "probe_resources", "probe_tolerations"]

EXIT_USAGE = 2


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


def _setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kopf is chatty at INFO about every handler; our own logs say what happens.
    if os.environ.get("GPUACCEPT_KOPF_DEBUG") != "1":
        logging.getLogger("kopf").setLevel(max(logging.WARNING, root.level))


def _load_credentials(kubeconfig: str | None) -> kubernetes.client.Configuration | None:
    """The API server's address and credentials: the kubeconfig, else in-cluster."""
    configuration = kubernetes.client.Configuration()
    try:
        if kubeconfig:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            try:
                kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
    except (kubernetes.config.ConfigException, OSError, ValueError) as error:
        reason = " ".join(str(error).split())
        sys.stderr.write(f"gpuaccept operator: cannot load Kubernetes credentials: {reason}\n")
        return None
    return configuration


def _elections(
    args: argparse.Namespace, identity: str
) -> tuple[LeaseSettings | None, LeaseSettings | None]:
    """This replica's Lease in its installation (None: --standalone), and the
    cluster-wide installation lock, held by the installation (None: none asked for)."""
    lease = None
    if not args.standalone:
        lease = LeaseSettings(
            namespace=args.namespace,
            name=args.lease_name,
            identity=identity,
            lease_duration=args.lease_duration,
        )
    lock = None
    if args.installation_lock:
        installation = f"{args.namespace}/{'standalone' if args.standalone else args.lease_name}"
        lock = LeaseSettings(
            namespace=LOCK_NAMESPACE,
            name=args.installation_lock,
            identity=installation,
            lease_duration=args.lease_duration,
        )
    return lease, lock


def _options(argv: Sequence[str]) -> tuple[argparse.Namespace, OperatorConfig]:
    """The command line, checked (OptionError names the flag), and the operator's
    configuration from it."""
    args = parser().parse_args(list(argv))
    check_ranges(args)
    resources, tolerations, fabric = (
        probe_resources(args.probe_resources),
        probe_tolerations(args.probe_tolerations),
        fabric_pods(args.fabric_pods),
    )
    labels, annotations, extra_env = (
        pod_labels(args.probe_pod_labels),
        pod_annotations(args.probe_pod_annotations),
        probe_env(args.probe_env),
    )
    base_selector = base_node_selector(
        args.node_selector, allow_control_plane=args.allow_control_plane_nodes
    )
    drivers = dra_drivers(args.dra_driver)
    device_class = dra_device_class(args.dra_device_class)
    config = OperatorConfig(
        namespace=args.namespace,
        probe_image=args.probe_image,
        probe_command=tuple(args.probe_command.split()),
        image_pull_policy=args.probe_image_pull_policy,
        pod_prefix=args.probe_pod_prefix,
        service_account=args.probe_service_account,
        runtime_class=args.probe_runtime_class or None,
        priority_class=args.probe_priority_class or None,
        extra_tolerations=tolerations,
        resources=resources,
        shm_size=args.probe_shm_size or None,
        default_timeout_seconds=args.probe_timeout,
        owned_key_prefixes=owned_key_prefixes(args.owned_key_prefixes),
        accept_simulated_reports=args.accept_simulated_reports,
        max_unavailable_ceiling=args.max_unavailable_ceiling,
        image_pull_secrets=tuple(dict.fromkeys(args.probe_image_pull_secrets)),
        fabric=fabric,
        pod_labels=labels,
        pod_annotations=annotations,
        probe_env=extra_env,
        base_node_selector=base_selector,
        allow_control_plane=args.allow_control_plane_nodes,
        dra_drivers=drivers,
        watch_pods=not args.no_watch_pods,
        dra_device_class=device_class,
    )
    return args, config


def main(argv: Sequence[str]) -> int:
    try:
        args, config = _options(argv)
    except OptionError as error:
        sys.stderr.write(f"gpuaccept operator: {' '.join(str(error).split())}\n")
        return EXIT_USAGE
    _setup_logging(args.log_format, args.log_level)

    configuration = _load_credentials(args.kubeconfig)
    if configuration is None:
        return EXIT_USAGE
    configuration.connection_pool_maxsize = args.workers + 4
    api = kubernetes.client.ApiClient(configuration)
    kube = Kube(api)

    missing = _wait_for_crds(kube.for_origin(ORIGIN_STARTUP), timeout=args.crd_wait)
    if missing:
        sys.stderr.write(
            f"gpuaccept operator: CRDs not served by the API server: {', '.join(missing)} "
            "(install them first: kubectl apply -f crds/, or the Helm chart)\n"
        )
        return 1

    # A GPU is fenced (a DeviceTaintRule) only where the API server serves them; else a
    # decision to fence quarantines the node (FencingUnavailable).
    try:
        served = _serves_device_taint_rules(kube, timeout=args.crd_wait)
    except ApiException as error:
        sys.stderr.write(
            "gpuaccept operator: the API server's discovery did not say whether it serves "
            f"devicetaintrules.resource.k8s.io within --crd-wait={args.crd_wait:g}s: "
            f"{error.status} {error.reason}\n"
        )
        return 1
    config = replace(config, device_taint_rules=served)
    identity = f"{args.identity}_{uuid.uuid4().hex[:6]}"
    lease, lock = _elections(args, identity)
    runtime = RuntimeSettings(
        workers=args.workers,
        status_interval=args.status_interval,
        identity=identity,
        unmatched_grace_seconds=args.unmatched_grace,
        installation_lock=lock,
    )
    controller = Controller(kube, config, judge, runtime=runtime, lease=lease)
    node_filters = node_watch_filters(
        config.base_node_selector, allow_control_plane=args.allow_control_plane_nodes
    )
    registry = build_registry(controller, node_filters)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return _connection_info(configuration)

    return _serve(args, controller, registry, identity)


def _serve(
    args: argparse.Namespace, controller: Controller, registry: kopf.OperatorRegistry, identity: str
) -> int:
    """Run kopf with the handlers of ``registry`` (and the metrics and health endpoints)
    until the process is stopped."""
    if args.metrics_port:  # the per-node series are published by the policy status loop
        start_http_server(args.metrics_port)
    settings = kopf.OperatorSettings()
    configure(settings)
    ready = threading.Event()

    async def run() -> None:
        health = None
        if args.health_port:
            health = await serve_health(args.health_port, controller, ready)
        try:
            await kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,  # leader election is ours (a Lease), not kopf peering
                clusterwide=False,
                namespaces=[args.namespace],  # probe pods; cluster-scoped kinds are cluster-wide
                ready_flag=ready,
            )
        finally:
            if health is not None:
                await health.cleanup()

    logging.getLogger("gpuaccept.operator").info(
        "starting: identity=%s namespace=%s workers=%d leader-election=%s installation-lock=%s",
        identity,
        args.namespace,
        args.workers,
        "off" if args.standalone else args.lease_name,
        f"{LOCK_NAMESPACE}/{args.installation_lock}" if args.installation_lock else "off",
    )
    tune_gc()
    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    return 0


# Python's cyclic garbage collector, set for a process that keeps the fleet in
# memory. By default it collects the young generation every 700 net
# allocations, so the objects of a watch event or an API call that live a few
# milliseconds get promoted, and every promotion brings the next full
# collection closer: a walk over every object alive, whose cost grows with
# the fleet (9 of 47 CPU s at 2,000 nodes, 6 s of it in 28 full collections;
# docs/benchmarks.md). Collecting every 20,000 lets those objects die young;
# freezing what exists at start (the imported modules, ~75,000 objects) keeps
# it out of every collection. Cyclic garbage is still collected.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _serves_device_taint_rules(
    kube: Kube, *, timeout: float, first_delay: float = 1.0, max_delay: float = 10.0
) -> bool:
    """Whether the API server serves DeviceTaintRules (its discovery, asked once at start:
    the rule watch is registered only then). Only a 404 or a list without them means not
    served (a fence decision then quarantines the node); any other error is retried with
    backoff for ``timeout`` seconds, then raised: taking an outage for "not served" would
    run the process without a rule watch, never deleting a rule (issue 40 review)."""
    log = logging.getLogger("gpuaccept.operator")
    deadline = time.monotonic() + timeout
    delay = first_delay
    while True:
        try:
            served = kube.for_origin(ORIGIN_STARTUP).serves_device_taint_rules()
        except ApiException as error:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            log.warning(
                "could not ask the API server's discovery for devicetaintrules (%s %s); "
                "asking again in %.1fs",
                error.status,
                error.reason,
                min(delay, left),
            )
            time.sleep(min(delay, left))
            delay = min(delay * 2, max_delay)
            continue
        log.info("DeviceTaintRules served: %s", served)
        return served


def _wait_for_crds(kube: Kube, *, timeout: float) -> list[str]:
    """The gpuaccept resources the API server does not serve (after waiting ``timeout``)."""
    wanted = {ACCEPTANCE_PLURAL, POLICY_PLURAL}
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = kube.request("GET", f"/apis/{GROUP}/{VERSION}")
            served = {r.get("name") for r in found.get("resources") or ()}
        except ApiException as error:
            if error.status not in (404, 503):
                raise
            served = set()
        missing = sorted(f"{p}.{GROUP}" for p in wanted - served)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(2)


def _connection_info(configuration: Any) -> kopf.ConnectionInfo:
    header = configuration.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
    scheme, _, token = header.partition(" ")
    if not token:
        scheme, token = "Bearer", header
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme if token else None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace=None,
    )
