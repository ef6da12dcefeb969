"""``bench.steady``'s report: the size and series tables, the plots, and the targets."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness.report import fmt_ms, table, verdict
from bench.steady import BASE, KEEP_UP, SAMPLE, SETTLE, SUSTAIN_TARGET, SYSTEMS, SteadySystem
from bench.steady.analysis import (
    Run,
    held_figures,
    keep_up_whole,
    mib,
    p50,
    p99,
    per_second,
    sustained,
)
from bench.steady.phase import PhaseResult


def size_row(result: PhaseResult) -> list[str]:
    s = result.samples
    if not s:
        return ["?"] * 7
    return [
        f"{mib(s[0]['total'])} -> {mib(max(x['total'] for x in s))} -> {mib(s[-1]['total'])}",
        f"{mib(max(x['claim_idx'] for x in s))}",
        f"{mib(max(x['pkey'] for x in s))}",
        f"{max(x['dead'] for x in s):,.0f}",
        f"{s[-1]['dead']:,.0f}",
        f"{s[-1]['autovacuums'] - s[0]['autovacuums']:.0f}",
        f"{s[-1]['autoanalyzes'] - s[0]['autoanalyzes']:.0f}",
    ]


def print_series(result: PhaseResult, every: int) -> None:
    rows = []
    samples = result.samples
    for i, s in enumerate(samples):
        if i % every and i != len(samples) - 1:
            continue
        t = s["t"]
        rows.append(
            [
                f"{t:.0f}",
                f"{result.sent_rate(max(0, t - SAMPLE), t) if t > 0 else 0:,.0f}",
                f"{result.done_rate(max(0, t - SAMPLE), t) if t > 0 else 0:,.0f}",
                f"{result.backlog(t):,}",
                fmt_ms(p50(result.claim_latencies(t - SAMPLE, t))),
                mib(s["total"]),
                mib(s["claim_idx"]),
                f"{s['live']:,.0f}",
                f"{s['dead']:,.0f}",
                f"{s['autovacuums']:.0f}",
                f"{s['autoanalyzes']:.0f}",
            ]
        )
    print(
        table(
            [
                "t s",
                "enq/s",
                "done/s",
                "backlog",
                "claim p50 ms",
                "total MiB",
                "claim idx MiB",
                "live",
                "dead",
                "autovac",
                "autoanalyze",
            ],
            rows,
        )
    )


def render(
    steady: dict[tuple[SteadySystem, str], PhaseResult],
    held: dict[SteadySystem, PhaseResult],
    steady_path: Path | None,
    held_path: Path | None,
) -> list[Path]:
    """The images asked for (``--plot-steady``, ``--plot-held``); nothing without them."""
    steady = steady if steady_path else {}
    held = held if held_path else {}
    if not steady and not held:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        print("note: matplotlib missing (pip install -e '.[bench]'): no images")
        return []
    paths = []
    if steady and steady_path:
        fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
        for (system, label), r in steady.items():
            ts = [s["t"] for s in r.samples]
            name = f"{system} {label}"
            axes[0].plot(ts, [r.backlog(t) for t in ts], label=name)
            axes[1].plot(ts, [s["dead"] for s in r.samples], label=name)
            axes[2].plot(ts, [s["total"] / 2**20 for s in r.samples], label=name)
            axes[3].plot(ts, [s["claim_idx"] / 2**20 for s in r.samples], label=name)
        for ax, title in zip(
            axes,
            ("backlog (jobs)", "n_dead_tup", "jobs table total MiB", "claim index MiB"),
            strict=True,
        ):
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        axes[-1].set_xlabel("seconds")
        fig.suptitle("Steady state at 50% and 90% of the drain capacity (autovacuum on)")
        fig.tight_layout()
        steady_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(steady_path, dpi=90)
        plt.close(fig)
        paths.append(steady_path)
    if held and held_path:
        fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
        for system, r in held.items():
            bins = per_second(r)
            ts = [b["t"] for b in bins]
            axes[0].plot(ts, [b["claim_p50"] * 1000 for b in bins], label=system)
            axes[1].plot(ts, [b["done"] for b in bins], label=f"{system} done/s")
            axes[1].plot(
                ts,
                [r.sent_rate(t - 1, t) for t in ts],
                linestyle=":",
                label=f"{system} enqueued/s",
            )
            axes[2].plot(ts, [b["backlog"] for b in bins], label=system)
            axes[3].plot([s["t"] for s in r.samples], [s["dead"] for s in r.samples], label=system)
            for a, b in r.spec.holds:
                for ax in axes:
                    ax.axvspan(a, b, color="grey", alpha=0.08)
        axes[0].set_yscale("log")
        for ax, title in zip(
            axes, ("claim p50 ms (1 s bins)", "jobs/s", "backlog (jobs)", "n_dead_tup"), strict=True
        ):
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1].set_xlabel("seconds (shaded: REPEATABLE READ snapshot held)")
        fig.suptitle("Ramp without and with a held xmin horizon (autovacuum on)")
        fig.tight_layout()
        held_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(held_path, dpi=90)
        plt.close(fig)
        paths.append(held_path)
    return paths


def report(run: Run, hold: float) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "capacity": run.capacity,
        "steady": {},
        "sustain": {},
        "held": {},
        "targets": [],
        "failed": run.failed,
    }
    print("\n## Drain capacity (burn-down, same run)")
    rows = [[s, f"{c:,.0f}"] for s, c in run.capacity.items()]
    print(table(["system", "jobs/s"], rows) if rows else "(none measured)")
    if run.steady:
        print(
            f"\n## Steady state (figures over the phase after its first {SETTLE:.0f} s; "
            "done/enqueued also over the whole phase)"
        )
        rows = []
        for (system, label), r in run.steady.items():
            a, b = SETTLE, r.spec.length
            e2e = r.e2e(a, b)
            claims = r.claim_latencies(a, b)
            whole = keep_up_whole(r)
            rows.append(
                [
                    system,
                    label,
                    f"{r.spec.steps[0].rate:,.0f}",
                    f"{r.sent_rate(a, b):,.0f}",
                    f"{r.done_rate(a, b):,.0f}",
                    f"{whole:.3f}x",
                    fmt_ms(p50(e2e)),
                    fmt_ms(p99(e2e)),
                    fmt_ms(p50(claims)),
                    f"{max((r.backlog(t) for t in range(int(b))), default=0):,}",
                    *size_row(r),
                ]
            )
            s = r.samples
            summary["steady"][f"{system} {label}"] = {
                "rate": r.spec.steps[0].rate,
                "enqueued": r.sent_rate(a, b),
                "done": r.done_rate(a, b),
                "done_over_enqueued_whole_phase": whole,
                "e2e_p50": p50(e2e),
                "e2e_p99": p99(e2e),
                "claim_p50": p50(claims),
                "autovacuums": s[-1]["autovacuums"] - s[0]["autovacuums"] if s else None,
                "autoanalyzes": s[-1]["autoanalyzes"] - s[0]["autoanalyzes"] if s else None,
                "samples": r.samples,
            }
        print(
            table(
                [
                    "system",
                    "load",
                    "target/s",
                    "enqueued/s",
                    "done/s",
                    "done/enq whole",
                    "e2e p50 ms",
                    "e2e p99 ms",
                    "claim p50 ms",
                    "max backlog",
                    "total MiB start->max->end",
                    "claim idx max MiB",
                    "pkey max MiB",
                    "max dead",
                    "end dead",
                    "autovacuums",
                    "autoanalyzes",
                ],
                rows,
            )
        )
    for system, tries in run.sustain.items():
        best, how = sustained(tries)
        cap = run.capacity[system]
        print(
            f"\n## {system}: sustained capacity (the search's phases, each over its time after "
            f"the first {SETTLE:.0f} s)"
            if tries
            else f"\n## {system}: sustained capacity: no phase ran to its end"
        )
        if tries:
            rows = [
                [
                    f"{t.share:.1f}x",
                    f"{t.rate:,.0f}",
                    f"{t.enqueued:,.0f}",
                    f"{t.done:,.0f}",
                    f"{t.done / t.enqueued if t.enqueued else float('nan'):.3f}x",
                    f"{t.final_backlog:,} / {t.backlog_limit:,.0f}",
                    fmt_ms(t.e2e_p99),
                    "yes" if t.holds else "no",
                ]
                for t in tries
            ]
            print(
                table(
                    [
                        "share",
                        "target/s",
                        "enqueued/s",
                        "done/s",
                        "done/enq",
                        "final backlog / limit",
                        "e2e p99 ms",
                        "holds",
                    ],
                    rows,
                )
            )
        figure = (
            f"{best.rate:,.0f} jobs/s = {best.rate / cap:.2f}x burn-down ({cap:,.0f})"
            + (" or more: no faster phase ran" if how == "at least" else "")
            if best
            else how
        )
        print(f"sustained capacity ({system}): {figure}")
        summary["sustain"][system] = {
            "sustained": best.rate if best else None,
            "ratio": best.rate / cap if best else None,
            "known": how,
            "tries": [{**asdict(t), "holds": t.holds} for t in tries],
        }
    for system, r in run.held.items():
        h = held_figures(r)
        window = h["window"]
        print(f"\n## {system}: held xmin (snapshot {window[0]:.0f}-{window[1]:.0f} s)")
        rows = []
        for a, b in zip(h["steps"]["ramp"], h["steps"]["held"], strict=True):
            rows.append(
                [
                    f"{a.rate:,.0f}",
                    f"{a.sent:,.0f} / {b.sent:,.0f}",
                    f"{a.done:,.0f} / {b.done:,.0f}",
                    f"{a.growth:,} / {b.growth:,}",
                    f"{'yes' if a.holds else 'no'} / {'yes' if b.holds else 'no'}",
                    f"{fmt_ms(a.claim_p50)} / {fmt_ms(b.claim_p50)}",
                ]
            )
        print("ramp steps, without / with the held snapshot:")
        print(
            table(
                ["step rate/s", "enqueued/s", "done/s", "backlog growth", "holds", "claim p50 ms"],
                rows,
            )
        )
        print(
            f"claim p50: base {fmt_ms(h['claim_p50_base'])} ms; ramp without hold "
            f"{fmt_ms(h['claim_p50_ramp'])} ms; during the hold {fmt_ms(h['claim_p50_held'])} ms "
            f"({h['claim_p50_held'] / h['claim_p50_ramp']:.2f}x); from 20 s after release "
            f"{fmt_ms(h['claim_p50_after'])} ms"
        )
        print(
            f"peak done/s over the ramp steps: without hold {h['peak_done_ramp']:,.0f}, during "
            f"the hold {h['peak_done_held']:,.0f} "
            f"({h['peak_done_held'] / h['peak_done_ramp']:.2f}x)"
        )
        print(
            f"sustainable rate: without hold {h['sustainable_ramp']:,.0f} jobs/s, during the "
            f"hold {h['sustainable_held']:,.0f} jobs/s ({h['sustainable_ratio']:.2f}x)"
        )
        fmt = lambda x: "not within the run" if x is None else f"{x:.0f} s"  # noqa: E731
        print(
            f"recovery (backlog <= {h['backlog_max']:,.0f}, 1 s claim p50 <= "
            f"{fmt_ms(h['claim_max'])} ms): after the no-hold ramp {fmt(h['recovery_ramp'])}, "
            f"after the release {fmt(h['recovery_held'])}"
        )
        summary["held"][system] = {
            **{k: v for k, v in h.items() if k != "steps"},
            "steps": {k: [vars(s) for s in v] for k, v in h["steps"].items()},
            "samples": r.samples,
        }
    rows = target_rows(run, hold)
    print("\n## Targets (issue 20)\n")
    print(table(["system", "target", "measured", "verdict"], rows) if rows else "(no system)")
    keys = ("system", "target", "measured", "verdict")
    summary["targets"] = [dict(zip(keys, r, strict=True)) for r in rows]
    return summary


def target_rows(run: Run, hold: float) -> list[list[str]]:
    """Issue 20's targets per system, each with its measured figure and met / NOT met; a
    target whose phase (or the system's capacity drain) failed is NOT met, one whose phase
    was left out by an option is marked ``not run``."""
    rows: list[list[str]] = []
    for system in SYSTEMS:
        if not any(k.split()[0] == system for k in (*run.failed, *run.capacity)):
            continue

        def add(
            target: str, phase: str, figure: tuple[str, bool] | None, system: str = system
        ) -> None:
            failed = [
                reason
                for name, reason in run.failed.items()
                if name in (f"{system} capacity", f"{system} setup", "run")
                or name.startswith(f"{system} {phase}")
            ]
            if figure is not None:
                rows.append([system, target, figure[0], verdict(figure[1])])
            elif failed:
                rows.append([system, target, "its phase failed (see FAILED)", "NOT met"])
            else:
                rows.append([system, target, "not run", "-"])

        for label, e2e_max in (("50%", 0.050), ("90%", 0.250)):
            r = run.steady.get((system, label))
            keep = e2e = None
            if r is not None:
                x = keep_up_whole(r)
                done, sent = r.started_by(r.spec.length), r.enqueued_by(r.spec.length)
                keep = f"{x:.3f}x ({done:,} of {sent:,} jobs)", x >= KEEP_UP
                y = p99(r.e2e(SETTLE, r.spec.length))
                e2e = f"{fmt_ms(y)} ms", y <= e2e_max
            phase = f"steady {label}"
            add(f"{label}: done/s >= {KEEP_UP}x enqueued/s, whole phase", phase, keep)
            add(f"{label}: e2e p99 <= {e2e_max * 1000:.0f} ms", phase, e2e)

        tries = run.sustain.get(system, [])
        best, how = sustained(tries)
        sus = None
        if best is not None:
            cap = run.capacity[system]
            x = round(best.rate / cap, 6)  # best.rate is best.share x cap
            more = " or more" if how == "at least" else ""
            sus = f"{x:.2f}x{more} ({best.rate:,.0f} of {cap:,.0f} jobs/s)", x >= SUSTAIN_TARGET
        elif tries and not any(k.startswith(f"{system} sustain") for k in run.failed):
            sus = how, False  # the search ran its phases and none held
        add(f"sustained capacity >= {SUSTAIN_TARGET}x burn-down", "sustain", sus)

        claim = rate = rec = None
        if system in run.held:
            h = held_figures(run.held[system])
            x = h["claim_p50_held"] / h["claim_p50_ramp"]
            held_p50, ramp_p50 = fmt_ms(h["claim_p50_held"]), fmt_ms(h["claim_p50_ramp"])
            claim = f"{x:.2f}x ({held_p50} / {ramp_p50} ms)", x <= 2
            x = h["sustainable_ratio"]
            rate = (
                f"{x:.2f}x ({h['sustainable_held']:,.0f} / {h['sustainable_ramp']:,.0f} jobs/s)",
                x >= 0.8,
            )
            t = h["recovery_held"]
            rec = ("not within the run", False) if t is None else (f"{t:.0f} s", t <= 30)
        held = f"held xmin {hold:.0f} s at {BASE:.0%}"
        add(f"{held}: claim p50 <= 2x its baseline", "held xmin", claim)
        add(f"{held}: sustainable rate >= 0.8x", "held xmin", rate)
        add(f"{held}: recovery <= 30 s", "held xmin", rec)
    return rows
