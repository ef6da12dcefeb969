"""``bench.ingest``'s report: per size, then the summary against the targets."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness.report import down, print_target, up
from bench.ingest import (
    EARLIER_E2E,
    RSS_BASE_SIZE,
    TARGET,
    TARGET_E2E,
    TARGET_E2E_SIZE,
    TARGET_PARSE_RATIO,
    TARGET_RSS_GROWTH,
    TARGET_RSS_MIB,
)
from bench.ingest.ceilings import Ceilings
from bench.ingest.end_to_end import EndToEnd


@dataclass
class SizeResult:
    plans: int
    database: str
    ceilings: Ceilings
    runs: list[EndToEnd] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def median(self, pick: Callable[[EndToEnd], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)

    @property
    def e2e_rate(self) -> float:
        return self.plans / self.median(lambda r: r.e2e_s)

    @property
    def rss_mib(self) -> float:
        return self.median(lambda r: r.fetch_rss_kib) / 1024


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _rate(count: int, seconds: float | None) -> str:
    return "n/a" if not seconds else down(count / seconds)


def print_size(r: SizeResult) -> None:
    c = r.ceilings
    n = r.plans
    rows: list[tuple[str, str]] = [
        ("snapshot", f"{c.size_bytes:,} bytes; {c.plans_seen:,} plans, {c.records:,} valid,"
                     f" {c.skipped:,} skipped, {c.distinct_keys:,} distinct keys"),
        ("render (sim, in-process)", f"{c.render_s:.3f}s = {down(n / c.render_s)} plans/s"),
        ("parse-only", f"{c.parse.median:.3f}s = {c.parse.describe(c.plans_seen, 'plans/s')}"),
        ("COPY-only", f"{c.copy.median:.3f}s = {c.copy.describe(c.records, 'rows/s')}"),
    ]  # fmt: skip
    for i, run in enumerate(r.runs, 1):
        tag = f"e2e #{i}" if len(r.runs) > 1 else "e2e"
        rows += [
            (f"{tag}: fetch (started->staged)", f"{run.fetch_s:.3f}s = {_rate(n, run.fetch_s)}"
                                                " plans/s"),
            (f"{tag}: process (staged->processed)", f"{run.process_s:.3f}s ="
             f" startup {_s(run.startup_s)}s + apply {_s(run.apply_s)}s"
             f" ({_rate(run.plans_staged, run.apply_s)} plans/s applied; {run.chunks} chunks)"),
            (f"{tag}: e2e (started->processed)", f"{run.e2e_s:.3f}s = {_rate(n, run.e2e_s)}"
                                                 " plans/s"),
            (f"{tag}: pipeline (fetch + apply)", "n/a" if run.apply_s is None else
             f"{run.fetch_s + run.apply_s:.3f}s = {_rate(n, run.fetch_s + run.apply_s)} plans/s"),
            (f"{tag}: wall", f"{run.wall_s:.3f}s (fetch process {run.fetch_wall_s:.3f}s,"
                             f" process process {run.process_wall_s:.3f}s)"),
            (f"{tag}: fetch worker peak RSS", f"{run.fetch_rss_kib:,} KiB ="
                                              f" {up(run.fetch_rss_kib / 1024)} MiB; VmRSS curve"
                                              f" {run.fetch_rss_curve} MiB"),
            (f"{tag}: process worker peak RSS", f"{up(run.process_rss_kib / 1024)} MiB"),
            (f"{tag}: runs.processed_at", f"{run.processed_at_lag_s:.3f}s before the run was"
                                          " seen PROCESSED (now() = last chunk's tx start)"),
            (f"{tag}: CPU seconds", f"fetch worker {run.fetch_cpu_s:.2f}, process worker"
                                    f" {run.process_cpu_s:.2f}, simulator {run.sim_cpu_s:.2f}"),
            (f"{tag}: run", f"{run.status}, staged {run.plans_staged:,} + skipped"
                            f" {run.plans_skipped:,}, written {run.plans_written:,}, plans table"
                            f" {run.plans_in_table:,}"),
        ]  # fmt: skip
    if r.runs:
        rows.append(("e2e / parse-only", down(r.e2e_rate / c.parse.rate(c.plans_seen), 3)))
    rows.append(("checks", "; ".join(r.problems) if r.problems else "ok"))
    width = max(len(k) for k, _ in rows)
    print(f"\n{r.plans:,} plans (database {r.database})")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def print_summary(results: list[SizeResult]) -> bool:
    header = (
        f"{'plans':>9} {'e2e plans/s':>12} {'e2e s':>8} {'fetch s':>8} {'process s':>9}"
        f" {'apply s':>8} {'parse plans/s':>13} {'COPY rows/s':>11} {'e2e/parse':>9}"
        f" {'RSS MiB':>8}"
    )
    print("\nSummary (medians)\n" + header)
    for r in results:
        c = r.ceilings
        if not r.runs:
            print(f"{r.plans:>9,} (no end-to-end result)")
            continue
        applies = [x.apply_s for x in r.runs if x.apply_s is not None]
        apply = f"{statistics.median(applies):.3f}" if applies else "n/a"
        print(
            f"{r.plans:>9,} {down(r.e2e_rate):>12} {r.median(lambda x: x.e2e_s):>8.3f}"
            f" {r.median(lambda x: x.fetch_s):>8.3f} {r.median(lambda x: x.process_s):>9.3f}"
            f" {apply:>8} {down(c.parse.rate(c.plans_seen)):>13}"
            f" {down(c.copy.rate(c.records)):>11}"
            f" {down(r.e2e_rate / c.parse.rate(c.plans_seen), 3):>9} {up(r.rss_mib):>8}"
        )
    by_size = {r.plans: r for r in results if r.runs}
    big = by_size.get(TARGET_E2E_SIZE)
    base = by_size.get(RSS_BASE_SIZE)
    print(f"\nTarget (docs/plan-service/benchmarks-history.md): {TARGET}")
    if big is None:
        print(f"  >= {TARGET_E2E:,.0f} plans/s end to end at 1M plans: not measured")
    else:
        print_target(
            f">= {TARGET_E2E:,.0f} plans/s end to end at 1M plans",
            big.e2e_rate >= TARGET_E2E,
            f"{down(big.e2e_rate)} plans/s",
        )
    if base is None or not any(r.runs and r.plans != RSS_BASE_SIZE for r in results):
        print(f"  peak fetch RSS <= {TARGET_RSS_GROWTH}x the 10k figure: not measured")
    else:
        for r in results:
            if r.runs and r.plans != RSS_BASE_SIZE:
                growth = r.rss_mib / base.rss_mib
                print_target(
                    f"peak fetch RSS <= {TARGET_RSS_GROWTH}x the 10k figure, at {r.plans:,}",
                    growth <= TARGET_RSS_GROWTH,
                    f"{up(growth, 3)}x: {up(r.rss_mib)} / {up(base.rss_mib)} MiB",
                )
    print(
        "  a partial snapshot still never data: not measured by this benchmark (the plans"
        " tests check it, e.g. tests/plan_service/ingest/test_pipeline.py)"
    )
    print("Earlier targets (issue 10, docs/plan-service/benchmarks-ingest.md)")
    if big is None:
        print(f"  e2e >= {EARLIER_E2E:,.0f} plans/s at {TARGET_E2E_SIZE:,}: not measured")
        print(f"  fetch RSS <= {TARGET_RSS_MIB:.0f} MiB at {TARGET_E2E_SIZE:,}: not measured")
    else:
        print_target(
            f"e2e >= {EARLIER_E2E:,.0f} plans/s at {TARGET_E2E_SIZE:,}",
            big.e2e_rate >= EARLIER_E2E,
            f"{down(big.e2e_rate)} plans/s",
        )
        print_target(
            f"fetch RSS <= {TARGET_RSS_MIB:.0f} MiB at {TARGET_E2E_SIZE:,}",
            big.rss_mib <= TARGET_RSS_MIB,
            f"{up(big.rss_mib)} MiB",
        )
    for r in results:
        if r.runs:
            ratio = r.e2e_rate / r.ceilings.parse.rate(r.ceilings.plans_seen)
            print_target(
                f"e2e >= {TARGET_PARSE_RATIO} x parse-only at {r.plans:,}",
                ratio >= TARGET_PARSE_RATIO,
                down(ratio, 3),
            )
    return all(not r.problems and r.runs for r in results)
