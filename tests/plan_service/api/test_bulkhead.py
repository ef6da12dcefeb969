"""The bulkhead's line on its own (no server): arrival order, the bounded wait, the bounded
line, and a request that goes away while in line leaves no slot behind."""

from __future__ import annotations

import asyncio

import pytest

from pgenough_plans.api.bulkhead import Bulkhead
from pgenough_plans.api.errors import TooBusy


async def hold(bulkhead: Bulkhead, release: asyncio.Event, log: list[str], name: str) -> None:
    async with bulkhead.slot():
        log.append(name)
        await release.wait()


async def test_a_waiter_gets_the_next_free_slot_in_arrival_order() -> None:
    bulkhead = Bulkhead(2, max_wait=5.0)
    release = {n: asyncio.Event() for n in "abcd"}
    log: list[str] = []
    tasks = {}
    for name in "abcd":
        tasks[name] = asyncio.create_task(hold(bulkhead, release[name], log, name))
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    assert log == ["a", "b"]  # c and d wait
    assert bulkhead.in_use == 2
    release["b"].set()
    await asyncio.sleep(0.01)
    assert log == ["a", "b", "c"]
    release["a"].set()
    await asyncio.sleep(0.01)
    assert log == ["a", "b", "c", "d"]
    for event in release.values():
        event.set()
    await asyncio.gather(*tasks.values())
    assert bulkhead.in_use == 0 and bulkhead.rejected == 0


async def test_the_wait_is_bounded_then_refused() -> None:
    bulkhead = Bulkhead(1, max_wait=0.05)
    release = asyncio.Event()
    holder = asyncio.create_task(hold(bulkhead, release, [], "a"))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TooBusy):
        async with bulkhead.slot():
            pytest.fail("got a slot that was never freed")
    assert 0.04 <= loop.time() - started < 1.0
    assert bulkhead.rejected == 1
    release.set()
    await holder
    assert bulkhead.in_use == 0
    async with bulkhead.slot():  # and the slot is free again
        assert bulkhead.in_use == 1


async def test_the_line_is_no_longer_than_the_slots() -> None:
    bulkhead = Bulkhead(2, max_wait=5.0)
    release = asyncio.Event()
    log: list[str] = []
    tasks = [asyncio.create_task(hold(bulkhead, release, log, str(n))) for n in range(4)]
    await asyncio.sleep(0.01)  # two hold, two wait
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TooBusy):
        async with bulkhead.slot():
            pytest.fail("a fifth got in")
    assert loop.time() - started < 0.5  # refused at once: the line is full
    release.set()
    await asyncio.gather(*tasks)
    assert len(log) == 4 and bulkhead.in_use == 0 and bulkhead.rejected == 1


async def test_no_wait_means_refused_at_once() -> None:
    bulkhead = Bulkhead(1)
    release = asyncio.Event()
    holder = asyncio.create_task(hold(bulkhead, release, [], "a"))
    await asyncio.sleep(0.01)
    with pytest.raises(TooBusy):
        async with bulkhead.slot():
            pass
    release.set()
    await holder


async def test_a_request_cancelled_in_line_leaves_no_slot_behind() -> None:
    bulkhead = Bulkhead(1, max_wait=5.0)
    release = asyncio.Event()
    log: list[str] = []
    holder = asyncio.create_task(hold(bulkhead, release, log, "a"))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(hold(bulkhead, asyncio.Event(), log, "gone"))
    await asyncio.sleep(0.01)
    gone.cancel()  # the client disconnected while waiting
    with pytest.raises(asyncio.CancelledError):
        await gone
    after = asyncio.create_task(hold(bulkhead, release, log, "after"))  # the line is free
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(holder, after)
    assert log == ["a", "after"]
    assert bulkhead.in_use == 0


async def test_a_slot_handed_over_as_the_wait_ends_is_not_lost() -> None:
    """The race the shield is for: release and timeout in the same loop iteration."""
    for _ in range(50):
        bulkhead = Bulkhead(1, max_wait=0.02)
        release = asyncio.Event()
        holder = asyncio.create_task(hold(bulkhead, release, [], "a"))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold(bulkhead, asyncio.Event(), [], "w"))
        await asyncio.sleep(0)
        asyncio.get_running_loop().call_later(0.02, release.set)
        await holder
        await asyncio.sleep(0.03)
        if waiter.done():
            with pytest.raises(TooBusy):
                await waiter
            assert bulkhead.in_use == 0
        else:  # it got the slot: it holds exactly one
            assert bulkhead.in_use == 1
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert bulkhead.in_use == 0


def test_a_negative_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="max_wait"):
        Bulkhead(1, max_wait=-1)


async def test_streams_take_at_most_their_share_of_the_slots() -> None:
    bulkhead = Bulkhead(4, max_streams=2)
    release = asyncio.Event()
    streaming: list[str] = []

    async def stream(name: str) -> None:
        async with bulkhead.slot():
            with bulkhead.stream():
                streaming.append(name)
                await release.wait()

    tasks = [asyncio.create_task(stream(str(i))) for i in range(3)]
    done, _ = await asyncio.wait(tasks, timeout=1, return_when=asyncio.FIRST_EXCEPTION)
    refused = [t for t in done if t.exception() is not None]
    assert len(refused) == 1 and isinstance(refused[0].exception(), TooBusy)
    assert "streaming at once" in str(refused[0].exception())
    assert bulkhead.streams == 2 and bulkhead.in_use == 2  # the refused one left its slot
    async with bulkhead.slot():  # a first page still gets one
        assert bulkhead.in_use == 3
    release.set()
    await asyncio.gather(*(t for t in tasks if t not in refused))
    assert bulkhead.streams == 0 and bulkhead.in_use == 0


def test_the_default_share_of_streams_is_half_the_slots_and_at_least_one() -> None:
    assert [Bulkhead(n).max_streams for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
    for bad in (0, 5):
        with pytest.raises(ValueError, match="max_streams"):
            Bulkhead(4, max_streams=bad)


async def test_full_for_counts_while_every_slot_is_taken() -> None:
    bulkhead = Bulkhead(2, max_wait=1.0)
    release = asyncio.Event()
    log: list[str] = []
    first = asyncio.create_task(hold(bulkhead, release, log, "a"))
    await asyncio.sleep(0.01)
    assert bulkhead.full_for() == 0.0  # one slot free
    second = asyncio.create_task(hold(bulkhead, release, log, "b"))
    waiter = asyncio.create_task(hold(bulkhead, asyncio.Event(), log, "c"))
    await asyncio.sleep(0.05)
    assert bulkhead.full_for() >= 0.04
    release.set()  # a hands its slot to c: still full, and still counting
    await asyncio.gather(first, second)
    assert bulkhead.in_use == 1 and bulkhead.full_for() == 0.0
    await asyncio.sleep(0.01)  # c resumes holding its slot
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_a_client_gone_as_its_slot_is_handed_over_is_not_served() -> None:
    """The cancel that arrives in the loop iteration the slot is handed over must win: on
    Python 3.11 ``asyncio.wait_for`` returned the result instead and dropped the cancel, so
    the request went on, holding the slot, for a client that had left."""
    bulkhead = Bulkhead(1, max_wait=5.0)
    held = bulkhead.slot()
    await held.__aenter__()
    waiter = asyncio.create_task(hold(bulkhead, asyncio.Event(), [], "gone"))
    await asyncio.sleep(0.01)  # in line
    await held.__aexit__(None, None, None)  # the slot goes to the waiter, without a yield
    waiter.cancel()  # and its client disconnects in the same iteration
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiter, 2.0)
    assert bulkhead.in_use == 0
