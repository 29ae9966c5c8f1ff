"""NVML clock event reasons (formerly "clocks throttle reasons").

The bit values are NVML's ``nvmlClocksEventReason*`` constants (identical to
the deprecated ``nvmlClocksThrottleReason*`` ones) from ``nvml.h``; a test
checks them against pynvml. Kept here as plain numbers so that judging needs
no NVML.
"""

from typing import Final

GPU_IDLE: Final = 0x1
APPLICATIONS_CLOCKS_SETTING: Final = 0x2
SW_POWER_CAP: Final = 0x4
HW_SLOWDOWN: Final = 0x8
SYNC_BOOST: Final = 0x10
SW_THERMAL_SLOWDOWN: Final = 0x20
HW_THERMAL_SLOWDOWN: Final = 0x40
HW_POWER_BRAKE_SLOWDOWN: Final = 0x80
DISPLAY_CLOCK_SETTING: Final = 0x100

# Names as they appear in profiles, reports and policies
# (ThrottleReason values in the contract, plus the ignored ones).
REASON_BITS: Final[dict[str, int]] = {
    "gpu_idle": GPU_IDLE,
    "applications_clocks_setting": APPLICATIONS_CLOCKS_SETTING,
    "sw_power_cap": SW_POWER_CAP,
    "hw_slowdown": HW_SLOWDOWN,
    "sync_boost": SYNC_BOOST,
    "sw_thermal_slowdown": SW_THERMAL_SLOWDOWN,
    "hw_thermal_slowdown": HW_THERMAL_SLOWDOWN,
    "hw_power_brake": HW_POWER_BRAKE_SLOWDOWN,
    "display_clock_setting": DISPLAY_CLOCK_SETTING,
}

# Never judged: they say nothing about the node's health.
IGNORED: Final = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})


def decode(mask: int) -> list[str]:
    """Bitmask → reason names (bits NVML may add later are reported as ``bit_0x…``)."""
    names = [name for name, bit in REASON_BITS.items() if mask & bit]
    known = 0
    for bit in REASON_BITS.values():
        known |= bit
    unknown = mask & ~known
    bit = 1
    while unknown:
        if unknown & bit:
            names.append(f"bit_{bit:#x}")
            unknown &= ~bit
        bit <<= 1
    return names


def encode(names: list[str]) -> int:
    mask = 0
    for name in names:
        mask |= REASON_BITS[name]
    return mask
