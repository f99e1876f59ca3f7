"""nbgrader's Execute preprocessor with what a class of untrusted notebooks needs.

- a wall-clock budget for the whole notebook: the running cell is interrupted when it runs out, and the
  cells after it are not run (they count as failed);
- capped outputs, so a flood of prints cannot fill the grader's memory or the feedback;
- a progress file that says which cell is running, so a grader that has to kill the kernel knows where;
- cells to skip: a cell that crashed or hung the kernel in an earlier attempt is not run again, and fails.
"""

import json
import math
import os
import time

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Dict, Float, Integer, Unicode

MEMORY_ERROR_HINTS = ("can't allocate memory", "cannot allocate memory", "out of memory", "defaultcpuallocator")
NOT_RUN = "NotRunByGrader"


def is_memory_error(output: dict) -> bool:
    """Return True when an error output says the code ran out of memory."""
    text = f"{output.get('ename', '')}: {output.get('evalue', '')}".lower()
    return output.get("ename") == "MemoryError" or any(hint in text for hint in MEMORY_ERROR_HINTS)


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])


def _size(content: dict) -> int:
    if "text" in content:
        return len(content["text"])
    if "data" in content:
        return sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in content["data"].values())
    return len(content.get("evalue", "")) + sum(len(line) for line in content.get("traceback", []))


class GraderExecute(Execute):
    """Execute with a notebook time budget, capped outputs, a progress file and cells to skip."""

    budget = Float(300.0, help="wall-clock seconds for the whole notebook, kernel start included").tag(config=True)
    progress_file = Unicode("", help="JSON file rewritten as each cell starts").tag(config=True)
    skip = Dict({}, help="notebook name -> {cell index (str): why it is not run}").tag(config=True)
    cell_output_chars = Integer(100_000, help="output characters kept per cell").tag(config=True)
    notebook_output_chars = Integer(2_000_000, help="output characters kept per notebook").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        """Run the notebook, recording what happened in the progress file."""
        self._notebook = (resources or {}).get("nbgrader", {}).get("notebook", "")
        self._started = time.monotonic()
        self._kept_total = 0
        self._events: list[dict] = []
        self._cell = None
        self._write_progress("starting")
        try:
            result = super().preprocess(nb, resources, km)
        except DeadKernelError:
            self._event("kernel-died", self._cell, self._exit_detail())
            raise
        except CellTimeoutError:
            self._event("unresponsive", self._cell, "did not stop when interrupted")
            raise
        finally:
            self._write_progress("finished")
        return result

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
        self._event("timeout", self._cell, why)
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
            if not any(e["kind"] == "timeout" for e in self._events):
                self._event("timeout", cell_index, "the notebook's time limit ran out")
        if reason is not None:
            cell.outputs = [_error_output(NOT_RUN, reason)]
            self._event("skipped", cell_index, reason)
            return cell
        self._write_progress("running")
        self._kept_cell = 0
        self._dropped_cell = 0
        cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if self._dropped_cell:
            cell.outputs.insert(0, NotebookNode(  # first, so that nbgrader's LimitOutput keeps it
                output_type="stream", name="stderr",
                text=f"[grader: {self._dropped_cell:,} more characters of output were dropped; "
                     f"at most {self.cell_output_chars:,} are kept per cell]\n"))
            self._event("truncated", cell_index, f"{self._dropped_cell:,} characters of output dropped")
        for output in cell.outputs:
            if output.get("output_type") != "error":
                continue
            if is_memory_error(output):
                evalue = str(output.get("evalue") or "").strip()
                self._event("memory", cell_index, f"{output.get('ename')}{': ' + evalue if evalue else ''}"[:200])
            elif output.get("ename") == "SystemExit":
                self._event("sys-exit", cell_index, "called sys.exit(); the grader carried on")
        return cell

    execute_cell = run_sync(async_execute_cell)

    # --- outputs -------------------------------------------------------------------------------------

    def output(self, outs, msg, display_id, cell_index):
        """Keep an output while the cell's and the notebook's allowances last; always keep errors (trimmed)."""
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
        return self.nb.cells[index].get("metadata", {}).get("nbgrader", {}).get("grade_id")

    def _event(self, kind: str, index, message: str) -> None:
        self._events.append({"kind": kind, "notebook": self._notebook, "cell": index,
                             "grade_id": self._grade_id(index), "message": message})
        self._write_progress("running")

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


def read_progress(path) -> dict:
    """Return what the progress file says (empty when there is none or it is unreadable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}
