"""Kernel client channels whose waits cannot sleep through a message that has arrived.

jupyter_client's async channels wait for a message with pyzmq's asyncio poll, which is woken by the socket's
edge-triggered file descriptor. On a loaded machine that wake-up can be missed: the kernel's reply then waits
in the socket until the poll's timeout, which for an nbclient cell is the whole cell timeout. Measured on the
project's 2-core machine with two busy processes beside it: lesson 05's widget cell got its reply in 2 s
and nbclient saw it 118 s later, when the 120 s cell timeout came (the cell still passed, so nothing failed,
it was only slow). A new poll looks at the socket before it waits, so waiting in short slices bounds a missed
wake-up to one slice.

A message the grader cannot read (a wrong signature, frames out of order, content that does not unpack) can
only come from a kernel whose own messaging the student's code broke: it raises KernelMessageError, a
DeadKernelError, so that the cell running is blamed for it as for a kernel that died.
"""

import time
from collections.abc import Callable
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from nbclient.exceptions import DeadKernelError
from traitlets import Type

SLICE_S = 0.25  # longest single wait; a missed wake-up costs at most this


class KernelMessageError(DeadKernelError):
    """The kernel sent a message the grader cannot read: its messaging is broken, as good as dead."""


class SlicedChannel(AsyncZMQSocketChannel):
    """An async channel whose `get_msg` waits in polls of at most SLICE_S seconds, up to its timeout, and
    which raises KernelMessageError for a message it cannot read.

    `clock` is what the timeout is measured on (jupyter_client makes the channels with its three arguments:
    the monotonic clock); a test gives its own, so that the polls it counts never depend on how fast the
    machine ran them.
    """

    def __init__(self, socket, session, loop=None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(socket, session, loop)
        self.clock = clock

    async def _recv(self, **kwargs) -> dict:
        frames = await self.socket.recv_multipart(**kwargs)
        try:
            _, message = self.session.feed_identities(frames)
            return self.session.deserialize(message)
        except Exception as exc:  # whatever the frames were, the kernel sent them
            why = f"{type(exc).__name__}: {exc}"[:200]
            raise KernelMessageError(f"the kernel sent a message the grader could not read ({why})") from exc

    async def get_msg(self, timeout: float | None = None) -> dict:
        """Return the next message; Empty when none came within `timeout` seconds (None: wait for one)."""
        deadline = None if timeout is None else self.clock() + timeout
        while True:
            step = SLICE_S if deadline is None else max(0.0, min(SLICE_S, deadline - self.clock()))
            try:
                return await super().get_msg(timeout=step)
            except Empty:
                if deadline is not None and self.clock() >= deadline:
                    raise


class SlicedKernelClient(AsyncKernelClient):
    """jupyter_client's async kernel client, with SlicedChannel for shell, IOPub, stdin and control."""

    shell_channel_class = Type(SlicedChannel)
    iopub_channel_class = Type(SlicedChannel)
    stdin_channel_class = Type(SlicedChannel)
    control_channel_class = Type(SlicedChannel)


# for KernelManager.client_class
CLIENT_CLASS = f"{SlicedKernelClient.__module__}.{SlicedKernelClient.__name__}"
