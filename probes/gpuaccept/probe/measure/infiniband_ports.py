"""Measures :mod:`gpuaccept.checks.infiniband_ports`: every HCA port the probe can see.

Nothing is loaded or reset: the port files and counters are read as they are, once,
or again for up to ``notActiveWaitSeconds`` while a port is LinkUp but not ACTIVE.
SR-IOV virtual functions (``device/physfn``) are counted and left out.
"""

from collections import Counter

from gpuaccept.checks.infiniband_ports import (
    IbLayerObserved,
    IbPortObserved,
    InfinibandPortsObserved,
    InfinibandPortsPolicy,
    compute_ports,
    ports_behind_their_board,
    ports_down_on_a_live_board,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.hardware.infiniband import IbHca, IbPort, InfinibandView, shares_pcie_switch
from gpuaccept.probe.measure.context import ProbeContext

PORTS_MAX = 64
NOT_READ_MAX = 4  # ports named as not read (the count is in the message)
NOT_READ_TEXT = 80
POLL_S = 2.0  # a port LinkUp but not ACTIVE is read again this often


def _port(port: IbPort, gpu_local: bool | None = None) -> IbPortObserved:
    return IbPortObserved(
        port=port.name[:64],
        state=port.state[:16],
        phys_state=port.phys_state[:32],
        rate_gbps=port.rate_gbps,
        link_layer=port.link_layer[:16],
        link_downed=port.link_downed,
        symbol_error=port.symbol_error,
        lanes=f"{port.width}X {port.speed}"[:16] if port.width and port.speed else None,
        board=(port.board_id or "")[:32] or None,
        function=port.function,
        gpu_local=gpu_local,
    )


def _layers(ports: list[IbPortObserved]) -> dict[str, IbLayerObserved]:
    """Per link layer (InfiniBand, Ethernet): its ports summed up."""
    return {
        layer[:16]: _layer([p for p in ports if p.link_layer == layer])
        for layer in sorted({p.link_layer for p in ports})
    }


def _compute_ports(mine: list[IbPortObserved]) -> list[IbPortObserved] | None:
    """The layer's compute (rail) ports; None when they cannot be told apart, or when
    every port is one (nothing to tell apart)."""
    rails = compute_ports(mine)
    return None if rails is not None and len(rails) == len(mine) else rails


def _layer(mine: list[IbPortObserved]) -> IbLayerObserved:
    """One link layer's ports: how many, up, stuck, behind their board or dead on a live
    one; the slowest up port (of all and of the compute ports); the worst counters."""
    up_rates = [p.rate_gbps for p in mine if p.up]
    rails = _compute_ports(mine)
    rail_rates = [p.rate_gbps for p in rails or [] if p.up]
    return IbLayerObserved(
        behind=len(ports_behind_their_board(mine)) or None,
        dead=len(ports_down_on_a_live_board(mine)) or None,
        ports=len(mine),
        up=len(up_rates),
        stuck=sum(1 for p in mine if p.stuck) or None,
        min_rate_gbps=_slowest(up_rates),
        compute=len(rails) if rails is not None else None,
        compute_min_rate_gbps=_slowest(rail_rates),
        max_link_downed=_worst([p.link_downed for p in mine]),
        max_symbol_error=_worst([p.symbol_error for p in mine]),
    )


def _slowest(rates: list[float]) -> float | None:
    return min(rates) if rates else None


def _worst(counts: list[int | None]) -> int | None:
    """The highest count (a count not read is none), None when no count is above 0."""
    return max((count or 0 for count in counts), default=0) or None


def _gpu_local(hca: IbHca, gpu_paths: tuple[str, ...]) -> bool | None:
    if hca.pci_path is None or not gpu_paths:
        return None
    return any(shares_pcie_switch(hca.pci_path, gpu) for gpu in gpu_paths)


def _settled(
    hardware: HardwareBackend, view: InfinibandView, wait_s: float
) -> tuple[InfinibandView, float]:
    """The view once no port is LinkUp but not ACTIVE, read again every POLL_S for up
    to ``wait_s`` (right after boot the subnet manager's sweep has not yet activated
    every port); and how long it waited."""
    waited = 0.0
    while waited < wait_s and any(
        p.phys_state == "LinkUp" and p.state != "ACTIVE" for h in view.hcas for p in h.ports
    ):
        hardware.sleep(POLL_S)
        waited += POLL_S
        view = hardware.infiniband()
    return view, waited


def _firmware(hcas: tuple[IbHca, ...]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """board_id → its firmware versions; and the HCAs not on their board's usual one.
    An HCA without a board_id (PSID) is compared with none: each PSID has its own
    firmware stream, and "no PSID" is not one (see :func:`_unboarded`)."""
    by_board: dict[str, Counter[str]] = {}
    for hca in hcas:
        if hca.fw_ver is not None and hca.board_id:
            by_board.setdefault(hca.board_id, Counter())[hca.fw_ver] += 1
    odd: dict[str, str] = {}
    for hca in hcas:
        counts = by_board.get(hca.board_id or "")
        if hca.fw_ver is not None and counts is not None and len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            if hca.fw_ver != usual:
                odd[hca.name] = hca.fw_ver
    return {board: sorted(c) for board, c in sorted(by_board.items())}, odd


def _unboarded(hcas: tuple[IbHca, ...]) -> tuple[str, str] | None:
    """The firmware read but not compared: HCAs whose board_id could not be read."""
    names = [h.name for h in hcas if h.fw_ver is not None and not h.board_id]
    if not names:
        return None
    shown = ", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")
    return "firmware", f"no board_id on {shown}: firmware not compared"


def measure(
    hardware: HardwareBackend, policy: InfinibandPortsPolicy, context: ProbeContext
) -> InfinibandPortsObserved:
    view, waited = _settled(hardware, hardware.infiniband(), policy.not_active_wait_seconds)
    ports = [_port(p, _gpu_local(hca, view.gpu_pci_paths)) for hca in view.hcas for p in hca.ports][
        :PORTS_MAX
    ]
    if view.not_read and not ports:  # nothing could be read: no verdict on the ports
        name, why = view.not_read[0]
        raise Unavailable(f"no port could be read ({len(view.not_read)}; {name}: {why})")
    firmware, odd = _firmware(view.hcas)
    unboarded = _unboarded(view.hcas)
    not_read = list(view.not_read[:NOT_READ_MAX]) + ([unboarded] if unboarded else [])
    return InfinibandPortsObserved(
        netns_mode=view.netns_mode,
        hcas=len(view.hcas),
        layers=_layers(ports) or None,
        firmware=firmware or None,
        odd_firmware=dict(list(odd.items())[:4]) or None,
        ports=ports,
        virtual_functions=len(view.virtual_functions) or None,
        waited_s=waited or None,
        not_read={name[:64]: why[:NOT_READ_TEXT] for name, why in not_read} or None,
    )
