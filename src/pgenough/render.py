"""How pgenough's commands show its records: rich tables and panels built from the core's
dataclasses (jobs, queue counts). Pure: values in, renderables out, no I/O, so the commands
stay dispatchers and ``--json`` bypasses all of this.

The helpers (``house_table``, ``number_column``, ``text_column``, ``status``, ``duration``, ``ago``,
``count``, ``short``, ``spaced``...) are public: an application's commands (the plan service's
``pgenough-plans status``) render their own records in the same house style."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from rich import box
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.table import Column, Table
from rich.text import Text

from pgenough.core import JobRecord
from pgenough.core.admin import (
    AttemptError,
    JobFailures,
    JobState,
    PeriodicInfo,
    QueuePoint,
    QueueStats,
    WorkerInfo,
)

__all__ = [
    "ERROR_WIDTH",
    "STATUS_STYLES",
    "StatusView",
    "ago",
    "count",
    "duration",
    "house_table",
    "job_detail",
    "job_failures_table",
    "job_line",
    "jobs_list",
    "jobs_table",
    "megabytes",
    "message",
    "number_column",
    "periodic_table",
    "queues_table",
    "short",
    "spaced",
    "stamp",
    "status",
    "status_view",
    "text_column",
    "tracebacks",
    "workers_table",
]

STATUS_STYLES: Mapping[str, str] = {
    JobState.READY: "cyan",
    JobState.RUNNING: "yellow",
    JobState.DEAD: "bold red",
    JobState.CANCELLED: "dim",
}
"""The style of each job state; an application passes its own statuses' to ``status``."""
ERROR_WIDTH = 120
"""Errors are cut to this many characters in tables (``--json`` has them whole)."""


def house_table(*columns: Column | str, title: str) -> Table:
    """The house style: a header rule and no cell borders, so wide tables fit a terminal.
    Only ``text_column`` columns wrap: ids, states and numbers stay whole on one line."""
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


def text_column(header: str) -> Column:
    """A column of free text (reasons, errors), last in its table: on a narrow terminal it
    is the one that wraps."""
    return Column(header, min_width=20, overflow="fold")


def number_column(header: str) -> Column:
    """A column of numbers: right-aligned, so magnitudes line up."""
    return Column(header, justify="right", no_wrap=True)


def status(value: str, styles: Mapping[str, str] = STATUS_STYLES) -> Text:
    """A state or status, in its style (``styles``: which style each value has)."""
    return Text(value, style=styles.get(value, ""))


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


def spaced(parts: Sequence[RenderableType]) -> Group:
    """Sections one blank line apart."""
    lines: list[RenderableType] = []
    for part in parts:
        lines.extend([part, Text("")] if part is not parts[-1] else [part])
    return Group(*lines)


class StatusView(Protocol):
    """What ``status_view`` shows (``pgenough status``'s read)."""

    @property
    def window(self) -> float: ...
    @property
    def queues(self) -> Sequence[QueueStats]: ...
    @property
    def failures(self) -> JobFailures: ...
    @property
    def throughput(self) -> Sequence[QueuePoint]: ...
    @property
    def workers(self) -> Sequence[WorkerInfo]: ...
    @property
    def periodic(self) -> Sequence[PeriodicInfo]: ...


def status_view(view: StatusView, now: datetime) -> Group:
    """``pgenough status``: every queue's depth and throughput, what failed in the window,
    the workers and the periodic tasks."""
    return spaced(
        [
            queues_table(view.queues, view.throughput, view.window),
            job_failures_table(view.failures, view.window),
            workers_table(view.workers, now),
            periodic_table(view.periodic, now),
        ]
    )


def workers_table(workers: Sequence[WorkerInfo], now: datetime) -> Table:
    table = house_table(
        "worker",
        "host",
        number_column("pid"),
        "queues",
        number_column("up"),
        number_column("seen"),
        number_column("running"),
        text_column("jobs"),
        title="workers",
    )
    for w in workers:
        jobs = ", ".join(f"{j.id} {j.kind}" for j in w.running[:5])
        if w.running_count > 5:
            jobs += f", … ({w.running_count} in all)"
        table.add_row(
            Text(w.name, style="" if w.alive else "dim"),
            w.host,
            str(w.pid),
            ", ".join(w.queues),
            duration((now - w.started_at).total_seconds()),
            Text(f"{duration(w.seen_ago)} ago", style="" if w.alive else "bold red"),
            count(w.running_count),
            jobs,
        )
    if not workers:
        table.caption = "none running: `pgenough worker run module:app` starts one"
    elif any(not w.alive for w in workers):
        table.caption = (
            "in red: gone (no heartbeat): died without stopping; its jobs' leases expire"
        )
    return table


def _until(when: datetime, now: datetime) -> str:
    return duration((when - now).total_seconds())


def periodic_table(tasks: Sequence[PeriodicInfo], now: datetime) -> Table:
    table = house_table(
        "task",
        "schedule",
        number_column("last run"),
        "by",
        number_column("next run"),
        number_column("missed"),
        number_column("overdue"),
        title="periodic tasks",
    )
    for t in tasks:
        table.add_row(
            t.name,
            t.schedule.removeprefix("every ").removeprefix("cron "),
            ago(t.last_run_at, now),
            t.last_run_by or "-",
            "-"
            if t.next_run_at is None
            else f"in {duration((t.next_run_at - now).total_seconds())}",
            Text(count(t.missed), style="yellow" if t.missed else ""),
            Text(count(t.overdue), style="bold red" if t.overdue else ""),
        )
    if not tasks:
        table.caption = "none claimed yet"
    return table


def job_failures_table(failures: JobFailures, window: float) -> Table:
    table = house_table(
        number_column("jobs dead"),
        number_column("failed attempts"),
        title=f"failures in the last {duration(window)}",
    )
    table.add_row(
        *(
            Text(count(n), style="bold red" if n else "")
            for n in (failures.dead, failures.attempts_failed)
        )
    )
    return table


def _queue_cell(q: QueueStats) -> Text:
    """The queue's name, with what holds it back: paused, a fleet-wide limit, a rate."""
    cell = Text(q.queue)
    if q.paused:
        cell.append(" paused", "bold yellow")
    if q.max_running is not None:
        cell.append(f" limit {q.max_running}", "cyan")
    if q.rate_count is not None and q.rate_interval is not None:
        cell.append(f" rate {q.rate_count}/{q.rate_interval:g}s", "cyan")
    return cell


def queues_table(
    queues: Sequence[QueueStats], throughput: Sequence[QueuePoint] = (), window: float = 0
) -> Table:
    """Every queue's depth; with ``throughput`` (``queue_history``'s points over the last
    ``window`` seconds), the jobs it completed in that window."""
    done: dict[str, int] = {}
    for point in throughput:
        done[point.queue] = done.get(point.queue, 0) + point.completed
    columns = [number_column(f"done {duration(window)}")] if throughput or window else []
    table = house_table(
        "queue",
        number_column("ready"),
        number_column("scheduled"),
        number_column("running"),
        number_column("dead"),
        number_column("oldest ready"),
        *columns,
        title="queues",
    )
    for q in queues:
        extra = [count(done.get(q.queue, 0))] if columns else []
        table.add_row(
            _queue_cell(q),
            count(q.ready),
            count(q.scheduled),
            count(q.running),
            Text(count(q.dead), style="bold red" if q.dead else ""),
            duration(q.oldest_ready_age) if q.ready else "-",
            *extra,
        )
    if not queues:
        table.caption = "no jobs queued"
    return table


# -- jobs: pgenough jobs / job / failures / run / retry / discard ---------------------------


def jobs_table(jobs: Sequence[JobRecord], now: datetime, title: str = "failing jobs") -> Table:
    table = house_table(
        number_column("job"),
        "queue",
        "kind",
        "state",
        number_column("attempts"),
        number_column("when"),
        text_column("last error"),
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


def jobs_list(jobs: Sequence[JobRecord], now: datetime, *, more: bool = False) -> Table:
    """``pgenough jobs``: every column an operator browses by, the worker and lease of a
    running job; ``more`` when the limit cut the list."""
    table = house_table(
        number_column("job"),
        "queue",
        "kind",
        "state",
        number_column("attempts"),
        number_column("when"),
        "worker",
        number_column("lease"),
        text_column("last error"),
        title="jobs",
    )
    for j in jobs:
        table.add_row(
            str(j.id),
            j.queue,
            j.kind,
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


def job_detail(job: JobRecord, now: datetime) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for name, value in (
        ("job", str(job.id)),
        ("queue", job.queue),
        ("kind", job.kind),
        ("state", status(job.state)),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("dedupe key", job.dedupe_key or ""),
        ("created", stamp(job.created_at, now)),
        ("run at", stamp(job.run_at, now)),
        ("claimed", stamp(job.claimed_at, now)),
        ("worker", job.worker or ""),
        ("lease until", stamp(job.lease_until, now)),
        ("finished", stamp(job.finished_at, now)),
        ("last error", Text(job.last_error or "", style="red")),
    ):
        if str(value):
            facts.add_row(name, value)
    errors = house_table(
        number_column("attempt"), "at", "worker", text_column("error"), title="errors"
    )
    for e in job.errors:
        # Whole, not cut: this is where an operator reads what went wrong.
        errors.add_row(_attempt(e), _when(e), e.worker or "-", e.error)
    if not job.errors:
        errors.caption = "no failed attempt recorded"
    payload = Group(Text("payload", style="bold"), JSON.from_data(job.payload, sort_keys=True))
    return spaced([facts, payload, errors, *tracebacks(job.errors)])


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


def stamp(when: datetime | None, now: datetime) -> str:
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
