"""``pcie_link``: every GPU's PCIe link under load, and its copy bandwidth.

GPUs lower their link generation when idle, so the generation that counts is
the one sampled *during* a pinned-memory copy (the backend samples it while
the copies are in flight). An idle downshift is recorded (``idleGen``) but
never judged. Under the default policy (``requireMax``) a generation or width
below the GPU's maximum under load fails, as do H2D/D2H bandwidths below the
policy minimum.

observed (one column per field, one entry per GPU, index order)::

    {"gen": [5, 5], "width": [16, 16], "maxGen": [5, 5], "maxWidth": [16, 16],
     "idleGen": [1, 5], "h2dGBps": [53.1, 52.9], "d2hGBps": [52.7, 52.8]}

condensed (when the report must shrink)::

    {"gpus": 2, "minGen": 5, "minWidth": 16, "belowMaxGen": [], "belowMaxWidth": [],
     "minH2DGBps": 52.9, "minD2HGBps": 52.7, "slowH2D": [1], "slowD2H": [0]}

(``slow*``: the GPUs with the lowest bandwidth.)
"""

from dataclasses import dataclass

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.checks.base import (
    Judgement,
    Observation,
    ProbeContext,
    as_object,
    clip,
    get_int,
    get_ints,
    get_numbers,
    gpu_list,
    round1,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable

COPY_BYTES = 256 << 20


@dataclass(frozen=True)
class _Facts:
    """What judging needs, from either form of ``observed``."""

    gpus: int
    min_gen: int
    min_width: int
    below_max_gen: list[int]
    below_max_width: list[int]
    h2d: list[tuple[int, float]]  # (gpu, GB/s), full list or just the slowest
    d2h: list[tuple[int, float]]


def _facts(observed: JsonValue) -> _Facts:
    obj = as_object(observed)
    if "gen" in obj:
        gen = get_ints(obj, "gen")
        width = get_ints(obj, "width")
        max_gen = get_ints(obj, "maxGen")
        max_width = get_ints(obj, "maxWidth")
        h2d = get_numbers(obj, "h2dGBps")
        d2h = get_numbers(obj, "d2hGBps")
        n = len(gen)
        if n == 0 or any(len(col) != n for col in (width, max_gen, max_width, h2d, d2h)):
            raise ValueError("observed columns must be non-empty and of equal length")
        return _Facts(
            gpus=n,
            min_gen=min(gen),
            min_width=min(width),
            below_max_gen=[i for i in range(n) if gen[i] < max_gen[i]],
            below_max_width=[i for i in range(n) if width[i] < max_width[i]],
            h2d=list(enumerate(h2d)),
            d2h=list(enumerate(d2h)),
        )
    slow_h2d = get_ints(obj, "slowH2D")
    slow_d2h = get_ints(obj, "slowD2H")
    min_h2d = get_numbers({"v": [obj.get("minH2DGBps")]}, "v")[0]
    min_d2h = get_numbers({"v": [obj.get("minD2HGBps")]}, "v")[0]
    return _Facts(
        gpus=get_int(obj, "gpus"),
        min_gen=get_int(obj, "minGen"),
        min_width=get_int(obj, "minWidth"),
        below_max_gen=get_ints(obj, "belowMaxGen"),
        below_max_width=get_ints(obj, "belowMaxWidth"),
        h2d=[(i, min_h2d) for i in slow_h2d],
        d2h=[(i, min_d2h) for i in slow_d2h],
    )


def min_link(observed: JsonValue) -> tuple[int, int] | None:
    """(lowest generation, lowest width) under load, for the key figures."""
    try:
        facts = _facts(observed)
    except ValueError:
        return None
    return facts.min_gen, facts.min_width


class PcieLink:
    name = "pcie_link"
    title = "PCIe link"
    reason = "PcieLinkFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        gpus = hardware.gpus()
        if not gpus:
            raise Unavailable("no GPU to measure")
        columns: dict[str, list[JsonValue]] = {
            k: [] for k in ("gen", "width", "maxGen", "maxWidth", "idleGen", "h2dGBps", "d2hGBps")
        }
        for gpu in gpus:
            context.progress(f"GPU {gpu.index}: copy bandwidth")
            idle = hardware.pcie_link(gpu.index)
            copy = hardware.copy_bandwidth(gpu.index, COPY_BYTES)
            link = copy.link_under_load
            columns["gen"].append(link.generation)
            columns["width"].append(link.width)
            columns["maxGen"].append(link.max_generation)
            columns["maxWidth"].append(link.max_width)
            columns["idleGen"].append(idle.generation)
            columns["h2dGBps"].append(round1(copy.h2d_gbps))
            columns["d2hGBps"].append(round1(copy.d2h_gbps))
        return Observation(dict(columns))

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        p = policy.pcie_link
        facts = _facts(observed)
        expected: dict[str, JsonValue] = {"requireMax": p.require_max}
        for key, value in (
            ("minGen", p.min_generation),
            ("minWidth", p.min_width),
            ("minH2DGBps", p.min_h2d_gbps),
            ("minD2HGBps", p.min_d2h_gbps),
        ):
            if value is not None:
                expected[key] = value
        failures: list[str] = []
        if p.require_max and facts.below_max_width:
            failures.append(f"{gpu_list(facts.below_max_width)} below max width")
        if p.require_max and facts.below_max_gen:
            failures.append(f"{gpu_list(facts.below_max_gen)} below max generation under load")
        if p.min_generation is not None and facts.min_gen < p.min_generation:
            failures.append(f"Gen{facts.min_gen} < Gen{p.min_generation}")
        if p.min_width is not None and facts.min_width < p.min_width:
            failures.append(f"x{facts.min_width} < x{p.min_width}")
        for label, values, minimum in (
            ("H2D", facts.h2d, p.min_h2d_gbps),
            ("D2H", facts.d2h, p.min_d2h_gbps),
        ):
            if minimum is None:
                continue
            slow = [(i, v) for i, v in values if v < minimum]
            if slow:
                worst = min(v for _, v in slow)
                failures.append(
                    f"{label} {worst:g} GB/s < {minimum:g} on {gpu_list([i for i, _ in slow])}"
                )
        link = f"Gen{facts.min_gen}x{facts.min_width}"
        if failures:
            return Judgement(CheckStatus.FAIL, expected, clip("; ".join(failures)))
        h2d = min(v for _, v in facts.h2d) if facts.h2d else None
        d2h = min(v for _, v in facts.d2h) if facts.d2h else None
        return Judgement(
            CheckStatus.PASS,
            expected,
            clip(f"{facts.gpus} GPUs at {link} under load; min H2D {h2d:g}, D2H {d2h:g} GB/s"),
        )

    def condense(self, observed: JsonValue) -> JsonValue:
        obj = as_object(observed)
        if "gen" not in obj:
            return observed
        facts = _facts(observed)
        h2d = get_numbers(obj, "h2dGBps")
        d2h = get_numbers(obj, "d2hGBps")
        return {
            "gpus": facts.gpus,
            "minGen": facts.min_gen,
            "minWidth": facts.min_width,
            "belowMaxGen": list[JsonValue](facts.below_max_gen),
            "belowMaxWidth": list[JsonValue](facts.below_max_width),
            "minH2DGBps": min(h2d),
            "minD2HGBps": min(d2h),
            "slowH2D": list[JsonValue]([i for i, v in enumerate(h2d) if v == min(h2d)][:4]),
            "slowD2H": list[JsonValue]([i for i, v in enumerate(d2h) if v == min(d2h)][:4]),
        }


CHECK = PcieLink()
