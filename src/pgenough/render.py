"""How the ``pgenough`` command shows the operators' read model (``plans.inspect``): rich
tables and panels built from its dataclasses. Pure: values in, renderables out, no I/O, so
``cli.py`` stays a dispatcher and ``--json`` bypasses all of this.

The plan service's records are for the type checker only: ``pgenough jobs`` and ``job`` render
the core's records in an installation without the ``service`` extra, where most of the plan
service cannot be imported. ``RunStatus`` is imported for real: ``plans.runs`` needs only the
core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.table import Column, Table
from rich.text import Text

from pgenough.core import AttemptError, JobRecord, JobState, QueueStats
from pgenough.plans.runs import RunStatus

if TYPE_CHECKING:
    from pgenough.plans.inspect import (
        Failures,
        Overview,
        ProviderSummary,
        RunDetail,
        RunSummary,
    )

RunOf = Callable[[JobRecord], int | None]
"""Which run a job applies (``plans.inspect.chunk_run``), for the run column of jobs."""

STATUS_STYLES: dict[str, str] = {
    RunStatus.RUNNING: "cyan",
    RunStatus.STAGED: "yellow",
    RunStatus.PROCESSED: "green",
    RunStatus.FAILED: "bold red",
    # Job states (core queue).
    JobState.READY: "cyan",
    JobState.RUNNING: "yellow",
    JobState.DEAD: "bold red",
    JobState.CANCELLED: "dim",
}
ERROR_WIDTH = 120
"""Errors are cut to this many characters in tables (``--json`` has them whole)."""


def _table(*columns: Column | str, title: str) -> Table:
    """The house style: a header rule and no cell borders, so wide tables fit a terminal.
    Only ``_text`` columns wrap: ids, states and numbers stay whole on one line."""
    return Table(
        *(Column(c, no_wrap=True) if isinstance(c, str) else c for c in columns),
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )


def _text(header: str) -> Column:
    """A column of free text (reasons, errors), last in its table: on a narrow terminal it
    is the one that wraps."""
    return Column(header, min_width=20, overflow="fold")


def _num(header: str) -> Column:
    """A column of numbers: right-aligned, so magnitudes line up."""
    return Column(header, justify="right", no_wrap=True)


def status(value: str) -> Text:
    return Text(value, style=STATUS_STYLES.get(value, ""))


def duration(seconds: float) -> str:
    """``seconds`` in the two largest units an operator reads at a glance: 45s, 3m 05s, 2h 14m,
    3d 4h (1h, not 1h 00m)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    for unit, name, sub, sub_name, width in (
        (86400, "d", 3600, "h", 1),
        (3600, "h", 60, "m", 2),
        (60, "m", 1, "s", 2),
    ):
        if s >= unit:
            rest = s % unit // sub
            return f"{s // unit}{name}" + (f" {rest:0{width}d}{sub_name}" if rest else "")
    raise AssertionError("unreachable: s >= 60")


def ago(when: datetime | None, now: datetime) -> str:
    return "never" if when is None else f"{duration((now - when).total_seconds())} ago"


def count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f}"


def short(text: str | None, width: int = ERROR_WIDTH) -> str:
    """One line of at most ``width`` characters (tracebacks and XML errors run long)."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


# -- pgenough status ------------------------------------------------------------------------


def _spaced(parts: Sequence[RenderableType]) -> Group:
    """Sections one blank line apart."""
    spaced: list[RenderableType] = []
    for part in parts:
        spaced.extend([part, Text("")] if part is not parts[-1] else [part])
    return Group(*spaced)


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
    return _spaced(parts)


def providers_table(providers: Sequence[ProviderSummary], now: datetime) -> Table:
    table = _table(
        "provider",
        _num("run"),
        "status",
        _num("age"),
        _num("staged"),
        _num("skipped"),
        _num("written"),
        _num("plans/s"),
        _num("last success"),
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
        table.caption = "no runs yet: `pgenough worker fetch` starts one"
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


def queues_table(queues: Sequence[QueueStats]) -> Table:
    table = _table(
        "queue",
        _num("ready"),
        _num("scheduled"),
        _num("running"),
        _num("dead"),
        _num("oldest ready"),
        title="queues",
    )
    for q in queues:
        table.add_row(
            q.queue,
            count(q.ready),
            count(q.scheduled),
            count(q.running),
            Text(count(q.dead), style="bold red" if q.dead else ""),
            duration(q.oldest_ready_age) if q.ready else "-",
        )
    if not queues:
        table.caption = "no jobs queued"
    return table


def failures_table(failures: Failures, window: float) -> Table:
    table = _table(
        _num("runs failed"),
        _num("rows failed"),
        _num("jobs dead"),
        _num("failed job attempts"),
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
    table = _table(
        _num("run"),
        "provider",
        "status",
        _num("age"),
        _num("took"),
        _num("MB"),
        _num("staged"),
        _num("skipped"),
        _num("written"),
        _num("bad rows"),
        _num("chunks"),
        _text("reason"),
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
    return _spaced(parts)


def _at(when: datetime | None, start: datetime) -> str:
    """When, and how long after the run started (the timings an operator compares)."""
    if when is None:
        return ""
    return f"{when.isoformat()} (+{duration((when - start).total_seconds())})"


def attempts_table(attempts: Sequence[dict[str, Any]]) -> Table:
    table = _table(
        _num("#"),
        "at",
        _num("took"),
        _num("HTTP"),
        _num("MB"),
        _num("retry in"),
        _text("error"),
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
    table = _table(
        _text("reason"),
        "base_plan_id",
        "plan_id",
        title=f"skipped records ({len(samples)} of {skipped:,} shown)",
    )
    for s in samples:
        table.add_row(short(s.get("reason")), s.get("base_plan_id") or "", s.get("plan_id") or "")
    return table


def row_failures_table(run: RunDetail) -> Table:
    table = _table(
        _num("seq"),
        "base_plan_id",
        "plan_id",
        _text("error"),
        title=f"rows that could not be written ({len(run.row_failures)} of"
        f" {run.rows_failed:,} shown)",
    )
    for f in run.row_failures:
        table.add_row(str(f.seq), f.base_plan_id or "", f.plan_id or "", short(f.error))
    return table


# -- jobs: pgenough jobs / job / failures / run / retry / discard ---------------------------


def jobs_table(jobs: Sequence[JobRecord], now: datetime, title: str = "failing jobs") -> Table:
    table = _table(
        _num("job"),
        "queue",
        "kind",
        "state",
        _num("attempts"),
        _num("when"),
        _text("last error"),
        title=title,
    )
    for j in jobs:
        table.add_row(
            str(j.id),
            j.queue,
            j.kind,
            status(j.state),
            f"{j.attempts}/{j.max_attempts}",
            _job_when(j, now),
            short(j.last_error),
        )
    if not jobs:
        table.caption = "none"
    return table


def jobs_list(
    jobs: Sequence[JobRecord], now: datetime, *, run_of: RunOf, more: bool = False
) -> Table:
    """``pgenough jobs``: every column an operator browses by, the worker and lease of a
    running job, the run of a chunk job; ``more`` when the limit cut the list."""
    table = _table(
        _num("job"),
        "queue",
        "kind",
        _num("run"),
        "state",
        _num("attempts"),
        _num("when"),
        "worker",
        _num("lease"),
        _text("last error"),
        title="jobs",
    )
    for j in jobs:
        run = run_of(j)
        table.add_row(
            str(j.id),
            j.queue,
            j.kind,
            "-" if run is None else str(run),
            status(j.state),
            f"{j.attempts}/{j.max_attempts}",
            _job_when(j, now),
            j.worker or "-",
            _lease(j, now),
            short(j.last_error),
        )
    if not jobs:
        table.caption = "none"
    elif more:
        table.caption = f"older jobs: --before {jobs[-1].id}"
    return table


def job_detail(job: JobRecord, now: datetime, run_of: RunOf) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    run = run_of(job)
    for name, value in (
        ("job", str(job.id)),
        ("queue", job.queue),
        ("kind", job.kind),
        ("run", "" if run is None else str(run)),
        ("state", status(job.state)),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("dedupe key", job.dedupe_key or ""),
        ("created", _stamp(job.created_at, now)),
        ("run at", _stamp(job.run_at, now)),
        ("claimed", _stamp(job.claimed_at, now)),
        ("worker", job.worker or ""),
        ("lease until", _stamp(job.lease_until, now)),
        ("finished", _stamp(job.finished_at, now)),
        ("last error", Text(job.last_error or "", style="red")),
    ):
        if str(value):
            facts.add_row(name, value)
    errors = _table(_num("attempt"), "at", "worker", _text("error"), title="errors")
    for e in job.errors:
        # Whole, not cut: this is where an operator reads what went wrong.
        errors.add_row(_attempt(e), _when(e), e.worker or "-", e.error)
    if not job.errors:
        errors.caption = "no failed attempt recorded"
    payload = Group(Text("payload", style="bold"), JSON.from_data(job.payload, sort_keys=True))
    return _spaced([facts, payload, errors, *tracebacks(job.errors)])


def tracebacks(errors: Sequence[AttemptError]) -> list[RenderableType]:
    """Each failed attempt that kept its traceback (the newest few do), newest last: a
    heading naming the attempt, then the traceback as Python printed it, whole, its
    innermost frame and the exception last, where the eye lands."""
    shown: list[RenderableType] = []
    for e in errors:
        if e.traceback is None:
            continue
        heading = Text(f"traceback of attempt {_attempt(e)}", style="bold")
        heading.append(f" ({_when(e)}, {e.worker or 'unknown worker'})", style="dim")
        indented = "\n".join(f"  {line}" for line in e.traceback.rstrip("\n").splitlines())
        trace = Text(indented, overflow="fold")
        trace.highlight_regex(r'File "[^"]*", line \d+', "cyan")
        trace.highlight_regex(r"(?m)^  \S.*$", "red")  # what Python does not indent: the exception
        shown.append(Group(heading, trace))
    return shown


def _attempt(e: AttemptError) -> str:
    return "-" if e.attempt is None else str(e.attempt)


def _when(e: AttemptError) -> str:
    return "-" if e.at is None else e.at.isoformat()


def _stamp(when: datetime | None, now: datetime) -> str:
    """An instant and how far it is from now, either way."""
    if when is None:
        return ""
    delta = (when - now).total_seconds()
    relative = f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"
    return f"{when.isoformat()} ({relative})"


def _lease(job: JobRecord, now: datetime) -> str:
    if job.state != "running" or job.lease_until is None:
        return "-"
    left = (job.lease_until - now).total_seconds()
    return f"{duration(left)} left" if left > 0 else f"expired {duration(-left)} ago"


def failures(
    jobs: Sequence[JobRecord], runs: Sequence[RunSummary], window: float, now: datetime
) -> RenderableType:
    return _spaced(
        [
            jobs_table(jobs, now),
            runs_table(runs, now, title=f"runs failed in the last {duration(window)}"),
        ]
    )


def message(text: str) -> Text:
    """A plain line: no markup or number highlighting on ids and counts."""
    return Text(text)


def _job_when(job: JobRecord, now: datetime) -> str:
    if job.state == "ready":
        wait = (job.run_at - now).total_seconds()
        return f"in {duration(wait)}" if wait > 0 else "now"
    if job.finished_at is not None:
        return ago(job.finished_at, now)
    return ""


def job_line(verb: str, job: JobRecord) -> Text:
    """``retried job 12 (plans/apply_chunk): ready, 1/3 attempts used``."""
    line = Text(f"{verb} job {job.id} ({job.queue}/{job.kind}): ")
    line.append_text(status(job.state))
    line.append(f", {job.attempts}/{job.max_attempts} attempts used")
    return line
