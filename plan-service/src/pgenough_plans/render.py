"""How ``pgenough-plans`` shows the operators' read model (``ingest.inspect``): rich tables and
panels in pgenough's house style (``pgenough.render``). Pure: values in, renderables out.

The records are for the type checker only: ``ingest.inspect`` is imported by the commands
that read them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pgenough.core import JobRecord
from pgenough.render import (
    STATUS_STYLES,
    ago,
    count,
    duration,
    house_table,
    jobs_table,
    megabytes,
    number_column,
    queues_table,
    short,
    spaced,
    text_column,
)
from pgenough.render import status as _status
from pgenough_plans.ingest.runs import RunStatus

if TYPE_CHECKING:
    from pgenough_plans.ingest.inspect import (
        Failures,
        Overview,
        ProviderSummary,
        RunDetail,
        RunSummary,
    )

RUN_STYLES: Mapping[str, str] = {
    **STATUS_STYLES,
    RunStatus.RUNNING: "cyan",
    RunStatus.STAGED: "yellow",
    RunStatus.PROCESSED: "green",
    RunStatus.FAILED: "bold red",
}


def status(value: str) -> Text:
    """A run's status (or a job's state) in its style."""
    return _status(value, RUN_STYLES)


def overview(view: Overview) -> RenderableType:
    notes = provider_notes(view.providers, view.window)
    parts: list[RenderableType] = [
        Group(providers_table(view.providers, view.at), *notes),
        queues_table(view.queues),
        failures_table(view.failures, view.window),
    ]
    processed = sum(p.plans for p in view.throughput)
    if processed:
        parts.append(
            Text(
                f"plans processed in the last {duration(view.window)}: {processed:,}, in"
                f" {len(view.throughput)} minute(s) with work"
            )
        )
    return spaced(parts)


def providers_table(providers: Sequence[ProviderSummary], now: datetime) -> Table:
    table = house_table(
        "provider",
        number_column("run"),
        "status",
        number_column("age"),
        number_column("staged"),
        number_column("skipped"),
        number_column("written"),
        number_column("plans/s"),
        number_column("last success"),
        title="providers",
    )
    for p in providers:
        table.add_row(
            p.provider,
            str(p.last_run_id),
            status(p.last_status),
            duration(p.last_age),
            count(p.plans_staged),
            count(p.plans_skipped),
            count(p.plans_written),
            "-" if p.throughput is None else f"{p.throughput:,.0f}",
            ago(p.last_success_at, now),
        )
    if not providers:
        table.caption = "no runs yet: `pgenough-plans worker fetch` starts one"
    return table


def provider_notes(providers: Sequence[ProviderSummary], window: float) -> list[Text]:
    """A line under the table for each provider that needs a look: why its last run failed,
    rows it could not write, runs it failed lately. Too long for a column, too important to
    cut."""
    notes = []
    for p in providers:
        says = []
        if p.last_reason:
            says.append(f"run {p.last_run_id}: {short(p.last_reason)}")
        if p.rows_failed:
            says.append(f"{p.rows_failed:,} row(s) of run {p.last_run_id} could not be written")
        if p.runs_failed:
            says.append(f"{p.runs_failed} run(s) failed in the last {duration(window)}")
        if says:
            note = Text(f"  {p.provider}: ", style="bold")
            note.append("; ".join(says), style="red")
            notes.append(note)
    return notes


def failures_table(failures: Failures, window: float) -> Table:
    table = house_table(
        number_column("runs failed"),
        number_column("rows failed"),
        number_column("jobs dead"),
        number_column("failed job attempts"),
        title=f"failures in the last {duration(window)}",
    )
    table.add_row(
        *(
            Text(count(n), style="bold red" if n else "")
            for n in (
                failures.runs_failed,
                failures.rows_failed,
                failures.jobs_dead,
                failures.job_attempts_failed,
            )
        )
    )
    return table


# -- pgenough runs / run --------------------------------------------------------------------


def runs_table(runs: Sequence[RunSummary], now: datetime, title: str = "runs") -> Table:
    table = house_table(
        number_column("run"),
        "provider",
        "status",
        number_column("age"),
        number_column("took"),
        number_column("MB"),
        number_column("staged"),
        number_column("skipped"),
        number_column("written"),
        number_column("bad rows"),
        number_column("chunks"),
        text_column("reason"),
        title=title,
    )
    for r in runs:
        table.add_row(
            str(r.id),
            r.provider,
            status(r.status),
            duration((now - r.started_at).total_seconds()),
            duration(r.duration),
            megabytes(r.bytes),
            count(r.plans_staged),
            count(r.plans_skipped),
            count(r.plans_written),
            count(r.rows_failed),
            f"{r.chunks_done}/{count(r.chunks_total)}",
            short(r.reason),
        )
    if not runs:
        table.caption = "none"
    return table


def run_detail(run: RunDetail, now: datetime) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for name, value in (
        ("run", str(run.id)),
        ("provider", run.provider),
        ("url", run.url),
        ("status", status(run.status)),
        ("reason", Text(run.reason or "", style="red")),
        ("doing", run.phase if run.status == RunStatus.RUNNING and run.phase else ""),
        ("owner", run.owner),
        ("feed variant", run.variant or "-"),
        ("started", f"{run.started_at.isoformat()} ({ago(run.started_at, now)})"),
        ("staged", _at(run.staged_at, run.started_at)),
        ("processed", _at(run.processed_at, run.started_at)),
        ("failed", _at(run.failed_at, run.started_at)),
        ("last heartbeat", ago(run.heartbeat_at, now)),
        ("took", duration(run.duration)),
        ("downloaded", f"{megabytes(run.bytes)} MB"),
        (
            "plans",
            f"{run.plans_staged:,} staged, {run.plans_skipped:,} skipped,"
            f" {run.plans_duplicate:,} duplicate, {run.plans_written:,} written,"
            f" {run.rows_failed:,} rows failed",
        ),
        ("chunks", f"{run.chunks_done}/{count(run.chunks_total)} done"),
    ):
        if str(value):
            facts.add_row(name, value)
    parts: list[RenderableType] = [facts, attempts_table(run.attempts)]
    if run.skip_samples:
        parts.append(skipped_table(run.skip_samples, run.plans_skipped))
    if run.row_failures or run.rows_failed:
        parts.append(row_failures_table(run))
    if run.jobs:
        parts.append(jobs_table(run.jobs, now, title="chunk jobs still queued"))
    return spaced(parts)


def _at(when: datetime | None, start: datetime) -> str:
    """When, and how long after the run started (the timings an operator compares)."""
    if when is None:
        return ""
    return f"{when.isoformat()} (+{duration((when - start).total_seconds())})"


def attempts_table(attempts: Sequence[dict[str, Any]]) -> Table:
    table = house_table(
        number_column("#"),
        "at",
        number_column("took"),
        number_column("HTTP"),
        number_column("MB"),
        number_column("retry in"),
        text_column("error"),
        title="HTTP attempts",
    )
    for a in attempts:
        retry_in = a.get("retry_in")
        table.add_row(
            str(a.get("number", "")),
            str(a.get("at", "")),
            f"{float(a.get('duration', 0)):.2f}s",
            str(a.get("status") or "-"),
            megabytes(int(a.get("bytes", 0))),
            "-" if retry_in is None else f"{float(retry_in):.1f}s",
            short(a.get("error")),
        )
    if not attempts:
        table.caption = "none recorded"
    return table


def skipped_table(samples: Sequence[dict[str, Any]], skipped: int) -> Table:
    table = house_table(
        text_column("reason"),
        "base_plan_id",
        "plan_id",
        title=f"skipped records ({len(samples)} of {skipped:,} shown)",
    )
    for s in samples:
        table.add_row(short(s.get("reason")), s.get("base_plan_id") or "", s.get("plan_id") or "")
    return table


def row_failures_table(run: RunDetail) -> Table:
    table = house_table(
        number_column("seq"),
        "base_plan_id",
        "plan_id",
        text_column("error"),
        title=f"rows that could not be written ({len(run.row_failures)} of"
        f" {run.rows_failed:,} shown)",
    )
    for f in run.row_failures:
        table.add_row(str(f.seq), f.base_plan_id or "", f.plan_id or "", short(f.error))
    return table


def failures(
    jobs: Sequence[JobRecord], runs: Sequence[RunSummary], window: float, now: datetime
) -> RenderableType:
    return spaced(
        [
            jobs_table(jobs, now),
            runs_table(runs, now, title=f"runs failed in the last {duration(window)}"),
        ]
    )
