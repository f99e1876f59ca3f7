"""nbgrader's Execute preprocessor with what a class of untrusted notebooks needs.

- a wall-clock budget for the whole notebook: the running cell is interrupted when it runs out, and the
  cells after it are not run (they count as failed);
- capped outputs, so a flood of prints cannot fill the grader's memory or the feedback;
- a progress file that says which cell is running, so a grader that has to kill the kernel knows where;
- cells to skip: a cell that crashed or hung the kernel in an earlier attempt is not run again, and fails;
- a working folder of the kernel's own: before the first kernel starts, it gets copies of the regular files
  nbgrader put beside the notebooks (the student's extra files, the instructor's data), and the kernel runs
  there; nbgrader's own folder, where it writes the graded notebook, is never the kernel's (see worker.py);
- a fresh start for every kernel: the configuration and startup folders in the kernel's HOME (IPython's
  profile, Jupyter's config and data) are emptied before each kernel starts, so that what one notebook's code
  left there cannot run in the next notebook's kernel before its guard has recorded the pristine path;
- the grading kernel's guard (guard_kernel/, tamper.py): graded test cells are marked as such in their
  execute requests, a test cell that the guard cannot confirm ran on the pristine path fails, and every
  change a cell made to the execution path becomes a "tamper" event (guard_verdicts.py);
- out-of-process test cells (remote_calls.py): a test cell the instructor's notebook marks so is run here,
  from the instructor's notebook, calling the student's functions in the kernel with plain data across;
- the files a notebook writes while it runs are copied back beside the graded notebook, as they would be
  there under plain nbgrader (regular files only, never through a link, within caps).
"""

import asyncio
import functools
import json
import math
import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path
from queue import Empty

import zmq
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Dict, Float, Integer, Unicode, default

from autograder.cells import grade_id
from autograder.grading.attempt import EventKind
from autograder.grading.channels import KernelMessageError, SlicedKernelClient
from autograder.grading.defaults import DEFAULT_TIMEOUT
from autograder.grading.guard_kernel.guard import GRADER_KEY
from autograder.grading.guard_verdicts import GuardVerdicts, error_output
from autograder.grading.remote_calls import (
    END,
    MAX_REPLY_CHARS,
    CallFailed,
    Plan,
    call_line,
    run_test,
    serve_code,
)
from autograder.grading.sandbox import MAX_FILE_MIB, MAX_TASKS, refused_tasks
from autograder.grading.verdict import REPLIES
from autograder.safe_copy import Limits, Refusal, copy_tree, read_small

MEMORY_ERROR_HINTS = ("can't allocate memory", "cannot allocate memory", "out of memory",
                      "defaultcpuallocator")
NOT_RUN = "NotRunByGrader"
MAX_PROGRESS_BYTES = 16 * 2**20
# What a kernel loads from its HOME as it starts (IPYTHONDIR, JUPYTER_CONFIG_DIR, JUPYTER_DATA_DIR, the user
# site and XDG config): emptied before each kernel of an attempt starts.
KERNEL_START_FOLDERS = (".ipython", ".jupyter", ".jupyter-data", ".local", ".config")
# What a notebook's files written while it ran may take when copied back beside the graded notebook.
# What a browser would run if staff opened it from the autograded folder: never copied back.
ACTIVE_CONTENT = (".html", ".htm", ".xhtml", ".svg", ".js", ".mjs")
WRITTEN_FILES = Limits(file_bytes=MAX_FILE_MIB * 2**20, total_bytes=200 * 2**20, entries=1000, depth=16)
INTERRUPT_WAIT = 5.0  # seconds a call that ran out of time gets to answer its interrupt
INTERRUPTED_OUTPUT_S = 4  # seconds to read the rest of a cell's output after it was interrupted (nbclient's)


def is_memory_error(output: dict) -> bool:
    """Return True when an error output says the code ran out of memory."""
    text = f"{output.get('ename', '')}: {output.get('evalue', '')}".lower()
    return output.get("ename") == "MemoryError" or any(hint in text for hint in MEMORY_ERROR_HINTS)


def _size(content: dict) -> int:
    if "text" in content:
        return len(content["text"])
    if "data" in content:
        return sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in content["data"].values())
    return len(content.get("evalue", "")) + sum(len(line) for line in content.get("traceback", []))


class QuickReadyClient(SlicedKernelClient):
    """jupyter_client's kernel client, told a kernel is ready without its fixed waits (and with channels that
    cannot sleep through a reply, channels.py).

    jupyter_client's wait_for_ready ends by draining IOPub until nothing came for 0.2 s, which every kernel of
    a class pays. Here the drain takes what is already there: what arrives later (the kernel's status after
    kernel_info) is not answering any request nbclient sends, so nbclient passes it by. And the client's
    sockets, which connect before the new kernel has made its own, try again every 5 ms, not every 0.1 s
    (ZeroMQ's default): the kernel is heard from as soon as it listens.
    """

    RECONNECT_MS = 5

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        context.setsockopt(zmq.RECONNECT_IVL, self.RECONNECT_MS)  # for every socket made in it
        return context

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Wait until the kernel answers kernel_info with IOPub connected; take what IOPub already holds."""
        # on the monotonic clock, as every other wait of the grader's: a wall clock set back would stretch it
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:  # IOPub is connected once the kernel's status for that request comes through it
                    await ensure_async(self.iopub_channel.get_msg(timeout=0.2))
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(reply)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
        while True:
            try:
                await ensure_async(self.iopub_channel.get_msg(timeout=0))
            except Empty:
                return


class QuickStopKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager, noticing that a killed kernel has exited within 5 ms.

    After killing a kernel (nbclient's "immediate" shutdown), jupyter_client checks whether it has exited
    every 0.1 s; the first check comes too early, so every kernel of a class cost its worker 0.1 s of waiting.
    """

    async def _async_wait(self, pollinterval: float = 0.005) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, 0.005))


class GraderExecute(Execute):
    """Execute with a notebook time budget, capped outputs, a progress file and cells to skip."""

    budget = Float(float(DEFAULT_TIMEOUT),
                   help="wall-clock seconds for the whole notebook, kernel start included").tag(config=True)
    # After a cell's reply, how long the rest of its output may take to be read (nbclient's 4 s, which
    # nbgrader makes an error, failed right answers that print a lot on a loaded machine); the output a cell
    # may keep is capped, so reading it ends well inside this. A cell interrupted at its time limit gets
    # nbclient's 4 s (INTERRUPTED_OUTPUT_S): its reply is made up, and a kernel deaf to the interrupt never
    # sends the rest.
    output_wait_s = Integer(60, help="seconds to read a cell's output after its reply").tag(config=True)
    progress_file = Unicode("", help="JSON file rewritten as each cell starts").tag(config=True)
    skip = Dict({}, help="notebook name -> {cell index (str): why it is not run}").tag(config=True)
    cell_output_chars = Integer(100_000, help="output characters kept per cell").tag(config=True)
    notebook_output_chars = Integer(2_000_000, help="output characters kept per notebook").tag(config=True)
    guard_channel = Unicode("", help="FIFO the grading kernel reports to; empty: no guard").tag(config=True)
    task_events = Unicode("",
                          help="pids.events of the cgroup that caps processes; empty: none").tag(config=True)
    work_folder = Unicode("", help="the kernel's working folder (made and filled before the first kernel); "
                                   "empty: nbgrader's folder, as plain nbgrader").tag(config=True)
    kernel_home = Unicode("", help="the kernel's HOME, whose start-up folders are emptied before each kernel "
                                   "starts; empty: left alone").tag(config=True)
    source_folder = Unicode("", help="the instructor's notebooks of the assignment, whose out-of-process "
                                     "test cells run in the grader; empty: every test cell runs in the kernel"
                            ).tag(config=True)

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("kernel_manager_class", QuickStopKernelManager)  # (nbgrader's Execute sets its own)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        """Run the notebook, recording what happened in the progress file."""
        self._notebook = (resources or {}).get("nbgrader", {}).get("notebook", "")
        self._started = time.monotonic()
        self._kept_total = 0
        # one progress file per attempt: the events of the attempt's earlier notebooks are kept
        self._events: list[dict] = (list(read_progress(self.progress_file).get("events", []))
                                    if self.progress_file else [])
        self._cell = None
        self._guard = GuardVerdicts(
            nb, lambda index, message: self.record_event(EventKind.TAMPER, index, message))
        self._replies: dict[int, str] = {}  # cell index -> the status of the kernel's reply (verdict.py)
        self._plan = (Plan.read(Path(self.source_folder) / f"{self._notebook}.ipynb") if self.source_folder
                      else Plan())
        self._kernel_lost = False
        self._lost_why = ""  # why a test's call into the kernel found it gone, when it was not its death
        if resources is not None:
            resources[REPLIES] = self._replies
        self._write_progress("starting")
        try:
            result = super().preprocess(nb, resources, km)
        except DeadKernelError as exc:
            why = self._lost_why or (str(exc) if isinstance(exc, KernelMessageError) else self._exit_detail())
            self.record_event(EventKind.KERNEL_DIED, self._cell, why)
            raise
        except CellTimeoutError:
            self.record_event(EventKind.UNRESPONSIVE, self._cell, "did not stop when interrupted")
            raise
        finally:
            self._guard.close()
            self._copy_written_files()
            self._write_progress("finished")
        return result

    # --- the guard -----------------------------------------------------------------------------------

    async def async_start_new_kernel(self, **kwargs):
        """Start the kernel in its own working folder, with the guard's channel open (it opens the other end).
        """
        if self.kernel_home:
            reset_kernel_home(Path(self.kernel_home))
        if self.work_folder:
            fill_work_folder(Path(self.resources.get("metadata", {}).get("path") or "."),
                             Path(self.work_folder))
            kwargs["cwd"] = self.work_folder
        if self.guard_channel:
            self._guard.open(self.guard_channel)
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def _mark_requests(self) -> None:
        """Make the kernel client tag each execute request (test or not) and remember its cell."""
        kc = self.kc
        if kc is None or getattr(kc, "_grader_marks", False):
            return

        def execute(code, silent=False, store_history=True, user_expressions=None, allow_stdin=None,
                    stop_on_error=True):
            content = {"code": code, "silent": silent, "store_history": store_history,
                       "user_expressions": user_expressions or {}, "allow_stdin": bool(allow_stdin),
                       "stop_on_error": stop_on_error}
            marks = {"test": self._guard.is_test(self._cell), "setup": code in self._plan.setup}
            msg = kc.session.msg("execute_request", content, metadata={GRADER_KEY: marks})
            kc.shell_channel.send(msg)
            self._guard.sent[msg["header"]["msg_id"]] = self._cell
            return msg["header"]["msg_id"]

        kc.execute = execute
        shell_get_msg = kc.shell_channel.get_msg

        async def get_msg(*args, **kwargs):
            msg = await ensure_async(shell_get_msg(*args, **kwargs))
            self._guard.observe_reply(msg, self._replies)
            return msg

        kc.shell_channel.get_msg = get_msg
        kc._grader_marks = True

    async def _read_waiting_replies(self) -> None:
        """Read the replies already waiting (a test cell's real one comes after a forged one): none unseen."""
        while self.kc is not None and await ensure_async(self.kc.shell_channel.msg_ready()):
            await self.kc.shell_channel.get_msg(timeout=0)

    # --- time budget ---------------------------------------------------------------------------------

    def _remaining(self) -> float:
        return self.budget - (time.monotonic() - self._started)

    def _get_timeout(self, cell):
        per_cell = super()._get_timeout(cell)
        remaining = max(1, math.ceil(self._remaining()))
        return remaining if per_cell is None else min(per_cell, remaining)

    async def _async_handle_timeout(self, timeout, cell=None):
        out_of_budget = self._remaining() <= 1
        why = (f"the notebook's time limit ({self.budget:g} s) ran out" if out_of_budget
               else f"the cell ran longer than {timeout} s")
        self.record_event(EventKind.TIMEOUT, self._cell, why)
        self.iopub_timeout = INTERRUPTED_OUTPUT_S
        return await super()._async_handle_timeout(timeout, cell)

    # --- cells ---------------------------------------------------------------------------------------

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        """Run one cell, unless it is to be skipped or the notebook is out of time."""
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        self._cell = cell_index
        reason = self.skip.get(self._notebook, {}).get(str(cell_index))
        if reason is None and self._remaining() <= 0:
            reason = f"not run: the notebook's time limit ({self.budget:g} s) had run out"
            if not any(e["kind"] == EventKind.TIMEOUT for e in self._events):
                self.record_event(EventKind.TIMEOUT, cell_index, "the notebook's time limit ran out")
        if reason is not None:
            cell.outputs = [error_output(NOT_RUN, reason)]
            self.record_event(EventKind.SKIPPED, cell_index, reason)
            return cell
        self._write_progress("running")
        self.iopub_timeout = self.output_wait_s
        self._kept_cell = 0
        self._dropped_cell = 0
        self._mark_requests()
        if self._guard.is_test(cell_index) and grade_id(cell) in self._plan.tests:
            return await self._run_outside(cell, cell_index)
        refused = refused_tasks(self.task_events) if self.task_events else 0
        cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        self._guard.check_test(cell, cell_index)
        if self._guard.is_test(cell_index):
            await self._read_waiting_replies()
        if self.task_events and refused_tasks(self.task_events) > refused:
            self.record_event(EventKind.PROCESSES, cell_index, f"tried to start more than {MAX_TASKS} "
                              "processes and threads; the rest were refused")
        if self._dropped_cell:
            cell.outputs.insert(0, NotebookNode(  # first, so that nbgrader's LimitOutput keeps it
                output_type="stream", name="stderr",
                text=f"[grader: {self._dropped_cell:,} more characters of output were dropped; "
                     f"at most {self.cell_output_chars:,} are kept per cell]\n"))
            self.record_event(EventKind.TRUNCATED, cell_index,
                              f"{self._dropped_cell:,} characters of output dropped")
        for output in cell.outputs:
            if output.get("output_type") != "error":
                continue
            if is_memory_error(output):
                evalue = str(output.get("evalue") or "").strip()
                self.record_event(EventKind.MEMORY, cell_index,
                                  f"{output.get('ename')}{': ' + evalue if evalue else ''}"[:200])
            elif "File too large" in str(output.get("evalue", "")) or output.get("ename") == "FileTooLarge":
                self.record_event(EventKind.DISK, cell_index,
                                  f"wrote a file larger than the {MAX_FILE_MIB} MiB limit")
            elif output.get("ename") == "SystemExit":
                self.record_event(EventKind.SYS_EXIT, cell_index, "called sys.exit(); the grader carried on")
        return cell

    execute_cell = run_sync(async_execute_cell)

    # --- out-of-process test cells (remote_calls.py) -----------------------------------------------------

    async def _run_outside(self, cell, cell_index):
        """Run the instructor's code of an out-of-process test cell here, calling the student's functions in
        the kernel; record its outputs and verdict as if the kernel had run it."""
        loop = asyncio.get_running_loop()
        timeout = self._get_timeout(cell)
        deadline = time.monotonic() + (timeout if timeout is not None else max(1.0, self._remaining()))
        gid = grade_id(cell)
        try:
            namespace = self._plan.namespace()
        except Exception as exc:  # noqa: BLE001  (the instructor's set-up cells: every test fails, and says so)
            why = f"the grader could not run the notebook's set-up cells ({type(exc).__name__}: {exc})"
            cell.outputs = [error_output("SetUpFailed", why)]
            self._replies[cell_index] = "error"
            return cell
        calls = KernelCalls(self, cell_index, deadline)

        def call(name: str, payload: bytes) -> str:
            return asyncio.run_coroutine_threadsafe(calls.call(name, payload), loop).result()

        run = await loop.run_in_executor(None, functools.partial(run_test, self._plan.tests[gid], namespace,
                                                                 call, str(gid)))
        await calls.close()
        printed = calls.printed[:self.cell_output_chars]
        cell.outputs = ([NotebookNode(output_type="stream", name="stdout", text=printed)] if printed else []
                        ) + run.outputs
        self._replies[cell_index] = run.status
        if self._kernel_lost:  # (preprocess records it, as for a cell run in the kernel)
            raise DeadKernelError("the kernel died while a test called the student's code")
        return cell

    # --- files the notebook wrote ------------------------------------------------------------------------

    def _copy_written_files(self) -> None:
        """Copy what the notebook wrote in its working folder back beside the graded notebook, as plain
        nbgrader leaves it there: regular files only, read without following a link, within WRITTEN_FILES
        (notebooks are never copied over the graded one)."""
        target = Path(self.resources.get("metadata", {}).get("path") or "") if self.work_folder else None
        if target is not None and target.is_dir():
            copy_written_files(Path(self.work_folder), target)

    def on_cell_executed(self, **kwargs):
        """Keep the status of the kernel's reply to each cell, for the verdict on test cells."""
        reply = kwargs.get("execute_reply") or {}
        self._replies[kwargs["cell_index"]] = str((reply.get("content") or {}).get("status"))
        return super().on_cell_executed(**kwargs)

    # --- outputs -------------------------------------------------------------------------------------

    def output(self, outs, msg, display_id, cell_index):
        """Keep an output while the cell's and the notebook's allowances last; always keep errors (trimmed).
        """
        content = msg.get("content", {})
        size = _size(content)
        room = min(self.cell_output_chars - self._kept_cell, self.notebook_output_chars - self._kept_total)
        if msg.get("msg_type") == "error":
            limit = max(room, 2000)
            content["evalue"] = content.get("evalue", "")[:limit]
            content["traceback"] = [line[:limit] for line in content.get("traceback", [])[-60:]]
        elif size > room:
            if msg.get("msg_type") == "stream" and room > 0:
                content["text"] = content["text"][:room]
                self._dropped_cell += size - room
                size = room
            else:
                self._dropped_cell += size
                return None
        self._kept_cell += size
        self._kept_total += size
        return super().output(outs, msg, display_id, cell_index)

    # --- reporting -----------------------------------------------------------------------------------

    def _grade_id(self, index) -> str | None:
        if index is None or index >= len(self.nb.cells):
            return None
        return grade_id(self.nb.cells[index])

    def record_event(self, kind: EventKind, index, message: str) -> None:
        """Keep what happened at a cell (a time limit, a tamper report, ...) in the attempt's progress."""
        self._events.append({"kind": kind, "notebook": self._notebook, "cell": index,
                             "grade_id": self._grade_id(index), "message": message})
        self._write_progress("running")

    # What an out-of-process test cell's calls (KernelCalls) may know and change of this execution.
    @property
    def kernel_gone(self) -> bool:
        """True once the kernel was lost (dead, or its messages could not be read), or never started."""
        return self.kc is None or self._kernel_lost

    def lose_kernel(self, why: str = "") -> None:
        """Mark the kernel lost; `why` says why when it is not the kernel's death (which the cell's error
        says)."""
        self._kernel_lost = True
        self._lost_why = why or self._lost_why

    def expect_call_loop(self, msg_id: str, cell_index: int) -> None:
        """Tell the guard's verdicts that request `msg_id` is the grader's call loop for a test cell."""
        self._guard.calls[msg_id] = cell_index

    async def _async_check_alive(self) -> None:
        try:
            await super()._async_check_alive()
        except DeadKernelError:
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            self._exit_code = process.poll() if process is not None else None
            raise

    def _exit_detail(self) -> str:
        code = getattr(self, "_exit_code", None)
        if code is None:
            return "the kernel died"
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        if signum:
            import signal

            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
            return f"the kernel died ({name})"
        return f"the kernel exited (exit code {code})"

    def _write_progress(self, state: str) -> None:
        if not self.progress_file:
            return
        record = {"state": state, "notebook": self._notebook, "cell": self._cell,
                  "grade_id": self._grade_id(self._cell), "events": self._events}
        tmp = self.progress_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(tmp, self.progress_file)


class KernelCalls:
    """One out-of-process test cell's calls into the kernel: one request of the grader's runs a loop there
    (remote_calls.serve_code) that takes each call as the answer to its `input()` and prints the result after
    a marker only this cell's grader knows; every wait is bounded by the cell's deadline."""

    POLL_S = 0.05

    def __init__(self, execute: GraderExecute, cell_index: int, deadline: float) -> None:
        self.execute, self.cell_index, self.deadline = execute, cell_index, deadline
        self.marker = secrets.token_hex(16)
        self.msg_id: str | None = None  # the loop's request, while it runs
        self.stream = ""  # what the kernel printed since the last answer
        self.printed = ""  # what the student's code printed (shown in the cell's outputs)

    async def call(self, name: str, payload: bytes) -> str:
        """Run one call in the kernel and return its answer (CallFailed when none comes)."""
        if self.execute.kernel_gone:
            raise CallFailed("the kernel is gone")
        kc = self.execute.kc
        try:
            if self.msg_id is None:
                self.start(kc)
            await self.until_input(name)
            kc.input(call_line(name, payload))
            return await self.until_answer(name)
        except KernelMessageError as exc:
            self.execute.lose_kernel(str(exc))
            raise CallFailed(str(exc)) from None

    def start(self, kc) -> None:
        content = {"code": serve_code(self.marker), "silent": True, "store_history": False,
                   "user_expressions": {}, "allow_stdin": True, "stop_on_error": False}
        msg = kc.session.msg("execute_request", content, metadata={GRADER_KEY: {"test": False}})
        self.msg_id = msg["header"]["msg_id"]
        self.execute.expect_call_loop(self.msg_id, self.cell_index)
        kc.shell_channel.send(msg)

    async def until_input(self, name: str) -> None:
        """Wait until the loop asks for the next call."""
        while True:
            await self.check(name)
            try:
                msg = await ensure_async(self.execute.kc.stdin_channel.get_msg(timeout=self.POLL_S))
            except Empty:
                continue
            if msg.get("msg_type") == "input_request" and self._ours(msg):
                return

    async def until_answer(self, name: str) -> str:
        """Read what the kernel prints until the answer's line is complete; return the answer."""
        head = "\n" + self.marker + " "
        while True:
            at = self.stream.find(head)
            end = self.stream.find("\n", at + len(head)) if at >= 0 else -1
            if end >= 0:
                answer = self.stream[at + len(head):end]
                self._keep(self.stream[:at])
                self.stream = self.stream[end + 1:]
                return answer
            if len(self.stream) > MAX_REPLY_CHARS + len(head) + self.execute.cell_output_chars:
                raise CallFailed(f"{name} printed more than the grader reads")
            await self.check(name)
            try:
                msg = await ensure_async(self.execute.kc.iopub_channel.get_msg(timeout=self.POLL_S))
            except Empty:
                continue
            if msg.get("msg_type") == "stream" and self._ours(msg):
                self.stream += str((msg.get("content") or {}).get("text", ""))

    async def check(self, name: str) -> None:
        """Raise CallFailed when the loop ended, the kernel died or the deadline passed (then interrupted)."""
        kc = self.execute.kc
        while await ensure_async(kc.shell_channel.msg_ready()):
            reply = await kc.shell_channel.get_msg(timeout=0)
            if reply.get("msg_type") == "execute_reply" and self._ours(reply):
                self.msg_id = None
                raise CallFailed(f"the student's code stopped the grader's calls while {name} ran")
        if time.monotonic() > self.deadline:
            self.execute.record_event(EventKind.TIMEOUT, self.cell_index, f"a call to {name} ran out of time")
            await ensure_async(self.execute.km.interrupt_kernel())
            await self.finish(INTERRUPT_WAIT)
            raise CallFailed(f"{name} ran out of time (the cell's limit)")
        if not await ensure_async(self.execute.km.is_alive()):
            self.execute.lose_kernel()
            raise CallFailed("the kernel died while it ran the student's code")

    async def close(self) -> None:
        """End the loop (if it still runs) and wait for its reply."""
        if self.msg_id is None or self.execute.kernel_gone:
            return
        kc, limit = self.execute.kc, time.monotonic() + INTERRUPT_WAIT
        while self.msg_id is not None and time.monotonic() < limit:
            try:
                msg = await ensure_async(kc.stdin_channel.get_msg(timeout=self.POLL_S))
            except Empty:
                msg = None
            if msg is not None and msg.get("msg_type") == "input_request" and self._ours(msg):
                kc.input(END)
                await self.finish(INTERRUPT_WAIT)
                return
            while self.msg_id is not None and await ensure_async(kc.shell_channel.msg_ready()):
                reply = await kc.shell_channel.get_msg(timeout=0)
                if reply.get("msg_type") == "execute_reply" and self._ours(reply):
                    self.msg_id = None
        if self.msg_id is not None:  # the loop neither asks nor ends: stop it
            await ensure_async(self.execute.km.interrupt_kernel())
            await self.finish(INTERRUPT_WAIT)

    async def finish(self, wait_s: float) -> None:
        """Wait (at most `wait_s`) for the loop's reply."""
        kc, limit = self.execute.kc, time.monotonic() + wait_s
        while self.msg_id is not None and time.monotonic() < limit:
            try:
                reply = await kc.shell_channel.get_msg(timeout=self.POLL_S)
            except Empty:
                continue
            if reply.get("msg_type") == "execute_reply" and self._ours(reply):
                self.msg_id = None

    def _ours(self, msg: dict) -> bool:
        return (msg.get("parent_header") or {}).get("msg_id") == self.msg_id

    def _keep(self, text: str) -> None:
        room = self.execute.cell_output_chars - len(self.printed)
        if room > 0:
            self.printed += text.lstrip("\n")[:room] if not self.printed else text[:room]


def fill_work_folder(autograded: Path, work: Path) -> None:
    """Make the kernel's working folder with copies of the regular files beside the notebooks (once only).

    Runs before any student code of the attempt: later kernels of the same attempt find the folder as the
    earlier ones left it, as they would find nbgrader's folder. Links and special files are not copied.
    """
    try:
        work.mkdir()
    except FileExistsError:
        return
    for folder, dirs, files in os.walk(autograded):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
        for name in sorted(files):
            if name.endswith(".ipynb"):
                continue
            src = Path(folder) / name
            if not stat.S_ISREG(src.lstat().st_mode):
                continue
            dest = work / src.relative_to(autograded)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest, follow_symlinks=False)


def copy_written_files(work: Path, target: Path) -> list[str]:
    """Copy the files in the kernel's working folder `work` into nbgrader's folder `target` (replacing what
    is there, notebooks and ACTIVE_CONTENT left out); return the files copied. Read as safe_copy reads a
    folder someone else controls (no link followed, no FIFO or device opened, within WRITTEN_FILES); written
    as new files renamed into place, in folders none of which is a link."""
    if not work.is_dir() or work.is_symlink():
        return []
    staging = Path(tempfile.mkdtemp(prefix=".written-", dir=target.parent))
    placed = []
    try:
        report = copy_tree(work, staging / "files", WRITTEN_FILES, skip=_not_copied_back)
        for rel in report.copied:
            dest = target / rel
            if not _inside_real_folders(target, dest.parent) or dest.is_dir():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / "files" / rel, dest)
            placed.append(rel)
    except (Refusal, OSError):
        pass  # nothing the notebook wrote is worth failing the grading for
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return placed


def _not_copied_back(rel: str) -> bool:
    """Return True for a notebook (the graded one is nbgrader's) or a file a browser would run."""
    return rel.lower().endswith((".ipynb", *ACTIVE_CONTENT))


def _inside_real_folders(root: Path, folder: Path) -> bool:
    """Return True when no part of `folder` under `root` is a link or not a folder (missing is fine)."""
    path = root
    for part in folder.relative_to(root).parts:
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            return False
    return True


def reset_kernel_home(home: Path) -> None:
    """Remove what a kernel would load from its HOME as it starts (links are removed, never followed)."""
    for name in KERNEL_START_FOLDERS:
        path = home / name
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)


def read_progress(path) -> dict:
    """Return what the progress file says (empty when there is none, it is unreadable or not a plain file)."""
    path = Path(path)
    try:
        record = json.loads(read_small(path.parent, path.name, MAX_PROGRESS_BYTES))
    except (Refusal, OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
