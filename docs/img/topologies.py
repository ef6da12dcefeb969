"""Draws the topologies of docs/scaling.md into docs/img/topology-*.png.

    .venv/bin/python docs/img/topologies.py

Boxes are processes or servers, arrows the connections each opens (labelled with what travels
on them); one figure per topology. Matplotlib (the ``bench`` extra), Agg backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

HERE = Path(__file__).resolve().parent
APP = "#dbeafe"  # our processes
DB = "#dcfce7"  # PostgreSQL servers
POOL = "#fef3c7"  # the pooler
EDGE = "#334155"
PAD = 0.6


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float
    text: str
    color: str

    @property
    def center(self) -> tuple[float, float]:
        return (self.x + self.w / 2, self.y + self.h / 2)

    def edge_toward(self, x: float, y: float) -> tuple[float, float]:
        """Where the line from the center to (x, y) leaves the box (its rounded pad too)."""
        cx, cy = self.center
        dx, dy = x - cx, y - cy
        half_w, half_h = self.w / 2 + PAD, self.h / 2 + PAD
        t = min(half_w / abs(dx) if dx else float("inf"), half_h / abs(dy) if dy else float("inf"))
        return (cx + dx * t, cy + dy * t)


def draw(name: str, title: str, boxes: list[Box], arrows: list[tuple[Box, Box, str, str]]) -> None:
    """``arrows``: (from, to, label, style) with style "solid" or "dashed", optionally
    ":<rad>" for a curve (matplotlib's arc3 radius) around what lies between."""
    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=110)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 56)
    ax.axis("off")
    ax.set_title(title, fontsize=13, loc="left")
    for b in boxes:
        ax.add_patch(
            FancyBboxPatch(
                (b.x, b.y), b.w, b.h, boxstyle=f"round,pad={PAD}", fc=b.color, ec=EDGE, lw=1.2
            )
        )
        ax.text(*b.center, b.text, ha="center", va="center", fontsize=9.5, wrap=True)
    for start, end, label, spec in arrows:
        style, _, bend = spec.partition(":")
        rad = float(bend or 0)
        tail = start.edge_toward(*end.center)
        head = end.edge_toward(*start.center)
        arrow = FancyArrowPatch(
            tail,
            head,
            arrowstyle="-|>",
            mutation_scale=14,
            lw=1.3,
            color=EDGE,
            linestyle=style,
            shrinkA=2,
            shrinkB=2,
            connectionstyle=f"arc3,rad={rad}",
        )
        ax.add_patch(arrow)
        (x0, y0), (x1, y1) = tail, head
        # arc3's control point: the midpoint moved by rad times the chord, turned a quarter.
        ax.text(
            (x0 + x1) / 2 + rad * (y1 - y0) / 2,
            (y0 + y1) / 2 - rad * (x1 - x0) / 2,
            label,
            ha="center",
            va="center",
            fontsize=8,
            bbox={"fc": "white", "ec": "none", "pad": 1.5},
        )
    fig.tight_layout()
    fig.savefig(HERE / f"topology-{name}.png")
    plt.close(fig)


def one_server() -> None:
    api = Box(4, 40, 22, 9, "pgenough api\n(/search, dashboard)", APP)
    fetch = Box(39, 40, 22, 9, "pgenough worker fetch\n(per-provider lock)", APP)
    work = Box(74, 40, 22, 9, "pgenough worker process\n+ your workers", APP)
    pg = Box(34, 6, 32, 10, "PostgreSQL\njobs, runs, staging, plans\nLISTEN/NOTIFY, locks", DB)
    draw(
        "one",
        "One server: every process connects to one PostgreSQL",
        [api, fetch, work, pg],
        [
            (api, pg, "reads, LISTEN", "solid"),
            (fetch, pg, "COPY, lock", "solid"),
            (work, pg, "claim / complete\nLISTEN", "solid"),
        ],
    )


def replica() -> None:
    api = Box(4, 40, 22, 9, "pgenough api\n(PGENOUGH_API_READ_URL)", APP)
    fetch = Box(39, 40, 22, 9, "pgenough worker fetch", APP)
    work = Box(74, 40, 22, 9, "pgenough worker process\n+ your workers", APP)
    primary = Box(52, 6, 30, 10, "primary\nall writes, LISTEN/NOTIFY", DB)
    standby = Box(6, 6, 26, 10, "hot standby\n(read only)", DB)
    draw(
        "replica",
        "Primary + streaming replica: /search and the dashboard read the standby",
        [api, fetch, work, primary, standby],
        [
            (api, standby, "/search, dashboard\nreads (within the lag)", "solid"),
            (api, primary, "writes, LISTEN,\nLSN probe; fallback", "dashed"),
            (fetch, primary, "COPY, lock", "solid"),
            (work, primary, "claim / complete", "solid"),
            (primary, standby, "WAL stream", "solid"),
        ],
    )


def pooler() -> None:
    api = Box(4, 42, 22, 9, "pgenough api", APP)
    work = Box(39, 42, 22, 9, "workers (many\nprocesses, hosts)", APP)
    app = Box(74, 42, 22, 9, "your app\n(enqueue in its\ntransaction)", APP)
    bouncer = Box(39, 22, 22, 7, "PgBouncer\npool_mode = transaction", POOL)
    primary = Box(39, 3, 22, 8, "PostgreSQL\n(few backends)", DB)
    draw(
        "pooler",
        "Behind PgBouncer: transactions through the pooler, sessions direct",
        [api, work, app, bouncer, primary],
        [
            (api, bouncer, "/search", "solid"),
            (work, bouncer, "claim, complete,\nheartbeat", "solid"),
            (app, bouncer, "enqueue", "solid"),
            (bouncer, primary, "server pool\n(default_pool_size)", "solid"),
            (api, primary, "LISTEN\n(direct URL)", "dashed:0.25"),
            (work, primary, "LISTEN, session locks\n(direct URL)", "dashed:-1.3"),
        ],
    )


if __name__ == "__main__":
    one_server()
    replica()
    pooler()
    print("\n".join(str(p) for p in sorted(HERE.glob("topology-*.png"))))
