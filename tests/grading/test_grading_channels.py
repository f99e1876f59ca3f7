"""Kernel channels that wait in slices (autograder/grading/channels.py): a reply whose wake-up was missed is
read at the end of one slice, not at the end of the cell's timeout."""

import asyncio
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session

from autograder.grading.channels import CLIENT_CLASS, SLICE_S, SlicedChannel, SlicedKernelClient
from tests.clock import ManualClock


class MissedWakeUp:
    """A socket with a message waiting whose poll is never woken: it answers only when its timeout ends (what
    pyzmq's asyncio poll does when it misses the edge of the socket's descriptor).

    Its polls pass on the test's clock, which the sliced channel reads too, so that no count of polls depends
    on how fast the machine ran them: each moves the clock on by its timeout, plus `late` (a loaded machine
    returns from a wait later than asked). The message is there from poll number `ready_at` (None: never).
    """

    def __init__(self, ready_at: int | None = 1, late: float = 0.0) -> None:
        self.clock = ManualClock()
        self.ready_at, self.late = ready_at, late
        self.polls: list[int | None] = []  # each poll's timeout in ms

    async def poll(self, timeout_ms: int | None) -> int:
        self.polls.append(timeout_ms)
        self.clock.advance((timeout_ms or 0) / 1000 + self.late)
        await asyncio.sleep(0)
        return int(self.ready_at is not None and len(self.polls) >= self.ready_at)


def channel_on(kind: type, socket: MissedWakeUp) -> AsyncZMQSocketChannel:
    channel = kind.__new__(kind)
    channel.socket = socket
    channel.clock = socket.clock  # (a sliced channel's; jupyter_client's own reads no clock)

    async def recv():
        return {"msg_type": "execute_reply"}

    channel._recv = recv
    return channel


def test_a_missed_wake_up_costs_one_slice_not_the_whole_timeout():
    plain, sliced = MissedWakeUp(), MissedWakeUp()
    for kind, socket in ((AsyncZMQSocketChannel, plain), (SlicedChannel, sliced)):
        assert asyncio.run(channel_on(kind, socket).get_msg(timeout=0.8)) == {"msg_type": "execute_reply"}
    assert plain.polls == [800]  # jupyter_client's own channel: the whole timeout (a cell's: minutes)
    assert sliced.polls == [int(SLICE_S * 1000)]


@pytest.mark.parametrize("late", [0.0, SLICE_S / 2])
def test_with_nothing_to_read_it_waits_in_slices_until_the_timeout_then_says_empty(late):
    socket = MissedWakeUp(ready_at=None, late=late)
    timeout = 2.5 * SLICE_S
    with pytest.raises(Empty):
        asyncio.run(channel_on(SlicedChannel, socket).get_msg(timeout=timeout))
    assert all(t is not None and t <= SLICE_S * 1000 for t in socket.polls)
    assert socket.clock.now >= timeout  # it waited out the whole timeout, not one slice ...
    assert socket.clock.now < timeout + SLICE_S + late  # ... and no slice more
    if not late:  # the last slice is what was left of the timeout
        assert socket.polls == [int(SLICE_S * 1000)] * 2 + [int(SLICE_S * 500)]


def test_a_zero_timeout_is_one_look_without_waiting():
    socket = MissedWakeUp(ready_at=None)
    with pytest.raises(Empty):
        asyncio.run(channel_on(SlicedChannel, socket).get_msg(timeout=0))
    assert socket.polls == [0]


def test_no_timeout_waits_in_slices_until_a_message_comes():
    socket = MissedWakeUp(ready_at=3)  # the message comes during the third slice
    assert asyncio.run(channel_on(SlicedChannel, socket).get_msg()) == {"msg_type": "execute_reply"}
    assert socket.polls == [int(SLICE_S * 1000)] * 3


def test_a_real_socket_delivers_through_the_sliced_channel():
    async def roundtrip():
        context = zmq.asyncio.Context()
        reader, writer = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        reader.bind("inproc://sliced")
        writer.connect("inproc://sliced")
        session = Session()
        channel = SlicedChannel(reader, session)
        try:
            with pytest.raises(Empty):
                await channel.get_msg(timeout=0.3)
            session.send(writer, "execute_reply", {"status": "ok"})
            return await channel.get_msg(timeout=5)
        finally:
            reader.close(linger=0)
            writer.close(linger=0)
            context.term()

    message = asyncio.run(roundtrip())
    assert (message["msg_type"], message["content"]) == ("execute_reply", {"status": "ok"})


def test_the_graders_client_and_the_client_class_for_the_notebook_tests_have_sliced_channels():
    from jupyter_client.manager import AsyncKernelManager

    from autograder.grading.execution import QuickReadyClient

    assert issubclass(QuickReadyClient, SlicedKernelClient)
    client = AsyncKernelManager(client_class=CLIENT_CLASS).client()
    for name in ("shell", "iopub", "stdin", "control"):
        assert getattr(client, f"{name}_channel_class") is SlicedChannel
        assert getattr(QuickReadyClient(), f"{name}_channel_class") is SlicedChannel
