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
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|--------------------------|---------|
| `expectedUpPorts` | unset | unset | At least this many ports (of `linkLayer`) ACTIVE and LinkUp. Above 0, a node without HCAs fails. |
| `linkLayer` | unset (every port) | `InfiniBand` | Judge only the ports of this link layer (`Ethernet` for RoCE fabrics). |
| `minRateGbps` | unset | `200` | Lowest rate of an up port, Gb/s (of the ports `rateScope` names). |
| `rateScope` | `compute` | `compute` | The ports `minRateGbps` judges: `compute`, those of the HCAs behind a GPU's PCIe switch (every port where the node shows none); `every`, all. |
| `notActiveWaitSeconds` | `30` | `30` | While a port is `LinkUp` but not `ACTIVE`, read the ports again every 2 s for up to this long before judging. |
| `requireSameFirmware` | `true` | `true` | HCAs with one `board_id` (PSID) run one `fw_ver`. |
| `linkDownedWarn` / `linkDownedFail` | unset | `1` / unset | A port's `link_downed` at or above: warn / fail. |
| `symbolErrorWarn` / `symbolErrorFail` | unset | `1` / unset | A port's `symbol_error` at or above: warn / fail. |
| `netnsMode` | `detect` | `detect` | The RDMA netns mode: read it, or say `shared` / `exclusive`. |

What the probe reads, from the kernel's
[sysfs-class-infiniband](https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband)
ABI and `drivers/infiniband/core/sysfs.c` (the exact formats): for each
`/sys/class/infiniband/<hca>/ports/<n>/`, `state` (`4: ACTIVE`), `phys_state`
(`5: LinkUp`), `rate` (`400 Gb/sec (4X NDR)`: active width × speed),
`link_layer` (`InfiniBand` or `Ethernet`), `counters/link_downed` and
`counters/symbol_error`; and `<hca>/fw_ver`, `<hca>/board_id`. A port is
*up* when it is `ACTIVE` and `LinkUp`.

A port whose `state`, `phys_state`, `rate` or `link_layer` cannot be read (the
kernel's show functions in `drivers/infiniband/core/sysfs.c` return
`ib_query_port`'s error, an EIO when the HCA's firmware command times out) is
that port's, not the check's: the other ports are judged, the unread one is
named under `notRead` (the first four) and the check **warns**; it still
counts as not up against `expectedUpPorts`. Only when no port at all could be
read does the check `skip`. Earlier probes skipped the whole check on one
unreadable file, and the required skip quarantined the node. Trap:
`h100-sxm-8gpu-ib-port-unreadable.yaml`; tests in
`tests/probe/test_partial_reads.py`.

* **How mlx5 shows a dual-port card.** mlx5 (ConnectX-4 and later)
  registers each port of a multi-port card as its own PCI function and its
  own *single-port* IB device, both with the card's `board_id`: a dual-port
  ConnectX-7 is `mlx5_0/1` on `0000:17:00.0` and `mlx5_1/1` on
  `0000:17:00.1`, not one device with ports 1 and 2. One two-port device is
  registered only in RoCE multiport mode (linux-rdma, ["Dual Port IB Device
  for RoCE"](https://kernel.googlesource.com/pub/scm/linux/kernel/git/leon/linux-rdma/+/refs/tags/rdma-next-2018-01-04):
  "a single IB device with two ports will be registered instead of two
  single port"; mlx4, ConnectX-3, has one device with both ports). So the
  port *number* cannot tell a card's first port from its second; the PCI
  function can: the probe reads each HCA's `device` link
  (`/sys/class/infiniband/<hca>/device` → `…/0000:17:00.1`) and groups
  ports by (`board_id`, PCI function, port number). Earlier probes grouped
  by (`board_id`, port number) only, and every dual-port card with its
  second port uncabled failed as "down while the same port of the board's
  other HCAs is up": every NDR200 dual-port node and every dual-port
  storage NIC (a fleet-wide false quarantine, found and fixed). Traps:
  `h100-sxm-8gpu-ib-ndr200-dual-port.yaml`,
  `h100-sxm-8gpu-ib-dual-port-cx7-one-cabled.yaml` (each card's function 1
  `DOWN`/`Polling`). Reports of earlier probes carry no function and are
  grouped as before.
* **A down port that should be up.** A healthy node often has ports that
  are down on purpose: the second port of a dual-port storage NIC, an unused
  BlueField port. What "should be up" means is read from sysfs, not guessed:
  the same port (PCI function and port number) of one adapter SKU
  (`board_id`, the PSID) is cabled alike on a healthy node, so a port that
  is down (not `Disabled`, which is administrative) while the same port of
  its board's other cards is up fails ("1 InfiniBand port down while the
  same port of the board's other HCAs is up (mlx5_5/1)"), even with no
  `expectedUpPorts`. An unused second port is down on every card of its
  board and is not judged;
  a port whose board has no other HCA is judged only by `expectedUpPorts`
  (set it, e.g. 8 for eight compute HCAs: "7 of 8 InfiniBand ports up").
  With `expectedUpPorts` set, the count judges instead. Traps:
  `h100-sxm-8gpu-ib-ndr.yaml` (a ConnectX-6 Dx with one port
  `DOWN`/`Disabled`), `h100-sxm-8gpu-ib-ndr200-dual-port.yaml` (every
  second port `DOWN`/`Polling`); fault: `ib-compute-port-down.yaml`.
* **A port slower than its siblings.** The `rate` file names the active
  width and speed (`drivers/infiniband/core/sysfs.c`, `rate_show`:
  `"%d%s Gb/sec (%dX %s)"`). An NDR 4X port that trains with 2 lanes
  (`200 Gb/sec (2X NDR)`) or falls back to HDR (`200 Gb/sec (4X HDR)`) reads
  exactly 200, which `minRateGbps: 200` passes. So an up port below the best
  up port of the same number on its board's other HCAs fails ("below the rate
  of the same port on the board's other HCAs (mlx5_5/1 2X NDR): a lane or
  speed fallback"). 2X is not judged by itself: NDR200 adapters (and split
  NDR ports) train 2X NDR by design (the trap
  `h100-sxm-8gpu-ib-ndr200-dual-port.yaml`). Faults: `ib-ndr-2x-lanes.yaml`,
  `ib-ndr-hdr-fallback.yaml`. The compute HCAs (below) are also compared
  with each other whatever their PSID: a compute card replaced by the same
  adapter under an OEM's PSID is a board of one, and its 2X NDR port passed
  (fault: `ib-replacement-card-2x.yaml`). A fallback on every HCA at once is
  left to `minRateGbps` (an NDR-only fleet sets 400).
* **Compute and storage HCAs (`rateScope`).** A GPU node often has HCAs
  that are not the GPUs' rails: a storage HCA on an older HDR100 or EDR
  storage fabric (`100 Gb/sec (2X HDR)`, `100 Gb/sec (4X EDR)`), a
  management port. `minRateGbps` is a compute-fabric figure, and a storage
  port at its own fabric's rate is healthy (a false quarantine, fixed). The rails are
  told apart by **PCIe locality**, read from sysfs: an HCA whose PCI device
  shares a PCIe switch with a GPU (below one root port, at least one more
  bridge in common: `nvidia-smi topo -m`'s PIX or PXB, the distances at
  which NCCL uses GPUDirect RDMA; [NCCL environment
  variables](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html),
  `NCCL_NET_GDR_LEVEL` / `NCCL_P2P_LEVEL`: "PIX: … on the same PCI switch",
  "PXB: … connected through PCI switches") is a compute HCA; one on a CPU
  root port of its own is not (NVIDIA's [GPUDirect RDMA
  guide](https://docs.nvidia.com/cuda/gpudirect-rdma/index.html): the two
  devices must share an upstream root complex, and the best placement is
  behind one switch). The probe resolves each HCA's `device` link and each
  GPU's `/sys/bus/pci/devices/<bus id>` to their `/sys/devices/pci…` paths
  and compares them. With `rateScope: compute` (the default) `minRateGbps`
  judges the compute HCAs' up ports; where the node shows no HCA behind a
  GPU's switch (a VM's flat PCI bus, a platform without switches, a report
  from an earlier probe) it judges every port, as before, so a node whose
  locality cannot be read is not judged more leniently. `rateScope: every`
  judges every port. The other rules (state, siblings, firmware, counters)
  judge every port. Trap: `h100-sxm-8gpu-ib-storage-hdr100.yaml` (a
  ConnectX-6 on a root port at HDR100); the same card behind a GPU's switch
  fails (`tests/probe/test_infiniband_siblings.py`).
* **LinkUp but not ACTIVE fails, after a bounded wait.** `INIT` or `ARMED`
  with physical state `LinkUp` means the link trained but no subnet manager
  activated the port: no traffic can use it (`state` is the port's logical
  state, `phys_state` its physical one: the kernel's sysfs-class-infiniband
  ABI; "Initializing: physical connection has been made … but it hasn't
  been discovered by the subnet manager", [Advanced Clustering, InfiniBand
  port states](http://www.advancedclustering.com/act_kb/infiniband-port-states/)).
  Right after boot that is normal for a few seconds: the subnet manager's
  sweep has not yet reached the port (OpenSM sweeps the fabric periodically
  and assigns LIDs to new ports). So, as `nvswitch_fabric` does for a
  registration in progress, the probe reads the ports again every 2 s while
  one is `LinkUp` but not `ACTIVE`, for up to `notActiveWaitSeconds` (30),
  and judges what it reads then; the failure says how long it waited. Trap:
  `h100-sxm-8gpu-ib-sm-sweep.yaml` (`INIT` for 6 s); fault:
  `ib-port-init.yaml` (`INIT` throughout).
* **SR-IOV virtual functions are not judged.** With SR-IOV on, mlx5
  registers every virtual function as an IB device of its own. A VF's PCI
  device has a `physfn` link to its physical function
  (`Documentation/ABI/testing/sysfs-bus-pci`; `drivers/pci/iov.c` creates
  it), and its port's logical state is the subnet manager's view of the
  VF's GUID, `DOWN` or `INIT` until a guest uses it, whatever the cable.
  The probe skips every HCA whose `device/physfn` exists, counts them
  (`virtualFunctions`; the pass message says "N SR-IOV virtual functions
  not judged") and judges the physical functions. Before, every VF read as
  "LinkUp but not ACTIVE" and failed the node. Trap:
  `h100-sxm-8gpu-ib-sriov-vfs.yaml`.
* **Rate 200 Gb/s.** NDR 4X (ConnectX-7, the usual H100/H200 compute fabric)
  shows 400; HDR 4X (ConnectX-6) 200. A link that trained with fewer lanes or
  fell back to a lower speed shows less (`100 Gb/sec (1X NDR)`, `100 Gb/sec
  (4X EDR)`). 200 accepts both healthy generations and fails the deeper
  fallbacks; the ones that read exactly 200 are caught by the sibling rule
  above; an NDR-only fleet sets 400. Only `linkLayer` ports are judged, so a
  100 GbE RoCE storage NIC does not fail it. Fault: `ib-rate-degraded.yaml`.
* **One firmware per board.** HCAs of one `board_id` (the PSID, one card
  model) normally carry the same `fw_ver`; a card that missed an update (a
  replacement part, an interrupted `mlxfwmanager` run) differs. Different
  boards (a ConnectX-6 Dx storage NIC beside ConnectX-7s) have their own
  firmware lines and are not compared. Fault: `ib-firmware-mixed.yaml`. An
  HCA whose `board_id` cannot be read (the file is optional in the sysfs ABI;
  `ibstat` does not print it) is compared with none: "no PSID" is not a
  firmware line, and grouping such HCAs together held a ConnectX-7 and a
  ConnectX-6 Dx, or a BlueField-3, to one firmware on two healthy H100 nodes
  of the captures corpus (tests/captures). The check says so (`notRead.firmware`, a
  warning), never passes it silently.
* **Counters warn.** The files hold the port's PMA PortCounters (the ABI
  document), totals since the counters were last cleared (driver load or
  `perfquery -R`), not rates; the IB specification makes LinkDownedCounter
  8 bits and SymbolErrorCounter 16 bits, saturating. On a settled healthy
  link both stay 0, but a switch reboot or a cable reseat during installation
  leaves a small count behind, so the default policy warns from 1 and fails
  on none (trap: `link_downed` 1 in `h100-sxm-8gpu-ib-ndr.yaml`). Set the
  `…Fail` thresholds from your fabric's history.
* **What the probe pod sees.** The RDMA subsystem has a network-namespace
  mode (`rdma system`; `/sys/module/ib_core/parameters/netns_mode`, `Y` =
  shared, the kernel default, `N` = exclusive). In *shared* mode every HCA
  is visible in every namespace, so the probe pod (not host-network) sees
  them all. In *exclusive* mode a namespace sees only the HCAs moved into it
  (`rdma dev set <hca> netns <ns>`, as RDMA device plugins do for workload
  pods), so the probe pod usually sees none. There the port count is not
  judged (the result says so), while the ports it does see are still judged
  for state, rate, firmware and counters. `netnsMode: exclusive` forces this
  where the parameter file is missing; `netnsMode: shared` forces the count.
  Trap: `h100-sxm-8gpu-rdma-exclusive.yaml`.
* **No HCA.** A node without `/sys/class/infiniband` entries passes when
  the policy expects no port, and fails when `expectedUpPorts` is above 0
  (in shared mode). It passes rather than skips: a skipped required check
  quarantines (`CheckSkipped`), and a GPU node without an RDMA fabric is not
  a faulty one.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# No port count by default (set expectedUpPorts: 8 for 8 compute HCAs): a node
# without HCAs passes, an unused port of a dual-port NIC is not judged.
linkLayer: InfiniBand     # the compute fabric; RoCE fleets: Ethernet
minRateGbps: 200          # HDR 4X. An NDR 4X port that falls back to 2X NDR or 4X HDR also
                          # reads 200: those fail by comparison with the same port of the
                          # board's other HCAs (docs/policy.md), not by this figure
rateScope: compute        # minRateGbps judges the HCAs behind a GPU's PCIe switch (a storage
                          # HCA on an HDR100/EDR fabric is not held to it); none seen: every port
requireSameFirmware: true # within one board_id (PSID)
linkDownedWarn: 1         # counters since the last clear: any is worth a look
symbolErrorWarn: 1
netnsMode: detect
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "the HCAs are the node's network (GPUDirect RDMA pairs a GPU with a HCA, the job "
            "uses all)"
        ),
        source="rdma-core `ibv_query_port`; kernel `sysfs-class-infiniband`",
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
    budget=fixed_phase("InfiniBand ports", 0.1, "sysfs reads"),
    runbook=RunbookEntry(
        meaning=(
            "too few HCA ports up, a port LinkUp but not ACTIVE, a slow port, mixed firmware on "
            "one board, or error counters over the threshold"
        ),
        fix="[below](#infinibandportsfailed)",
    ),
)
