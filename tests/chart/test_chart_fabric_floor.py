"""The chart refuses to turn the fabric test on without a busbw floor: unset, a pair
passes with any positive figure, TCP sockets included (docs/policy.md)."""

from gpuaccept.testsupport.chart_rbac import chart_dir, helm, render_chart


def test_fabric_enabled_without_a_minimum_is_refused_naming_the_field() -> None:
    proc = helm(
        "template", "x", str(chart_dir()), "--set", "defaultPolicy.fabric.enabled=true",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0, "fabric was enabled without minBusbwGBps"
    assert "defaultPolicy.fabric.enabled needs defaultPolicy.fabric.minBusbwGBps" in proc.stderr


def test_fabric_enabled_with_a_minimum_renders_the_policy() -> None:
    docs = render_chart(
        set_values={
            "defaultPolicy.fabric.enabled": "true",
            "defaultPolicy.fabric.minBusbwGBps": "300",
        }
    )
    (policy,) = [d for d in docs if d["kind"] == "NodeAcceptancePolicy"]
    assert policy["spec"]["fabric"] == {"enabled": True, "minBusbwGBps": 300}


def test_the_default_values_leave_fabric_off_and_render() -> None:
    (policy,) = [d for d in render_chart() if d["kind"] == "NodeAcceptancePolicy"]
    assert "fabric" not in policy["spec"]
