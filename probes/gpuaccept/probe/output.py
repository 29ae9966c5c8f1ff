"""What ``gpuaccept probe`` prints while it works and when it ends.

While it works (on stderr, so ``--output json`` keeps stdout for the JSON):

* on a terminal, one live line: the check under way, ``n of N`` and the time
  left by the budget (:mod:`gpuaccept.checks.budget`) of the checks not done;
* otherwise (a pod's log, ``| tee``), one plain line per check as it finishes:
  ``[n/N] check status seconds key-figure``.

At the end: the table (:mod:`gpuaccept.checks.report_table`), or with
``--output json`` the report with the verdict and the real elapsed time beside it.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from gpuaccept.checks.report_table import CHECK_COLUMN, STATUS_COLUMN, ellipsize, key_figure
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.report import CheckResult, ProbeReport

LINE_WIDTH = 100
VERDICT_KEY = "verdict"
ELAPSED_KEY = "elapsedS"


def check_line(
    done: int, total: int, check: AnyCheckSpec, result: CheckResult, *, simulated: bool
) -> str:
    """One finished check as one plain line of at most :data:`LINE_WIDTH` columns."""
    width = len(str(total))
    seconds = f"{result.duration_s:.1f}s" + (" (simulated)" if simulated else "")
    head = (
        f"[{done:>{width}}/{total}] {check.name:<{CHECK_COLUMN}} "
        f"{result.status.value:<{STATUS_COLUMN}} {seconds:>7}  "
    )
    return head + ellipsize(key_figure(check, result), LINE_WIDTH - len(head))


def eta_s(budget: Mapping[str, float], remaining: Sequence[AnyCheckSpec]) -> float:
    """Seconds left by the budget: the phases of the checks not yet finished."""
    return sum(budget.get(check.name, 0.0) for check in remaining)


@dataclass
class CheckProgress:
    """The probe's progress, check by check, on ``err``: live on a terminal,
    else one line per finished check."""

    err: Console
    checks: Sequence[AnyCheckSpec]
    budget: Mapping[str, float]
    simulated: bool
    _progress: Progress | None = None
    _task: TaskID | None = None
    _done: list[str] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.err.is_terminal

    def _remaining(self) -> list[AnyCheckSpec]:
        return [c for c in self.checks if c.name not in self._done]

    def _describe(self, check: AnyCheckSpec | None) -> dict[str, Any]:
        n = len(self._done) + (1 if check is not None else 0)
        eta = eta_s(self.budget, self._remaining())
        title = check.title if check is not None else "finishing"
        return {
            "description": f"{n} of {len(self.checks)}: {title}",
            "eta": f"about {eta:.0f}s left by the budget",
        }

    def started(self, check: AnyCheckSpec) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, note="", **self._describe(check))

    def note(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, note=text)

    def refresh(self) -> None:
        """Draw the live line now (it is otherwise redrawn a few times a second)."""
        if self._progress is not None:
            self._progress.refresh()

    def finished(self, check: AnyCheckSpec, result: CheckResult) -> None:
        self._done.append(check.name)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=len(self._done))
            return
        line = check_line(
            len(self._done), len(self.checks), check, result, simulated=self.simulated
        )
        self.err.print(line, markup=False, highlight=False, soft_wrap=True)

    @contextmanager
    def shown(self) -> Iterator["CheckProgress"]:
        if not self.live:
            yield self
            return
        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            TextColumn("{task.fields[note]}"),
            TextColumn("{task.fields[eta]}"),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        ) as progress:
            self._progress = progress
            self._task = progress.add_task(
                total=len(self.checks),
                note="",
                **self._describe(None) | {"description": "starting"},
            )
            try:
                yield self
            finally:
                self._progress = None
                self._task = None


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """The verdict as the JSON output carries it: accepted, and every reason and
    warning with its check and message."""

    def reasons(items: Sequence[Any]) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json", by_alias=True) for r in items]

    return {
        "accepted": verdict.accepted,
        "reason": verdict.reason,
        "reasons": reasons(verdict.reasons),
        "warnings": reasons(verdict.warnings),
    }


def json_output(report: ProbeReport, verdict: Verdict, elapsed_s: float | None) -> str:
    """``--output json``: the full report, with the verdict and the seconds this run
    really took beside it (a simulated report's ``wallS`` is the profile's stated
    durations)."""
    out: dict[str, Any] = json.loads(report.model_dump_json(by_alias=True, exclude_none=True))
    out[VERDICT_KEY] = verdict_json(verdict)
    if elapsed_s is not None:
        out[ELAPSED_KEY] = round(elapsed_s, 1)
    return json.dumps(out, indent=2) + "\n"


def read_json_output(text: str) -> tuple[ProbeReport, dict[str, Any]]:
    """``--output json`` read back: the report, and what the CLI added beside it."""
    raw: dict[str, Any] = json.loads(text)
    extra = {key: raw.pop(key) for key in (VERDICT_KEY, ELAPSED_KEY) if key in raw}
    return ProbeReport.model_validate(raw), extra
