"""``bench.boundary``'s images: fan-out and connections against their sizes, with what the
machine's other load was."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.boundary.connections import ConnPoint
from bench.boundary.fanout import MESSAGE_BYTES, FanoutPoint
from bench.harness.machine import QUIET_BUSY


def load_note(busy: Sequence[float | None]) -> str:
    """What the image says about other load on the machine while it was measured."""
    noisy = sum(1 for b in busy if b is not None and b > QUIET_BUSY)
    if not noisy:
        return "machine idle before every point"
    return (
        f"measured with other work running: CPU >{QUIET_BUSY:.0%} busy before {noisy} of "
        f"{len(busy)} points"
    )


def plot_fanout(points: Sequence[FanoutPoint], path: Path, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, lat) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = {"pgenough": "pgenough pub/sub", "notify": "plain LISTEN/NOTIFY", "nats": "NATS core"}
    systems = dict.fromkeys(p.system for p in points if p.subscribers > 0)
    for system, color in zip(systems, ("C0", "C1", "C2", "C3"), strict=False):
        pts = [p for p in points if p.system == system and p.subscribers > 0 and not p.refused]
        xs = [p.subscribers for p in pts]
        name = labels.get(system, system)
        ax.plot(xs, [p.delivered_rate for p in pts], marker="o", color=color, label=name)
        ax.plot(
            xs,
            [p.publish_rate for p in pts],
            marker=".",
            ls="--",
            color=color,
            label=f"{name}: published/s",
        )
        lat.plot(xs, [p.p99_ms for p in pts], marker="o", color=color, label=f"{name} p99")
        lat.plot(xs, [p.p50_ms for p in pts], marker=".", ls=":", color=color, label=f"{name} p50")
        lost = [p for p in pts if p.lost]
        if lost:
            ax.scatter(
                [p.subscribers for p in lost],
                [p.delivered_rate for p in lost],
                marker="x",
                s=80,
                color="red",
                zorder=5,
            )
    for a in (ax, lat):
        a.set_xscale("log", base=2)
        a.set_xticks([p.subscribers for p in points if p.subscribers > 0])
        a.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a.set_xlabel("subscribers (one connection each)")
        a.grid(True, alpha=0.3)
    ax.set_yscale("log")
    top = max((p.delivered_rate for p in points if p.subscribers > 0), default=1.0)
    ax.set_ylim(top=max(top, 1.0) * 30)  # room for the legend above the curves
    ax.set_ylabel("messages/s (solid: delivered to all subscribers)")
    ax.set_title("Fan-out throughput (red x: messages lost)")
    lat.set_yscale("log")
    lat.set_ylabel("publish-to-receipt latency, ms")
    lat.set_title("Delivery latency")
    ax.legend(fontsize=6.5, loc="upper left", ncol=2)
    lat.legend(fontsize=7)
    fig.suptitle(
        "; ".join(
            x
            for x in (
                f"Pub/sub fan-out, one publisher, {MESSAGE_BYTES}-byte messages",
                note,
                load_note([p.busy for p in points]),
            )
            if x
        ),
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"\nwrote {path}")


def plot_connections(
    points: Sequence[ConnPoint], path: Path, max_connections: int, pool_size: int, note: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, rate) = plt.subplots(1, 2, figsize=(11, 4.5))
    for mode, color in zip(dict.fromkeys(p.mode for p in points), ("C0", "C1"), strict=False):
        pts = [p for p in points if p.mode == mode and not p.refused]
        xs = [p.workers for p in pts]
        label = "direct" if mode == "direct" else f"PgBouncer ({pool_size})"
        ax.plot(xs, [p.peak_conns for p in pts], marker="o", color=color, label=f"{label}: peak")
        ax.plot(
            xs, [p.idle_conns for p in pts], marker=".", ls=":", color=color, label=f"{label}: idle"
        )
        ax.plot(
            xs,
            [p.peak_all for p in pts],
            marker="x",
            ls="--",
            lw=0.8,
            color=color,
            label=f"{label}: server total",
        )
        rate.plot(xs, [p.rate for p in pts], marker="o", color=color, label=label)
    ax.axhline(max_connections, color="red", ls="--", lw=1, label="max_connections")
    for a in (ax, rate):
        a.set_xscale("log", base=2)
        a.set_xticks(sorted({p.workers for p in points}))
        a.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a.set_xlabel("worker processes (pgenough worker run)")
        a.grid(True, alpha=0.3)
    ax.set_ylim(0, max_connections * 1.6)  # room for the legend above max_connections
    ax.set_ylabel("server connections")
    ax.set_title("PostgreSQL connections vs workers")
    rate.set_ylabel("drain jobs/s")
    rate.set_title("Drain rate, direct vs through the pooler")
    rate.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    rate.legend(fontsize=8)
    fig.suptitle(
        "; ".join(
            x
            for x in (
                "Connections and pooling, no-op jobs",
                note,
                load_note([p.busy for p in points]),
            )
            if x
        ),
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"\nwrote {path}")
