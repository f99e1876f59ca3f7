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


class MissedWakeUp:
    """A socket with a message waiting whose poll is never woken: it answers only when its timeout ends (what
    pyzmq's asyncio poll does when it misses the edge of the socket's descriptor)."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.polls: list[int | None] = []  # each poll's timeout in ms

    async def poll(self, timeout_ms: int | None) -> int:
        self.polls.append(timeout_ms)
        await asyncio.sleep((timeout_ms or 0) / 1000)
        return int(self.ready)


def channel_on(kind: type, socket: MissedWakeUp) -> AsyncZMQSocketChannel:
    channel = kind.__new__(kind)
    channel.socket = socket

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


def test_with_nothing_to_read_it_waits_in_slices_until_the_timeout_then_says_empty():
    socket = MissedWakeUp(ready=False)
    with pytest.raises(Empty):
        asyncio.run(channel_on(SlicedChannel, socket).get_msg(timeout=0.6))
    assert len(socket.polls) >= 3
    assert all(t is not None and t <= SLICE_S * 1000 for t in socket.polls)
    assert sum(socket.polls) >= 550  # it waited out (about) the whole timeout, not one slice


def test_a_zero_timeout_is_one_look_without_waiting():
    socket = MissedWakeUp(ready=False)
    with pytest.raises(Empty):
        asyncio.run(channel_on(SlicedChannel, socket).get_msg(timeout=0))
    assert socket.polls == [0]


def test_no_timeout_waits_in_slices_until_a_message_comes():
    socket = MissedWakeUp(ready=False)

    async def arrive_later():
        await asyncio.sleep(0.6)
        socket.ready = True

    async def both():
        arrival = asyncio.ensure_future(arrive_later())
        message = await channel_on(SlicedChannel, socket).get_msg()
        await arrival
        return message

    assert asyncio.run(both()) == {"msg_type": "execute_reply"}
    assert len(socket.polls) >= 3 and all(t == SLICE_S * 1000 for t in socket.polls)


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
