"""The GPUs a simulated probe's container was given: ``NVIDIA_VISIBLE_DEVICES``.

On a real node the probe measures only the GPUs its container was given: NVML
enumerates the devices the container runtime injected, not the host's (the real
backend reads no variable for it). Who injects them:

* the NVIDIA device plugin's ``Allocate`` answers with ``NVIDIA_VISIBLE_DEVICES`` set
  to the allocated GPUs (its defaults ``--device-list-strategy envvar`` and
  ``--device-id-strategy uuid``: their UUIDs; NVIDIA/k8s-device-plugin
  ``docs/customizing.md``), which the NVIDIA Container Toolkit reads;
* NVIDIA's DRA driver writes a CDI spec per GPU (its device nodes) and sets
  ``NVIDIA_VISIBLE_DEVICES=void`` in the spec's common edits "to avoid the
  nvidia-container-runtime honoring it in addition to the underlying runtime honoring
  CDI" (NVIDIA/k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/cdi.go``,
  ``createStandardNvidiaDeviceSpecFile``): the container gets the device nodes of the
  GPUs its claims were allocated, and nothing else.

A simulated probe has no device nodes: the process that plays the container runtime
(the kubelet stand-in) states the GPUs it gives the probe in ``NVIDIA_VISIBLE_DEVICES``
for both ways, as the device plugin does; on a DRA node those are the claim's devices
(a real DRA container carries ``void`` and the devices' CDI edits instead: the same
GPUs). The value is read as the NVIDIA Container Toolkit reads it (its user guide,
"GPU Enumeration"): ``all``; a comma-separated list of GPU indices or UUIDs; ``none``
or ``void`` (or empty): no GPU.
Unset: every GPU of the profile (a simulated probe run by hand, or by a stand-in that
gives the pod the node's GPUs). The container sees its GPUs renumbered from 0 in the
host's order (NVML orders by PCI bus), while the host's PCI bus, which is not
namespaced, still shows every GPU. A device that is not on the node is an error: the
toolkit refuses to start such a container.
"""

import re
from collections.abc import Mapping, Sequence

from gpuaccept.probe.hardware.profile import HardwareProfile

ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_DEVICES = frozenset({"", "none", "void"})
PAIR_GPU = re.compile(r"\d+")


class VisibleDevicesError(ValueError):
    """The variable names a GPU the node does not have."""


def visible_gpus(value: str | None, uuids: Sequence[str | None]) -> tuple[int, ...]:
    """The host indices of the GPUs a container with ``NVIDIA_VISIBLE_DEVICES=value`` is
    given, in the host's order; ``uuids`` are the node's GPUs' UUIDs by index (None:
    the GPU is named by its index only)."""
    if value is None or value.strip() == "all":
        return tuple(range(len(uuids)))
    text = value.strip()
    if text in NO_DEVICES:
        return ()
    given: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if item.isdigit() and int(item) < len(uuids):
            given.add(int(item))
        elif item and item in uuids:
            given.add(uuids.index(item))
        else:
            raise VisibleDevicesError(
                f"{ENV_VISIBLE_DEVICES}: {item[:60]!r} is not a GPU of this node "
                f"({len(uuids)} GPUs; an index or a UUID)"
            )
    return tuple(sorted(given))


def _renumbered_pair(key: str, new: Mapping[int, int]) -> str | None:
    """A ``p2p.pairs`` key in the container's numbering (None: it names a GPU not given)."""
    named = [int(n) for n in PAIR_GPU.findall(key)]
    if any(n not in new for n in named):
        return None
    return PAIR_GPU.sub(lambda m: str(new[int(m.group())]), key)


def given_profile(profile: HardwareProfile, host_indices: Sequence[int]) -> HardwareProfile:
    """The profile as a container given the GPUs ``host_indices`` sees it: those GPUs,
    renumbered from 0 (their overrides and peer pairs with them), the host's PCI bus
    whole (``pciDevices``). The in-service timeline is the watch's, which is given
    every GPU: dropped here."""
    if tuple(host_indices) == tuple(range(profile.gpus.count)):
        return profile
    new = {host: index for index, host in enumerate(host_indices)}
    gpus = profile.gpus.model_copy(
        update={
            "count": len(new),
            "pci_devices": profile.gpus.pci_count,
            "overrides": {new[h]: o for h, o in profile.gpus.overrides.items() if h in new},
        }
    )
    pairs = {}
    for key, pair in profile.p2p.pairs.items():
        renumbered = _renumbered_pair(key, new)
        if renumbered is not None:
            pairs[renumbered] = pair
    p2p = profile.p2p.model_copy(update={"pairs": pairs})
    return profile.model_copy(update={"gpus": gpus, "p2p": p2p, "in_service": None})
