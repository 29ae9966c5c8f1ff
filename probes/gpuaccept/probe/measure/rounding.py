"""How measured figures are rounded before they go into a report."""


def round_figure(value: float) -> float:
    """One decimal for large figures, three significant digits for small ones
    (so a slow but non-zero bandwidth never rounds to 0)."""
    if value == 0 or abs(value) >= 100:
        return round(value, 1)
    return float(f"{value:.3g}")
