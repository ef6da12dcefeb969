"""What ``bench.steady`` makes of its phases: per-second bins, the ramp's steps, the
sustainable rate and recovery, the sustain search, the held-xmin figures, and ``Run``,
everything measured."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench.harness.report import percentile
from bench.steady import (
    BASE,
    BOUNDED_BACKLOG_S,
    GROWTH,
    KEEP_UP,
    RAMP,
    RECOVERED,
    SETTLE,
    SteadySystem,
)
from bench.steady.phase import PhaseFailed, PhaseResult, Step, _indent

T = TypeVar("T")


def p50(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p99(xs: Sequence[float]) -> float:
    return percentile(xs, 99)


def mib(x: float) -> str:
    return f"{x / 2**20:.1f}"


def per_second(result: PhaseResult) -> list[dict[str, float]]:
    """1 s bins: claim p50, handlers started, backlog at the bin's end."""
    bins: list[dict[str, float]] = []
    length = int(result.spec.length + 0.999)
    claims: dict[int, list[float]] = {}
    for t, d, _ in result.claims:
        claims.setdefault(int(t - result.t0), []).append(d)
    for s in range(length):
        bins.append(
            {
                "t": s + 1.0,
                "claim_p50": p50(claims.get(s, [])),
                "done": float(result.started_by(s + 1) - result.started_by(s)),
                "backlog": float(result.backlog(s + 1)),
            }
        )
    return bins


@dataclass
class RampStep:
    rate: float
    sent: float
    done: float
    growth: int
    holds: bool
    claim_p50: float


def ramp_steps(result: PhaseResult, label: str) -> list[RampStep]:
    out = []
    for s in result.spec.steps:
        if s.label != label:
            continue
        growth = result.backlog(s.end) - result.backlog(s.start)
        sent = result.enqueued_by(s.end) - result.enqueued_by(s.start)
        out.append(
            RampStep(
                rate=s.rate,
                sent=result.sent_rate(s.start, s.end),
                done=result.done_rate(s.start, s.end),
                growth=growth,
                holds=growth <= max(50, GROWTH * sent),
                claim_p50=p50(result.claim_latencies(s.start, s.end)),
            )
        )
    return out


def sustainable(steps: list[RampStep]) -> float:
    best = 0.0
    for s in steps:
        if not s.holds:
            break
        best = s.rate
    return best


def recovery(
    result: PhaseResult, after: float, until: float, backlog_max: float, claim_max: float
) -> float | None:
    """Seconds from ``after`` until backlog and 1 s claim p50 are back under their
    thresholds for RECOVERED consecutive seconds (None: not by ``until``)."""
    bins = [b for b in per_second(result) if after < b["t"] <= until]
    good = 0
    for b in bins:
        ok = b["backlog"] <= backlog_max and not b["claim_p50"] > claim_max
        good = good + 1 if ok else 0
        if good == RECOVERED:
            return b["t"] - RECOVERED - after
    return None


def steady_steps(rate: float, length: float) -> tuple[Step, ...]:
    return (Step(0.0, length, rate, "steady"),)


def held_steps(capacity: float, hold: float) -> tuple[tuple[Step, ...], tuple[float, float]]:
    base = BASE * capacity
    steps: list[Step] = [Step(0.0, 20.0, base, "base")]
    t = 20.0
    width = hold / len(RAMP)
    for label in ("ramp", "base2", "held", "after"):
        if label in ("ramp", "held"):
            for f in RAMP:
                steps.append(Step(t, t + width, f * capacity, label))
                t += width
        else:
            length = 40.0
            steps.append(Step(t, t + length, base, label))
            t += length
    hold_start = next(s.start for s in steps if s.label == "held")
    hold_end = max(s.end for s in steps if s.label == "held")
    return tuple(steps), (hold_start, hold_end)


@dataclass
class Run:
    """Everything measured, and every phase that failed (its name: the reason)."""

    capacity: dict[SteadySystem, float] = field(default_factory=dict)
    steady: dict[tuple[SteadySystem, str], PhaseResult] = field(default_factory=dict)
    sustain: dict[SteadySystem, list[SustainTry]] = field(default_factory=dict)
    held: dict[SteadySystem, PhaseResult] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def attempt(self, name: str, measure: Callable[[], T]) -> T | None:
        """``measure()``, or None once its failure is recorded and printed: a failing phase
        never ends the run."""
        try:
            return measure()
        except Exception as exc:
            text = str(exc) if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}"
            lines = text.strip().splitlines() or ["?"]
            if len(lines) > 1:
                print(_indent(text), flush=True)
            reason = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
            self.failed[name] = reason
            print(f"\nFAILED {name}: {reason} -- carrying on", flush=True)
            return None


@dataclass(frozen=True)
class SustainTry:
    """One phase of the sustained-capacity search, over the phase after its first SETTLE s."""

    share: float
    """The producer's rate as a fraction of the burn-down capacity."""
    rate: float
    enqueued: float
    done: float
    final_backlog: int
    """Enqueued minus started at the end of the producer's schedule."""
    e2e_p99: float

    @property
    def backlog_limit(self) -> float:
        return self.enqueued * BOUNDED_BACKLOG_S

    @property
    def keeps_up(self) -> bool:
        return self.done >= KEEP_UP * self.enqueued

    @property
    def bounded(self) -> bool:
        return self.final_backlog <= self.backlog_limit

    @property
    def holds(self) -> bool:
        return self.keeps_up and self.bounded


def sustain_try(r: PhaseResult, share: float) -> SustainTry:
    a, b = SETTLE, r.spec.length
    return SustainTry(
        share=share,
        rate=r.spec.steps[0].rate,
        enqueued=r.sent_rate(a, b),
        done=r.done_rate(a, b),
        final_backlog=r.backlog(b),
        e2e_p99=p99(r.e2e(a, b)),
    )


def sustained(tries: Sequence[SustainTry]) -> tuple[SustainTry | None, str]:
    """The fastest phase that held, and how far that is known: ``exact`` (a phase one step
    faster did not hold), ``at least`` (no faster phase ran), or why there is none."""
    held = [t for t in tries if t.holds]
    if not tries:
        return None, "not measured"
    if not held:
        return None, f"below {min(t.share for t in tries):.1f}x: no phase held"
    best = max(held, key=lambda t: t.share)
    faster = any(not t.holds and t.share > best.share for t in tries)
    return best, "exact" if faster else "at least"


def held_figures(r: PhaseResult) -> dict[str, Any]:
    """The held-xmin run's figures (see the module docstring)."""
    steps = {label: ramp_steps(r, label) for label in ("ramp", "held")}
    window = r.spec.holds[0]
    ramp_start = next(s.start for s in r.spec.steps if s.label == "ramp")
    ramp_end = max(s.end for s in r.spec.steps if s.label == "ramp")
    base = r.claim_latencies(SETTLE, 20.0)
    before = r.claim_latencies(ramp_start, ramp_end)
    during = r.claim_latencies(*window)
    after = r.claim_latencies(window[1] + 20.0, r.spec.length)
    backlog_max = max(200.0, 2 * max(r.backlog(t) for t in range(5, 20)))
    claim_max = 2 * p50(base)
    sus = {k: sustainable(v) for k, v in steps.items()}
    return {
        "window": window,
        "claim_p50_base": p50(base),
        "claim_p50_ramp": p50(before),
        "claim_p50_held": p50(during),
        "claim_p50_after": p50(after),
        "sustainable_ramp": sus["ramp"],
        "sustainable_held": sus["held"],
        "sustainable_ratio": sus["held"] / sus["ramp"] if sus["ramp"] else float("nan"),
        "peak_done_ramp": max(x.done for x in steps["ramp"]),
        "peak_done_held": max(x.done for x in steps["held"]),
        "backlog_max": backlog_max,
        "claim_max": claim_max,
        "recovery_ramp": recovery(r, ramp_end, window[0], backlog_max, claim_max),
        "recovery_held": recovery(r, window[1], r.spec.length, backlog_max, claim_max),
        "steps": steps,
    }


def keep_up_whole(r: PhaseResult) -> float:
    """Jobs started over jobs enqueued, from the producer's start to its schedule's end."""
    sent = r.enqueued_by(r.spec.length)
    return r.started_by(r.spec.length) / sent if sent else float("nan")
