"""``infiniband_ports``: the InfiniBand / RoCE ports are up, fast, error-free, and
the HCAs run one firmware per board.

The probe reads ``/sys/class/infiniband/<hca>/ports/<n>/{state,phys_state,rate,
link_layer}``, ``counters/{link_downed,symbol_error}`` and ``<hca>/{fw_ver,board_id}``
(formats: :mod:`gpuaccept.probe.hardware.infiniband`). A port is *up* when its
state is ``ACTIVE`` and its physical state ``LinkUp``. A port that is down fails
when the same port (board_id, PCI function, port number) of its board's other
cards is up, or through the count the policy expects: a dual-port card with its
second function uncabled on every card is healthy. A port that is ``LinkUp`` but
not ``ACTIVE`` (``INIT``, ``ARMED``) trained its link but no subnet manager
activated it: it fails if it stays so for ``notActiveWaitSeconds``. SR-IOV
virtual functions are counted, not judged. ``minRateGbps`` judges the compute
HCAs (behind a GPU's PCIe switch) where the node shows which they are.

The RDMA network-namespace mode decides what the probe pod sees: in ``shared``
mode (the kernel default) every HCA; in ``exclusive`` mode only the HCAs moved
into the pod's namespace (usually none). In exclusive mode the port count is not
judged, so a healthy node is not failed for HCAs the pod cannot see.

observed (``ports`` lists every port as measured, and is replaced by ``named``,
a few port names per kind, when condensed)::

    {"netnsMode": "shared", "hcas": 9,
     "layers": {"InfiniBand": {"ports": 9, "up": 9, "minRateGbps": 100,
                               "compute": 8, "computeMinRateGbps": 400}, ...},
     "firmware": {"MT_0000000838": ["28.39.1002"]},
     "ports": [{"port": "mlx5_0/1", "state": "ACTIVE", "physState": "LinkUp",
                "rateGbps": 400, "linkLayer": "InfiniBand", "linkDowned": 0,
                "symbolError": 0, "function": 0, "gpuLocal": true}, ...]}

``oddFirmware`` (HCA → version) lists the HCAs whose firmware is not their board's
most common one.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import IB_RATE_MAX_GBITS, Claims
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "InfinibandPortsFailed"
NAMED_MAX = 4  # port names per kind in a message
CONDENSED_NAMED_MAX = 1  # ... and in the condensed form (also of oddFirmware)
LinkLayer = Literal["InfiniBand", "Ethernet"]


class InfinibandPortsPolicy(CheckSwitch):
    expected_up_ports: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="At least this many ports (of linkLayer) ACTIVE and LinkUp. None: no "
        "count expected (a node without HCAs passes); above 0, a node without HCAs fails.",
    )
    link_layer: LinkLayer | None = Field(
        default=None,
        description="Judge only the ports of this link layer (InfiniBand; Ethernet for "
        "RoCE). None: every port.",
    )
    min_rate_gbps: float | None = Field(
        default=None,
        ge=0,
        description="Lowest acceptable rate of an up port (of linkLayer, of rateScope), Gb/s.",
    )
    rate_scope: Literal["compute", "every"] = Field(
        default="compute",
        description="The ports minRateGbps judges. compute: those of the HCAs behind a GPU's "
        "PCIe switch (where the node shows none, every port); every: all of them.",
    )
    not_active_wait_seconds: float = Field(
        default=30,
        ge=0,
        le=300,
        description="How long the probe reads the ports again, every 2 s, while one is LinkUp "
        "but not ACTIVE (the subnet manager's sweep after boot) before judging.",
    )
    require_same_firmware: bool = Field(
        default=True, description="HCAs of one board_id (PSID) run one firmware version."
    )
    link_downed_warn: int | None = Field(
        default=None, ge=1, description="A port's link_downed counter at or above: warn."
    )
    link_downed_fail: int | None = Field(
        default=None, ge=1, description="A port's link_downed counter at or above: fail."
    )
    symbol_error_warn: int | None = Field(
        default=None, ge=1, description="A port's symbol_error counter at or above: warn."
    )
    symbol_error_fail: int | None = Field(
        default=None, ge=1, description="A port's symbol_error counter at or above: fail."
    )
    netns_mode: Literal["detect", "shared", "exclusive"] = Field(
        default="detect",
        description="The RDMA netns mode: detect (ib_core's netns_mode parameter; "
        "unknown counts as shared), or as given. Exclusive: the port count is not judged.",
    )


class IbPortObserved(ObservedModel):
    port: str = Field(max_length=64)  # "<hca>/<port>"
    state: str = Field(max_length=16)
    phys_state: str = Field(max_length=32)
    rate_gbps: float = Field(ge=0)
    link_layer: str = Field(max_length=16)
    link_downed: int | None = None
    symbol_error: int | None = None
    lanes: str | None = Field(default=None, max_length=16)  # "4X NDR" from the rate text
    board: str | None = Field(default=None, max_length=32)  # its HCA's board_id (PSID)
    # its HCA's PCI function: which port of its card (mlx5 registers each port of a
    # card as its own single-port device); None where the probe could not tell
    function: int | None = Field(default=None, ge=0, le=7)
    # its HCA shares a PCIe switch with a GPU (a compute HCA); None: not known
    gpu_local: bool | None = None

    @property
    def number(self) -> str:
        """The port's number on its HCA (``mlx5_0/1`` → ``1``)."""
        return self.port.rpartition("/")[2]

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"

    @property
    def stuck(self) -> bool:
        return self.phys_state == "LinkUp" and self.state != "ACTIVE"


class IbLayerObserved(ObservedModel):
    # (zero counts are left out: None)
    ports: int = Field(ge=0)
    up: int = Field(ge=0)
    stuck: int | None = Field(default=None, ge=0)  # LinkUp but not ACTIVE
    min_rate_gbps: float | None = Field(default=None, ge=0)  # over the up ports
    max_link_downed: int | None = Field(default=None, ge=0)
    max_symbol_error: int | None = Field(default=None, ge=0)
    # up ports below the best rate of their board's same-numbered up ports (2X NDR or
    # 4X HDR where the others run 4X NDR: a lane or speed fallback)
    behind: int | None = Field(default=None, ge=0)
    # ports down (not Disabled) while their board's same-numbered ports are up
    dead: int | None = Field(default=None, ge=0)
    # ports of the HCAs behind a GPU's PCIe switch (None: the node shows none) and the
    # lowest rate among them that are up
    compute: int | None = Field(default=None, ge=0)
    compute_min_rate_gbps: float | None = Field(default=None, ge=0)


def _siblings(ports: list[IbPortObserved]) -> dict[tuple[str, str, str], list[IbPortObserved]]:
    """Ports grouped by (board_id, PCI function, port number): the same port of the same
    adapter SKU, which a healthy node cables and trains alike. mlx5 makes each port of a
    dual-port card its own single-port device on its own PCI function, so the function
    tells the card's first port from its second (ports without a board_id are not
    grouped; without a function, as reports of earlier probes, by port number alone)."""
    out: dict[tuple[str, str, str], list[IbPortObserved]] = {}
    for port in ports:
        if port.board:
            function = "" if port.function is None else str(port.function)
            out.setdefault((port.board, function, port.number), []).append(port)
    return out


def compute_ports(ports: list[IbPortObserved]) -> list[IbPortObserved] | None:
    """The ports of the HCAs behind a GPU's PCIe switch (the GPUDirect RDMA rails);
    None when the node shows no such HCA (locality unknown: a VM's flat PCI bus, an
    earlier probe's report), and then every port counts as compute."""
    local = [p for p in ports if p.gpu_local]
    return local or None


def ports_behind_their_board(ports: list[IbPortObserved]) -> list[IbPortObserved]:
    """Up ports whose rate is below the best up port of their (board, function, port
    number); and up compute ports below the best up compute port, whatever their board
    (a replacement card with another PSID trains like the rails it replaced)."""
    out: list[IbPortObserved] = []
    groups = list(_siblings(ports).values())
    rails = compute_ports(ports)
    if rails is not None:
        groups.append(rails)
    for group in groups:
        best = max((p.rate_gbps for p in group if p.up), default=None)
        out += [p for p in group if p.up and best is not None and p.rate_gbps < best]
    return list({p.port: p for p in out}.values())


def ports_down_on_a_live_board(ports: list[IbPortObserved]) -> list[IbPortObserved]:
    """Ports down while their (board, function, port number) siblings are up: cabled
    compute ports (an unused port of a dual-port card is down on every card of its
    board; one administratively Disabled is not counted)."""
    out = []
    for group in _siblings(ports).values():
        if any(p.up for p in group):
            out += [p for p in group if not p.up and not p.stuck and p.phys_state != "Disabled"]
    return out


class IbNamedPorts(ObservedModel):
    """A few port names per kind (the condensed form's stand-in for ``ports``)."""

    stuck: list[str] | None = None  # "<port> <state>"
    down: list[str] | None = None
    slowest: list[str] | None = None  # the up ports at the lowest rate, when rates differ
    link_downed: list[str] | None = None
    symbol_error: list[str] | None = None
    behind: list[str] | None = None  # "<port> <lanes>"
    dead: list[str] | None = None


class InfinibandPortsObserved(ObservedModel):
    netns_mode: Literal["shared", "exclusive", "unknown"]
    hcas: int = Field(ge=0)
    layers: dict[str, IbLayerObserved] | None = None  # link layer -> its ports
    firmware: dict[str, list[str]] | None = None  # board_id -> firmware versions
    odd_firmware: dict[str, str] | None = None  # HCA -> version (not its board's usual)
    ports: list[IbPortObserved] | None = None  # detail
    named: IbNamedPorts | None = None  # condensed
    # ports whose files could not be read (hca/port -> why, the first 4): the others
    # are judged and the check warns naming them
    not_read: dict[str, str] | None = None
    # SR-IOV virtual functions left out (device/physfn)
    virtual_functions: int | None = Field(default=None, ge=0)
    # how long the probe waited for ports LinkUp but not ACTIVE to become ACTIVE
    waited_s: float | None = Field(default=None, ge=0)


def _ports_of(observed: InfinibandPortsObserved, layers: set[str]) -> list[IbPortObserved]:
    return [p for p in observed.ports or [] if p.link_layer in layers]


def named_ports(
    ports: list[IbPortObserved], limit: int = NAMED_MAX, scope: str = "compute"
) -> IbNamedPorts:
    """The ports worth naming, by kind (``slowest`` among the ports ``scope`` rates)."""
    rated = (compute_ports(ports) if scope == "compute" else None) or ports

    def first(names: list[str]) -> list[str] | None:
        return names[:limit] or None

    return IbNamedPorts(
        stuck=first([f"{p.port} {p.state}" for p in ports if p.stuck]),
        down=first([p.port for p in ports if not p.up and not p.stuck]),
        slowest=first(_slowest(rated)),
        link_downed=first([p.port for p in ports if p.link_downed]),
        symbol_error=first([p.port for p in ports if p.symbol_error]),
        behind=first(_behind(ports)),
        dead=first([p.port for p in ports_down_on_a_live_board(ports)]),
    )


def _slowest(rated: list[IbPortObserved]) -> list[str]:
    """The up ports at the lowest rate, when the up ports' rates differ."""
    up_rates = [p.rate_gbps for p in rated if p.up]
    if not up_rates or min(up_rates) == max(up_rates):
        return []
    return [p.port for p in rated if p.up and p.rate_gbps == min(up_rates)]


def _behind(ports: list[IbPortObserved]) -> list[str]:
    """The ports behind their board's other HCAs, with their lanes (else their rate)."""
    return [
        f"{p.port} {p.lanes or f'{p.rate_gbps:g} Gb/s'}" for p in ports_behind_their_board(ports)
    ]


@dataclass(frozen=True)
class _Facts:
    up: int
    stuck: int
    min_rate: float | None
    max_link_downed: int
    max_symbol_error: int
    behind: int
    dead: int
    named: IbNamedPorts
    label: str  # "InfiniBand ports", "ports"


def _rated_min(layer: IbLayerObserved, policy: InfinibandPortsPolicy) -> float | None:
    """The lowest up rate among the ports minRateGbps judges: the compute HCAs' where
    the node shows which they are (and the scope says so), else every port's."""
    if policy.rate_scope == "compute" and layer.compute is not None:
        return layer.compute_min_rate_gbps
    return layer.min_rate_gbps


def _facts(observed: InfinibandPortsObserved, policy: InfinibandPortsPolicy) -> _Facts:
    all_layers = observed.layers or {}
    chosen: set[str] = {policy.link_layer} if policy.link_layer else set(all_layers)
    layers = [s for name, s in all_layers.items() if name in chosen]
    rates = [r for s in layers if (r := _rated_min(s, policy)) is not None]
    return _Facts(
        up=sum(s.up for s in layers),
        stuck=_total(s.stuck for s in layers),
        min_rate=min(rates) if rates else None,
        max_link_downed=_highest(s.max_link_downed for s in layers),
        max_symbol_error=_highest(s.max_symbol_error for s in layers),
        behind=_total(s.behind for s in layers),
        dead=_total(s.dead for s in layers),
        named=_named(observed, policy, chosen),
        label=f"{policy.link_layer} ports" if policy.link_layer else "ports",
    )


def _total(counts: Iterable[int | None]) -> int:
    return sum(count or 0 for count in counts)


def _highest(counts: Iterable[int | None]) -> int:
    return max((count or 0 for count in counts), default=0)


def _named(
    observed: InfinibandPortsObserved, policy: InfinibandPortsPolicy, chosen: set[str]
) -> IbNamedPorts:
    """The chosen layers' ports worth naming (from the ports, or as condensed)."""
    if observed.ports is not None:
        return named_ports(_ports_of(observed, chosen), scope=policy.rate_scope)
    return observed.named or IbNamedPorts()


def _names(names: list[str] | None) -> str:
    return f" ({', '.join(names)})" if names else ""


def _ports(count: int, label: str) -> str:
    """``1, "InfiniBand ports"`` → ``"1 InfiniBand port"``."""
    return f"{count} {label.removesuffix('s') if count == 1 else label}"


def _count_problem(
    observed: InfinibandPortsObserved, policy: InfinibandPortsPolicy, facts: _Facts
) -> tuple[str | None, str | None]:
    """(failure, note) about the expected port count."""
    expected = policy.expected_up_ports
    mode = observed.netns_mode if policy.netns_mode == "detect" else policy.netns_mode
    if expected is None or facts.up >= expected:
        return None, None
    if mode == "exclusive":
        return None, (
            f"exclusive RDMA netns: the pod sees {facts.up} up {facts.label} of {expected} "
            "expected (only HCAs in its namespace); count not judged"
        )
    if observed.hcas == 0:
        return f"no InfiniBand/RoCE HCA in /sys/class/infiniband; {expected} up expected", None
    return (
        f"{facts.up} of {expected} {facts.label} up (ACTIVE, LinkUp); down:"
        f"{_names(facts.named.down) or ' none visible'}"
    ), None


def _counter_problems(facts: _Facts, policy: InfinibandPortsPolicy) -> tuple[list[str], list[str]]:
    failures: list[str] = []
    warnings: list[str] = []
    for label, worst, names, warn, fail in (
        (
            "link_downed",
            facts.max_link_downed,
            facts.named.link_downed,
            policy.link_downed_warn,
            policy.link_downed_fail,
        ),
        (
            "symbol_error",
            facts.max_symbol_error,
            facts.named.symbol_error,
            policy.symbol_error_warn,
            policy.symbol_error_fail,
        ),
    ):
        if fail is not None and worst >= fail:
            failures.append(f"{label} {worst} >= {fail}{_names(names)}")
        elif warn is not None and worst >= warn:
            warnings.append(f"{label} {worst} >= {warn}{_names(names)}")
    return failures, warnings


def _sibling_problems(policy: InfinibandPortsPolicy, facts: _Facts) -> list[str]:
    """Ports that trained below, or stayed down beside, the same port of their board's
    other HCAs: the sysfs rate text names the active width and speed, and one adapter
    SKU (board_id) trains alike on a healthy node (docs/policy.md)."""
    out = []
    if facts.behind:
        out.append(
            f"{_ports(facts.behind, facts.label)} below the rate of the same port on the "
            f"board's other HCAs, or of the other compute HCAs{_names(facts.named.behind)}: "
            "a lane or speed fallback"
        )
    if facts.dead and policy.expected_up_ports is None:  # with a count, the count judges
        out.append(
            f"{_ports(facts.dead, facts.label)} down while the same port of the board's other "
            f"HCAs is up{_names(facts.named.dead)}: a dead cable, transceiver or switch port"
        )
    return out


def _firmware_problem(observed: InfinibandPortsObserved) -> str | None:
    firmware = observed.firmware or {}
    mixed = {board: versions for board, versions in firmware.items() if len(versions) > 1}
    if not mixed:
        return None
    odd = ", ".join(f"{hca} {fw}" for hca, fw in (observed.odd_firmware or {}).items())
    boards = "; ".join(f"{board}: {' vs '.join(v)}" for board, v in mixed.items())
    return f"firmware differs within a board ({boards}){f': {odd}' if odd else ''}"


def _expected(policy: InfinibandPortsPolicy) -> dict[str, JsonValue]:
    wire = policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    measuring = ("enabled", "required", "notActiveWaitSeconds")
    return {k: v for k, v in wire.items() if k not in measuring}


def judge(
    observed: InfinibandPortsObserved, policy: InfinibandPortsPolicy, summary: HardwareSummary
) -> CheckJudgement:
    facts = _facts(observed, policy)
    failure, note = _count_problem(observed, policy, facts)
    failures = [failure] if failure else []
    failures += _port_problems(observed, policy, facts)
    counter_failures, warnings = _counter_problems(facts, policy)
    failures.extend(counter_failures)
    firmware = _firmware_problem(observed) if policy.require_same_firmware else None
    if firmware:
        failures.append(firmware)
    expected = _expected(policy)
    if failures:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failures)))
    if observed.not_read:
        warnings.append(
            "not read: " + ", ".join(f"{port} ({why})" for port, why in observed.not_read.items())
        )
    if warnings:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warnings)))
    return CheckJudgement(CheckStatus.PASS, expected, clip(_pass_message(observed, facts, note)))


def _port_problems(
    observed: InfinibandPortsObserved, policy: InfinibandPortsPolicy, facts: _Facts
) -> list[str]:
    """Ports stuck LinkUp but not ACTIVE, a rate below the policy's, and ports behind or
    down beside their board's other HCAs."""
    failures = []
    if facts.stuck:
        failures.append(
            f"{_ports(facts.stuck, facts.label)} LinkUp but not ACTIVE{_names(facts.named.stuck)}"
            f"{f' after {observed.waited_s:g} s' if observed.waited_s else ''}"
            ": no subnet manager activated the link"
        )
    if (
        policy.min_rate_gbps is not None
        and facts.min_rate is not None
        and facts.min_rate < policy.min_rate_gbps
    ):
        failures.append(
            f"{facts.label} rate {facts.min_rate:g} < {policy.min_rate_gbps:g} Gb/s"
            f"{_names(facts.named.slowest)}"
        )
    return failures + _sibling_problems(policy, facts)


def _pass_message(observed: InfinibandPortsObserved, facts: _Facts, note: str | None) -> str:
    if observed.hcas == 0:
        return note or "no InfiniBand/RoCE HCA in /sys/class/infiniband; none expected"
    rate = f", min {facts.min_rate:g} Gb/s" if facts.min_rate is not None else ""
    base = f"{_ports(facts.up, facts.label)} up on {observed.hcas} HCAs{rate}"
    if observed.virtual_functions:
        base += f" ({observed.virtual_functions} SR-IOV virtual functions not judged)"
    return f"{base}; {note}" if note else base


def condense(observed: InfinibandPortsObserved) -> InfinibandPortsObserved:
    if observed.ports is None:
        return observed
    named = named_ports(observed.ports, CONDENSED_NAMED_MAX)
    kept = named if named.model_dump(exclude_none=True) else None
    odd = dict(list((observed.odd_firmware or {}).items())[:CONDENSED_NAMED_MAX]) or None
    # the wait is the message's detail, not the verdict's: it stays in the full form
    return observed.model_copy(
        update={"ports": None, "named": kept, "odd_firmware": odd, "waited_s": None}
    )


def claims(observed: InfinibandPortsObserved, _summary: HardwareSummary) -> Claims:
    """No GPU; the port rates are within what InfiniBand signals."""
    out = Claims()
    most = IB_RATE_MAX_GBITS
    out.each("ports.rateGbps", [p.rate_gbps for p in observed.ports or ()], most)
    for name, layer in (observed.layers or {}).items():
        out.figure(f"layers.{name[:16]}.minRateGbps", layer.min_rate_gbps, most)
    return out


SPEC = CheckSpec(
    measuring=frozenset({"not_active_wait_seconds"}),
    judging=frozenset(
        {
            "expected_up_ports",
            "link_layer",
            "min_rate_gbps",
            "rate_scope",
            "require_same_firmware",
            "link_downed_warn",
            "link_downed_fail",
            "symbol_error_warn",
            "symbol_error_fail",
            "netns_mode",
        }
    ),
    name="infiniband_ports",
    title="InfiniBand / RoCE ports",
    summary="enough HCA ports ACTIVE and LinkUp, none LinkUp but not ACTIVE, rate at or "
    "above the minimum, one firmware per HCA board, link_downed/symbol_error below "
    "thresholds",
    reason=REASON,
    policy_model=InfinibandPortsPolicy,
    observed_model=InfinibandPortsObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=fixed_phase("InfiniBand ports", 0.1, "sysfs reads"),
    runbook=RunbookEntry(
        meaning=(
            "too few HCA ports up, a port LinkUp but not ACTIVE, a slow port, mixed firmware on "
            "one board, or error counters over the threshold"
        ),
        fix="[below](#infinibandportsfailed)",
    ),
)
