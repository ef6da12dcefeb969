"""When a periodic task is due: a fixed interval, or a cron expression in a timezone.

Pure logic: every function is handed the time (``periodic.py`` reads the database's), so a
schedule is tested with plain aware datetimes. A schedule yields *ticks*, the instants a task
is due at. Each tick has an integer ``key`` that grows with time; ``pgenough.periodic`` stores
the key of a task's last claimed tick, and a claim only ever moves it forward.

Cron expressions are evaluated by cronsim, which follows Debian's cron, DST included. A
five-field expression whose minute and hour fields do not start with ``*`` (``30 2 * * *``,
``15 1-3 * * *``) is matched against the local wall clock: a local time skipped by
spring-forward runs at the first instant after the gap (03:00 in Europe/Berlin), and a local
time repeated by fall-back runs once, at its first occurrence. Any other expression
(``0 * * * *``, ``*/15 * * * *``, and every six-field one, with a leading seconds field) is
matched against absolute time: it runs in every real hour, both repeated ones included, and a
skipped local time does not occur at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Literal, Protocol, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

Missed: TypeAlias = Literal["once", "skip"]
"""What a task does about ticks that passed while no replica claimed them: ``once`` runs the
latest of them once, as soon as a replica is back; ``skip`` runs none that is past its grace."""

MISSED_POLICIES: tuple[Missed, ...] = ("once", "skip")
DEFAULT_GRACE = 60.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# The furthest back ``Cron.latest`` looks: cronsim itself gives up 50 years ahead.
_LOOKBACK = 100 * 366 * 24 * 3600


@dataclass(frozen=True, order=True)
class Tick:
    """An instant a task is due at; ``key`` orders the ticks of one schedule."""

    key: int
    at: datetime  # aware, in UTC


class Schedule(Protocol):
    """What ``Periodic`` needs of a schedule; ``Interval`` and ``Cron`` are the two."""

    # Whether a task seen for the first time runs its latest tick, which began before it was
    # registered: yes for an interval's current period, no for a cron instant that passed.
    first_tick_runs: ClassVar[bool]

    @property
    def spec(self) -> str:
        """The schedule as text, stored beside the claimed key: a key only compares with keys
        of the same spec."""
        ...

    def next_after(self, t: datetime) -> Tick:
        """The first tick strictly after ``t``."""
        ...

    def latest(self, t: datetime) -> Tick | None:
        """The last tick at or before ``t`` (None: there is none)."""
        ...

    def tick(self, key: int) -> Tick:
        """The tick of ``key`` (as stored in ``pgenough.periodic``)."""
        ...

    def ticks_between(self, first: int, last: int, cap: int) -> int:
        """How many ticks fall strictly between the ticks of keys ``first`` and ``last``,
        counted up to ``cap``."""
        ...


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"a schedule needs an aware datetime, got {t!r}")
    return t.astimezone(UTC)


def _epoch_us(t: datetime) -> int:
    return (_utc(t) - _EPOCH) // _US


@dataclass(frozen=True)
class Interval:
    """Every ``seconds``, in periods aligned to the Unix epoch; a tick starts each period.

    Its key is the period's number, ``floor(epoch / seconds)``, in exact microseconds.
    """

    seconds: float
    _us: int = field(init=False, repr=False, compare=False)

    first_tick_runs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        us = round(self.seconds * 1_000_000)
        if us <= 0:
            raise ValueError("a period must be positive")
        object.__setattr__(self, "_us", us)

    @property
    def spec(self) -> str:
        return f"every {float(self.seconds)!r}s"

    def tick(self, key: int) -> Tick:
        return Tick(key, _EPOCH + key * self._us * _US)

    def next_after(self, t: datetime) -> Tick:
        return self.tick(_epoch_us(t) // self._us + 1)

    def latest(self, t: datetime) -> Tick | None:
        return self.tick(_epoch_us(t) // self._us)

    def ticks_between(self, first: int, last: int, cap: int) -> int:
        return max(0, min(cap, last - first - 1))


@dataclass(frozen=True)
class Cron:
    """A cron expression (five fields, or six with a leading seconds field) evaluated in the
    IANA ``timezone``. Its ticks fall on whole seconds; a tick's key is its epoch second."""

    expr: str
    timezone: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    first_tick_runs: ClassVar[bool] = False

    def __post_init__(self) -> None:
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            raise ValueError(f"unknown timezone {self.timezone!r}") from exc
        object.__setattr__(self, "expr", " ".join(self.expr.split()))
        object.__setattr__(self, "_zone", zone)
        try:
            self.next_after(datetime.now(UTC))
        except CronSimError as exc:
            raise ValueError(f"invalid cron expression {self.expr!r}: {exc}") from exc

    @property
    def spec(self) -> str:
        return f"cron {self.expr} {self.timezone}"

    def _next_s(self, after_s: int) -> int | None:
        """The epoch second of the first tick after epoch second ``after_s``, None if none."""
        start = (_EPOCH + timedelta(seconds=after_s)).astimezone(self._zone)
        while True:
            try:
                found = next(CronSim(self.expr, start))
            except StopIteration:
                return None
            found_s = (found.astimezone(UTC) - _EPOCH) // timedelta(seconds=1)
            # Where cronsim matches the wall clock it drops a start's fold, so from inside a
            # repeated hour it can answer a time before ``start``: step on until past it.
            if found_s > after_s:
                return found_s
            start = found

    def tick(self, key: int) -> Tick:
        return Tick(key, _EPOCH + timedelta(seconds=key))

    def ticks_between(self, first: int, last: int, cap: int) -> int:
        count = 0
        found = self._next_s(first)
        while found is not None and found < last and count < cap:
            count += 1
            found = self._next_s(found)
        return count

    def next_after(self, t: datetime) -> Tick:
        # Ticks are whole seconds, so the first one after t is the first after its second.
        found = self._next_s(_epoch_us(t) // 1_000_000)
        if found is None:
            raise ValueError(f"cron expression {self.expr!r} has no tick after {t.isoformat()}")
        return self.tick(found)

    def latest(self, t: datetime) -> Tick | None:
        # cronsim only steps forward reliably across DST, so search backwards with forward
        # steps: for whole seconds x, "the next tick after x is at or before t" holds exactly
        # for x below the latest tick; double the step back until it holds, then bisect.
        t_s = _epoch_us(t) // 1_000_000

        def below(x: int) -> bool:
            found = self._next_s(x)
            return found is not None and found <= t_s

        hi, step = t_s, 1
        while not below(hi - step):
            hi -= step
            step *= 2
            if t_s - hi > _LOOKBACK:
                return None
        lo = hi - step
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if below(mid):
                lo = mid
            else:
                hi = mid
        found = self._next_s(lo)
        assert found is not None
        return self.tick(found)


def from_spec(spec: str) -> Schedule:
    """The schedule whose ``spec`` is ``spec`` (``every 60.0s``, ``cron 30 2 * * *
    Europe/Berlin``), as ``pgenough.periodic`` stores it; ``ValueError`` for any other text."""
    kind, _, rest = spec.partition(" ")
    if kind == "every" and rest.endswith("s"):
        try:
            return Interval(float(rest[:-1]))
        except ValueError:
            pass
    if kind == "cron":
        expr, _, zone = rest.rpartition(" ")
        if expr:
            return Cron(expr, zone)
    raise ValueError(f"not a schedule: {spec!r}")


def is_late(tick: Tick, now: datetime, grace: float) -> bool:
    """Whether a claim at ``now`` comes more than ``grace`` seconds after ``tick``."""
    return _utc(now) - tick.at > timedelta(seconds=grace)


__all__ = [
    "Cron",
    "Interval",
    "Schedule",
    "Tick",
]
