"""``bench.queue``'s report: drain throughput, the ratios of the same run, add-to-start latency,
the targets, and the plot of drain jobs/s against worker processes."""

from __future__ import annotations

import os
from pathlib import Path

from bench.harness.drain import DrainResult
from bench.harness.latency import LatencyResult, LatencySystem
from bench.harness.report import fmt_ms, fmt_rate, fmt_ratio, table, verdict
from bench.harness.server import Server
from bench.harness.systems.base import BROKERS, OURS, System
from bench.queue.plan import REFERENCE_BATCH, UNBATCHED, Plan


def report(
    plan: Plan,
    drains: dict[tuple[System, int, int], DrainResult],
    latencies: dict[LatencySystem, LatencyResult],
) -> None:
    label = f"median of {plan.repeat}" if plan.repeat > 1 else "one run"
    print(
        f"\n## Drain throughput, no-op jobs, jobs/s ({label}; every drain at least "
        f"{plan.min_drain_s:g} s)\n"
    )
    rows = []
    for (system, workers, batch), r in drains.items():
        rounds = " / ".join(
            f"{fmt_rate(x)} ({s:.2f} s{' SHORT' if short else ''})"
            for x, s, short in zip(r.rates, r.drain_s, r.short, strict=True)
        )
        rows.append(
            [
                system,
                str(workers),
                "-" if system in UNBATCHED else str(batch),
                "/".join(f"{n:,}" for n in sorted(set(r.jobs))),
                fmt_rate(r.median_rate),
                f"{r.median_drain_s:.2f}",
                rounds,
                fmt_rate(r.enqueue_rate),
            ]
        )
    headers = [
        "system",
        "workers",
        "batch",
        "jobs",
        "drain jobs/s",
        "drain s",
        "all rounds (jobs/s, s)",
        "enqueue jobs/s",
    ]
    if plan.repeat == 1:
        headers.pop(6)
        rows = [r[:6] + r[7:] for r in rows]
    print(table(headers, rows) if rows else "(nothing ran)")

    def ratio(a: DrainResult | None, b: DrainResult | None) -> str:
        return fmt_ratio(a.median_rate / b.median_rate) if a and b else "-"

    print("\n## Ratios (same run; graphile-worker has no batch size: its one run per worker")
    print(f"## count is compared at batch {REFERENCE_BATCH})\n")
    rows = []
    for batch in plan.batches:
        for workers in plan.workers:
            raw = drains.get(("raw", workers, batch))
            ours = drains.get(("ours-batched", workers, batch))
            cells = [str(workers), str(batch)]
            cells.extend(ratio(drains.get((mode, workers, batch)), raw) for mode in OURS)
            cells.append(ratio(ours, drains.get(("pgqueuer", workers, batch))))
            cells.append(ratio(drains.get(("ours-batch-tx", workers, batch)), ours))
            graphile = drains.get(("graphile", workers, 0)) if batch == REFERENCE_BATCH else None
            cells.append(ratio(ours, graphile))
            cells.extend(ratio(ours, drains.get((b, workers, batch))) for b in BROKERS)
            if any(c != "-" for c in cells[2:]):
                rows.append(cells)
    headers = [
        "workers",
        "batch",
        "batched/raw",
        "transactional/raw",
        "batch-tx/raw",
        "batched/pgqueuer",
        "batch-tx/batched",
        "batched/graphile",
        *(f"batched/{b}" for b in BROKERS),
    ]
    print(table(headers, rows) if rows else "(nothing to compare)")

    if latencies:
        print(f"\n## Add-to-start latency, ms ({plan.latency_samples} samples, idle worker)\n")
        rows = [
            [
                s,
                fmt_ms(r.p50),
                fmt_ms(r.p99),
                fmt_ms(min(r.samples)),
                fmt_ms(max(r.samples)),
                fmt_ms(r.enqueue_p50),
                fmt_ms(r.after_enqueue_p50),
            ]
            for s, r in latencies.items()
        ]
        headers = ["system", "p50", "p99", "min", "max", "enqueue call p50", "after it p50"]
        print(table(headers, rows))
        ours_l, pgq_l = latencies.get("ours"), latencies.get("pgqueuer")
        if ours_l and pgq_l:
            print(
                f"\nours/pgqueuer: p50 {fmt_ratio(ours_l.p50 / pgq_l.p50)}, "
                f"p99 {fmt_ratio(ours_l.p99 / pgq_l.p99)}"
            )

    print("\n## Targets (issue 13 §2; ours = the batched completion mode unless named)\n")
    print(table(["target", "measured", "verdict"], targets(plan, drains, latencies) or [["-"] * 3]))


def targets(
    plan: Plan,
    drains: dict[tuple[System, int, int], DrainResult],
    latencies: dict[LatencySystem, LatencyResult],
) -> list[list[str]]:
    rows: list[list[str]] = []

    def check(name: str, a: DrainResult | None, b: DrainResult | None, at_least: float) -> None:
        if a and b:
            x = a.median_rate / b.median_rate
            rows.append([name, fmt_ratio(x), verdict(x >= at_least)])

    ref = REFERENCE_BATCH
    for workers in plan.workers:
        ours100 = drains.get(("ours-batched", workers, ref))
        w = f"{workers}w"
        check(
            f"batch {ref}, {w}: >= 1.5x graphile",
            ours100,
            drains.get(("graphile", workers, 0)),
            1.5,
        )
        check(f"batch {ref}, {w}: >= 0.6x raw", ours100, drains.get(("raw", workers, ref)), 0.6)
        check(
            f"batch 1, {w}: >= 0.8x raw",
            drains.get(("ours-batched", workers, 1)),
            drains.get(("raw", workers, 1)),
            0.8,
        )
        check(
            f"batch {ref}, {w}: batch-tx >= 0.5x batched",
            drains.get(("ours-batch-tx", workers, ref)),
            ours100,
            0.5,
        )
    for batch in plan.batches:
        for workers in plan.workers:
            ours, nats = (
                drains.get(("ours-batched", workers, batch)),
                drains.get(("nats", workers, batch)),
            )
            if ours and nats:
                x = ours.median_rate / nats.median_rate
                rows.append(
                    [f"batch {batch}, {workers}w: ahead of nats", fmt_ratio(x), verdict(x > 1)]
                )
    if latencies.get("ours") and latencies.get("pgqueuer"):
        o, p = latencies["ours"], latencies["pgqueuer"]
        rows.append(
            [
                "latency p50 <= 0.75x pgqueuer",
                fmt_ratio(o.p50 / p.p50),
                verdict(o.p50 <= 0.75 * p.p50),
            ]
        )
        rows.append(["latency p99 <= pgqueuer", fmt_ratio(o.p99 / p.p99), verdict(o.p99 <= p.p99)])
    return rows


PLOT_LABELS: dict[System, str] = {
    "ours-batched": "pgenough (batched)",
    "ours-tx": "pgenough (transactional)",
    "ours-batch-tx": "pgenough (batch-transactional)",
    "raw": "raw SKIP LOCKED loop",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "graphile": "graphile-worker",
    "nats": "NATS JetStream",
    "nats-ackall": "NATS JetStream (AckPolicy.ALL, one ack per batch)",
    "rabbitmq": "RabbitMQ",
    "rabbitmq-multi": "RabbitMQ (basic.ack multiple=True per batch)",
}


def plot_drain(
    plan: Plan, drains: dict[tuple[System, int, int], DrainResult], path: Path, server: Server
) -> None:
    """Drain jobs/s vs worker processes at the reference batch, one line per system, the median
    of the counted drains per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    drawn = 0
    for system in plan.systems:
        batch = 0 if system in UNBATCHED else REFERENCE_BATCH
        points = sorted(
            (w, r.median_rate) for (s, w, b), r in drains.items() if s == system and b == batch
        )
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", label=PLOT_LABELS[system])
        drawn += 1
    if not drawn:
        print(f"plot: nothing measured at batch {REFERENCE_BATCH}; {path} not written")
        plt.close(fig)
        return
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(plan.workers), [str(w) for w in plan.workers])
    ax.set_xlabel("worker processes")
    ax.set_ylabel("drain jobs/s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.grid(True, alpha=0.3)
    rounds = f"median of {plan.repeat} drains" if plan.repeat > 1 else "one drain"
    ax.set_title(
        f"Drains of at least {plan.min_drain_s:g} s, durable no-op jobs, batch/prefetch "
        f"{REFERENCE_BATCH} "
        f"({rounds})\nPostgreSQL {server.settings.get('server_version', '?')}, "
        f"synchronous_commit={server.settings.get('synchronous_commit', '?')}, "
        f"{os.cpu_count()} CPUs",
        fontsize=10,
    )
    ax.legend(fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot: {path}")
