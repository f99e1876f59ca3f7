"""Checks and hints for ps06-streams-and-profiling, and the small builders its tests make traces with.

A trace here is what `json.load` gives for `torch.profiler.profile(...).export_chrome_trace(path)`: a dict with a
`"traceEvents"` list of complete events (`"ph": "X"`, `"ts"` and `"dur"` in microseconds).
"""

import contextlib
import math
from unittest import mock

import torch

from devicelab.feedback import Exercise, checker

MEMCPY = {"h2d": "Memcpy HtoD (Pinned -> Device)", "d2h": "Memcpy DtoH (Device -> Pageable)",
          "d2d": "Memcpy DtoD (Device -> Device)"}
HOST, THREAD = 4242, 4242  # a host process and its main thread, as a real trace numbers them


def memcpy(direction: str, ts: float, dur: float, nbytes: int | None = None, device: int = 0,
           name: str | None = None) -> dict:
    """Return a GPU copy event (`gpu_memcpy`); `nbytes=None` leaves out args["bytes"]."""
    args = {"device": device, "stream": 7}
    if nbytes is not None:
        args["bytes"] = nbytes
    return {"ph": "X", "cat": "gpu_memcpy", "name": name or MEMCPY[direction], "pid": device, "tid": 7,
            "ts": ts, "dur": dur, "args": args}


def kernel(ts: float, dur: float, device: int = 0, name: str = "ampere_sgemm_128x64_nn") -> dict:
    """Return a GPU kernel event (`kernel`)."""
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": 7}}


def runtime(name: str, ts: float, dur: float, pid: int = HOST, tid: int = THREAD) -> dict:
    """Return a host-side CUDA API call (`cuda_runtime`), e.g. cudaStreamSynchronize."""
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"correlation": 1}}


def op(name: str, ts: float, dur: float, pid: int = HOST, tid: int = THREAD, cat: str = "cpu_op") -> dict:
    """Return a PyTorch operator (`cpu_op`), e.g. aten::item."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def trace(*events: dict) -> dict:
    """Return a trace dict holding `events` (and the metadata events a real export starts with)."""
    head = [{"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}]
    return {"schemaVersion": 1, "traceEvents": head + list(events)}


class FakeEvent:
    """Stands in for the torch.cuda.Event recorded after a non-blocking copy out of `buffer`.

    The copy is "in flight" until `synchronize()` is called, or until `query()` has answered False
    `pending_queries` times. It remembers every call, and whether `buffer` had already changed when the copy
    finished (writing into a buffer whose copy is still travelling sends the new data to the GPU).
    """

    def __init__(self, buffer: torch.Tensor, pending_queries: int = 2) -> None:
        self.buffer = buffer
        self.original = buffer.clone()
        self.pending = pending_queries
        self.done = False
        self.calls: list[str] = []
        self.written_too_early = False

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.written_too_early = not torch.equal(self.buffer, self.original)

    def synchronize(self) -> None:
        self.calls.append("synchronize")
        self._finish()

    def query(self) -> bool:
        self.calls.append("query")
        if self.pending > 0:
            self.pending -= 1
            return False
        self._finish()
        return True

    def wait(self, stream=None) -> None:
        self.calls.append("wait")  # makes a *stream* wait on the GPU: the host does not wait

    def record(self, stream=None) -> None:
        self.calls.append("record")


@contextlib.contextmanager
def device_wide_syncs():
    """Record calls to torch.cuda.synchronize() and the current/default stream's synchronize()."""
    calls: list[str] = []

    class Stream:
        def synchronize(self):
            calls.append("stream.synchronize()")

        def wait_event(self, event):
            calls.append("stream.wait_event()")

    with mock.patch("torch.cuda.synchronize", lambda *a, **k: calls.append("torch.cuda.synchronize()")), \
         mock.patch("torch.cuda.current_stream", lambda *a, **k: Stream()), \
         mock.patch("torch.cuda.default_stream", lambda *a, **k: Stream()):
        yield calls


def _close(a: float, b: float) -> bool:
    return isinstance(a, int | float) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _copy_totals(copy_totals) -> None:
    t = trace(memcpy("h2d", 100.0, 50.0, 4096), memcpy("h2d", 200.0, 30.0, 1024), memcpy("d2h", 300.0, 20.0, 512),
              kernel(150.0, 40.0), runtime("cudaMemcpyAsync", 95.0, 5.0))
    got = copy_totals(t)
    assert isinstance(got, dict), f"copy_totals should return a dict, not {type(got).__name__}."
    assert set(got) == {"h2d", "d2h", "d2d"}, (
        f"Always return the three keys 'h2d', 'd2h' and 'd2d' (d2d even with no copies); got {sorted(got)}.")
    assert got["h2d"]["count"] == 2 and got["h2d"]["bytes"] == 5120, f"h2d: 2 copies, 5120 bytes; got {got['h2d']}."
    assert _close(got["h2d"]["seconds"], 80e-6), (
        f"h2d seconds: 50 us + 30 us = 8e-05 s (dur is in microseconds); got {got['h2d']['seconds']!r}.")
    assert got["d2d"] == {"count": 0, "bytes": 0, "seconds": 0.0}, f"No d2d copies: got {got['d2d']}."
    got = copy_totals(trace(memcpy("d2h", 0.0, 10.0, None)))
    assert got["d2h"]["bytes"] == 0 and got["d2h"]["count"] == 1, "A copy without args['bytes'] adds 0 bytes."


def _overlap_fraction(overlap_fraction) -> None:
    t = trace(memcpy("h2d", 0.0, 100.0), kernel(50.0, 100.0))
    assert _close(overlap_fraction(t), 0.5), f"Half the copy runs beside a kernel: 0.5, not {overlap_fraction(t)!r}."
    t = trace(memcpy("h2d", 0.0, 100.0), kernel(10.0, 40.0), kernel(30.0, 40.0))
    assert _close(overlap_fraction(t), 0.6), (
        f"Two kernels cover 10..70 us of a 100 us copy (20 us covered by both counts once): 0.6, "
        f"not {overlap_fraction(t)!r}.")
    t = trace(memcpy("h2d", 0.0, 100.0, device=0), kernel(0.0, 100.0, device=1))
    assert _close(overlap_fraction(t), 0.0), "A kernel on another GPU does not overlap this GPU's copy."
    t = trace(memcpy("h2d", 0.0, 100.0), kernel(100.0, 50.0))
    assert _close(overlap_fraction(t), 0.0), "Touching is not overlapping: [ts, ts + dur) is half-open."
    assert overlap_fraction(trace(kernel(0.0, 5.0))) == 0.0, "No copies: 0.0."
    with contextlib.suppress(ValueError):
        overlap_fraction(t, "sideways")
        raise AssertionError("overlap_fraction(trace, 'sideways') should raise ValueError.")


def _sync_ops(sync_ops) -> None:
    t = trace(op("aten::item", 0.0, 100.0), op("aten::_local_scalar_dense", 5.0, 90.0),
              runtime("cudaMemcpyAsync", 10.0, 5.0), runtime("cudaStreamSynchronize", 20.0, 70.0),
              runtime("cudaDeviceSynchronize", 200.0, 10.0))
    got = sync_ops(t)
    assert got == ["aten::_local_scalar_dense"], (
        f"The innermost operator around the cudaStreamSynchronize is aten::_local_scalar_dense, and a sync call "
        f"outside any operator is left out; got {got!r}.")
    t = trace(op("aten::to", 0.0, 50.0), runtime("cudaStreamSynchronize", 10.0, 40.0),
              op("aten::copy_", 100.0, 10.0, tid=THREAD + 1), runtime("cudaEventSynchronize", 102.0, 5.0))
    got = sync_ops(t)
    assert got == ["aten::to"], f"Only an operator on the same pid and tid counts; got {got!r}."


def _refill_pinned(refill_pinned) -> None:
    buffer = torch.zeros(2, 3)
    ptr = buffer.data_ptr()
    event = FakeEvent(buffer)
    data = torch.arange(6.0).reshape(2, 3)
    with device_wide_syncs() as syncs:
        result = refill_pinned(buffer, data, event)
    assert not syncs, f"Wait for the event only, not the whole device: your code called {syncs}."
    assert event.done, "Wait for copy_done first (copy_done.synchronize()): the copy may still be reading buffer."
    assert not event.written_too_early, "You wrote into buffer before its copy had finished: wait first, then write."
    assert result is buffer and buffer.data_ptr() == ptr, (
        "Write into buffer in place (buffer.copy_(data)) and return buffer itself: a new tensor is not pinned.")
    assert torch.equal(buffer, data), "buffer should hold data's values afterwards."
    buffer = torch.zeros(2, 3)
    with contextlib.suppress(ValueError):
        refill_pinned(buffer, torch.ones(3), FakeEvent(buffer))
        raise AssertionError("data of shape (3,) for a buffer of shape (2, 3) should raise ValueError.")
    assert torch.equal(buffer, torch.zeros(2, 3)), "After the ValueError nothing should be written: check first."


_exercises = checker(
    Exercise("copy_totals", _copy_totals, hints=(
        "Start from {d: {'count': 0, 'bytes': 0, 'seconds': 0.0} for d in ('h2d', 'd2h', 'd2d')}.",
        ("Keep the events with e.get('ph') == 'X' and e.get('cat') == 'gpu_memcpy'; the direction is in the name: "
         "'HtoD', 'DtoH' or 'DtoD'."),
        "e.get('args', {}).get('bytes', 0) for the bytes; e['dur'] is in microseconds: divide by 1e6.",
    )),
    Exercise("overlap_fraction", _overlap_fraction, hints=(
        ("For each copy of the direction, cut every kernel of the same args['device'] to the copy's interval: "
         "[max(starts), min(ends)). Keep the pieces that are not empty."),
        "Pieces can overlap each other: sort them and merge, so that a stretch covered twice counts once.",
        "Add up the merged lengths over all copies, divide by the sum of the copies' durations; 0.0 without copies.",
    )),
    Exercise("sync_ops", _sync_ops, hints=(
        ("First the sync calls: cat 'cuda_runtime' and a name among cudaStreamSynchronize, cudaDeviceSynchronize, "
         "cudaEventSynchronize."),
        ("For each, the cpu_op events on the same pid and tid with op['ts'] <= s['ts'] and "
         "s['ts'] + s['dur'] <= op['ts'] + op['dur']."),
        "The innermost of those is the shortest one. Collect the names in a set; return sorted(names).",
    )),
    Exercise("refill_pinned", _refill_pinned, hints=(
        "Three steps: check the shape (raise ValueError), wait on copy_done, write in place.",
        ("copy_done.synchronize() makes the host wait for that event only; torch.cuda.synchronize() waits for "
         "everything, and copy_done.wait() makes a GPU stream wait, not the host."),
        "buffer.copy_(data) writes in place (and converts the dtype); return buffer.",
    )),
)
check, hint = _exercises.check, _exercises.hint
