"""``bench.remote``'s report: the drains and latencies per RTT, and what they advise."""

from __future__ import annotations

import statistics

from bench.harness.report import fmt_ms, fmt_rate, fmt_ratio, table
from bench.harness.systems.base import System
from bench.remote import CellKey, LatencyKind
from bench.remote.drains import Cell, Plan, default_concurrency
from bench.remote.latency import Latency


def report(
    plan: Plan,
    cells: dict[CellKey, Cell],
    latencies: dict[tuple[float, LatencyKind], Latency],
    links: dict[float, list[float]],
) -> None:
    def raw_of(c: Cell) -> Cell | None:
        raw = cells.get((c.rtt_ms, "raw", c.workers, c.batch, default_concurrency(c.batch)))
        return raw if raw and raw.jobs else None

    label = f"median of {plan.repeat}" if plan.repeat > 1 else "one run"
    print(f"\n## Drain throughput through the link, no-op jobs, jobs/s ({label})\n")
    rows = []
    for c in sorted(cells.values(), key=lambda c: (c.rtt_ms, c.batch, c.workers, c.label)):
        if not c.jobs:
            continue
        raw = raw_of(c)
        rows.append(
            [
                f"{c.rtt_ms:g}",
                fmt_ms(statistics.median(links[c.rtt_ms])),
                c.label,
                str(c.workers),
                str(c.batch),
                fmt_rate(c.rate) + (" NOISY" if c.noisy else ""),
                " / ".join(fmt_rate(r) for r in c.rates),
                f"{c.round_trips_per_job:.3f}",
                fmt_ratio(c.rate / raw.rate) if raw and c.system != "raw" else "-",
            ]
        )
    headers = [
        "RTT ms",
        "measured",
        "system",
        "workers",
        "batch",
        "jobs/s",
        "rounds",
        "round trips/job",
        "/raw",
    ]
    print(table(headers, rows) if rows else "(nothing ran)")

    print("\n## Against RTT 0 (each cell's jobs/s at each RTT, as a fraction of the first RTT's)\n")
    rows = []
    first = min(plan.rtts)
    for c in sorted(cells.values(), key=lambda c: (c.batch, c.workers, c.label)):
        if c.rtt_ms != first or not c.jobs:
            continue
        row = [c.label, str(c.workers), str(c.batch)]
        for rtt in plan.rtts:
            at = cells.get((rtt, *c.shape))
            row.append(fmt_ratio(at.rate / c.rate) if at and at.jobs else "-")
        rows.append(row)
    headers = ["system", "workers", "batch", *(f"{r:g} ms" for r in plan.rtts)]
    print(table(headers, rows) if rows else "(nothing ran)")

    if latencies:
        print(f"\n## Add-to-start latency through the link, ms ({plan.latency_samples} samples)\n")
        rows = []
        for (rtt, kind), lat in sorted(latencies.items()):
            raw_lat = latencies.get((rtt, "raw"))
            rows.append(
                [
                    f"{rtt:g}",
                    kind,
                    fmt_ms(lat.p50),
                    fmt_ms(lat.p99),
                    fmt_ms(lat.enqueue_p50),
                    f"{lat.p50 / (rtt / 1000):.1f}" if rtt else "-",
                    fmt_ratio(lat.p50 / raw_lat.p50) if raw_lat and kind != "raw" else "-",
                    fmt_ratio(lat.p99 / raw_lat.p99) if raw_lat and kind != "raw" else "-",
                ]
            )
        headers = [
            "RTT ms",
            "system",
            "p50",
            "p99",
            "enqueue p50",
            "p50 in RTTs",
            "p50/raw",
            "p99/raw",
        ]
        print(table(headers, rows))

    print("\n## What to set on a remote link (from the figures above)\n")
    for line in advice(plan, cells, latencies):
        print(f"- {line}")


def advice(
    plan: Plan,
    cells: dict[CellKey, Cell],
    latencies: dict[tuple[float, LatencyKind], Latency],
) -> list[str]:
    lines: list[str] = []
    far, near = max(plan.rtts), min(plan.rtts)
    low, high = min(plan.batches), max(plan.batches)
    one, many = min(plan.workers), max(plan.workers)

    def cell(rtt: float, system: System, workers: int, batch: int, factor: int = 0) -> Cell | None:
        concurrency = factor * batch if factor else default_concurrency(batch)
        c = cells.get((rtt, system, workers, batch, concurrency))
        return c if c and c.jobs else None

    for system in ("ours-batched", "ours-batch-tx"):
        if system not in plan.systems:
            continue
        small, big = cell(far, system, one, low), cell(far, system, one, high)
        if small and big and high > low:
            lines.append(
                f"batch size ({system}): at {far:g} ms one worker process drains"
                f" {fmt_rate(small.rate)} jobs/s at batch {low}"
                f" ({small.round_trips_per_job:.2f} round trips per job) and"
                f" {fmt_rate(big.rate)} at batch {high} ({big.rate / small.rate:.0f}x,"
                f" {big.round_trips_per_job:.3f} round trips per job): raise --batch-size"
                " (PGENOUGH_WORKER_BATCH_SIZE; default 10), and the concurrency with it: a claim"
                " takes no more jobs than the worker has free slots"
            )
        base = cell(near, system, one, high)
        if big and base:
            lines.append(
                f"what the link costs at batch {high} ({system}, one process): {far:g} ms drains"
                f" {big.rate / base.rate:.0%} of {near:g} ms's rate"
            )
        doubled = cell(far, system, one, high, factor=2)
        if big and doubled:
            lines.append(
                f"prefetch ({system}, batch {high}, {far:g} ms): there is no setting of that"
                " name; a worker claims its next batch once half its slots are free, so a"
                f" concurrency of twice the batch size ({2 * high}) keeps a claim in flight"
                f" while a batch runs: {fmt_rate(doubled.rate)} jobs/s against"
                f" {fmt_rate(big.rate)} at concurrency {default_concurrency(high)}"
                f" ({doubled.rate / big.rate:.2f}x)"
            )
    if many > one:
        for batch in plan.batches:
            single, several = (
                cell(far, "ours-batched", one, batch),
                cell(far, "ours-batched", many, batch),
            )
            if single and several:
                lines.append(
                    f"worker processes (batch {batch}, {far:g} ms): {many} drain"
                    f" {several.rate / single.rate:.1f}x what {one} does: each process's claim"
                    " loop waits a round trip per claim, and processes wait side by side"
                )
    ours_l, raw_l = latencies.get((far, "ours")), latencies.get((far, "raw"))
    if ours_l and raw_l and far:
        lines.append(
            f"add-to-start latency at {far:g} ms: ours p50 {fmt_ms(ours_l.p50)} ms"
            f" ({ours_l.p50 / (far / 1000):.1f} RTTs), raw {fmt_ms(raw_l.p50)} ms"
            f" ({raw_l.p50 / (far / 1000):.1f}): the enqueue's round trip, the notification's"
            " way to the worker and its claim's round trip; no setting shortens it, only a"
            " shorter way between the workers and the database"
        )
    tx, batched = cell(far, "ours-batch-tx", one, high), cell(far, "ours-batched", one, high)
    if tx and batched:
        lines.append(
            "exactly-once handlers: a batch task (ours-batch-tx) drains"
            f" {tx.rate / batched.rate:.2f}x the batched mode at batch {high} and {far:g} ms"
            f" (its transaction's round trips: {tx.round_trips_per_job * high:.1f} per batch"
            f" of {high}); a task that completes its own job in its own transaction spends"
            " those per job: on a remote link, batch them"
        )
    return lines
