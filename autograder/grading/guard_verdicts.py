"""The grading kernel's guard, as the grader reads it for one notebook (guard_kernel/, tamper.py): which
graded test cells it confirms ran as written on the pristine path, and a flag, in words, for every change it
undid, every forged reply and every suspicious answer cell.

GraderExecute (execution.py) tells it each execute request it sends (`sent`) and each call into the kernel
(`calls`), hands it every shell reply (`observe_reply`) and each finished test cell (`check_test`), and
closes it when the notebook ends (`close`), which turns the guard's last records into flags.
"""

from collections.abc import Callable

from nbformat import NotebookNode
from nbgrader import utils

from autograder.cells import grade_id
from autograder.grading.tamper import CellRecords, ChannelReader, describe_change, suspicious_code

UNCONFIRMED = "TestNotConfirmed"
RECORD_WAIT = 5.0  # seconds to wait for the guard's record of a finished test cell


def error_output(ename: str, evalue: str) -> NotebookNode:
    """Return an error output of the grader's own (a test not confirmed, a cell not run): it fails a test."""
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])


class GuardVerdicts:
    """The guard's word on one notebook's cells; `report(cell index or None, words)` records each flag."""

    def __init__(self, nb: NotebookNode, report: Callable[[int | None, str], None]) -> None:
        self.nb, self.report = nb, report
        self.channel: ChannelReader | None = None
        self.sent: dict[str, int] = {}  # execute request msg_id -> cell index
        self.answered: set[str] = set()  # execute request msg_ids the kernel has replied to
        self.calls: dict[str, int] = {}  # msg_ids of calls into the kernel (remote_calls.py) -> test cell
        self.flagged: set[str] = set()

    def open(self, path: str) -> None:
        """Read the guard's records from its channel (a FIFO the grading kernel opens the other end of)."""
        self.close()
        self.channel = ChannelReader(path)

    def observe_reply(self, msg: dict, replies: dict[int, str]) -> None:
        """Fail a cell the kernel replied to twice: the first reply was not the kernel's own (a forgery)."""
        msg_id = str((msg.get("parent_header") or {}).get("msg_id", ""))
        if msg.get("msg_type") != "execute_reply" or msg_id not in self.sent:
            return
        if msg_id not in self.answered:
            self.answered.add(msg_id)
            return
        index = self.sent[msg_id]
        replies[index] = "answered twice"
        cell = self.nb.cells[index]
        if self.is_test(index) and not any(o.get("ename") == UNCONFIRMED for o in cell.outputs):
            cell.outputs.append(error_output(UNCONFIRMED, "the grader could not run this test as written, "
                                                           "so it earns no points"))
        self.flag(index, "was answered twice: code in the kernel sent the grader a reply of its own")

    def is_test(self, index) -> bool:
        cell = self.nb.cells[index] if index is not None else None
        return cell is not None and bool(utils.is_grade(cell)) and not utils.is_solution(cell)

    def cell_name(self, index) -> str:
        if index is None:
            return "the notebook:"
        cell = self.nb.cells[index]
        gid = grade_id(cell)
        if gid and utils.is_solution(cell):
            return f"answer cell '{gid}'"
        if gid and utils.is_grade(cell):
            return f"test cell '{gid}'"
        return f"cell {index + 1}" + (f" ('{gid}')" if gid else "")

    def flag(self, index, words: str) -> None:
        message = f"{self.cell_name(index)} {words}"
        if message not in self.flagged:
            self.flagged.add(message)
            self.report(index, message)

    def flagged_with(self, index, words: str) -> bool:
        """Return True when the kernel already flagged this cell for the same thing (in any detail)."""
        return any(m.startswith(f"{self.cell_name(index)} {words}") for m in self.flagged)

    def check_test(self, cell, cell_index) -> None:
        """Fail a graded test cell that the guard cannot confirm ran as written on the pristine path."""
        if self.channel is None or not self.is_test(cell_index):
            return
        msg_id = next(reversed(self.sent), None)  # the request just sent for this cell
        records = (self.channel.wait_for(msg_id, RECORD_WAIT) if msg_id and self.sent[msg_id] == cell_index
                   else CellRecords())
        if records.confirmed:
            return
        cell.outputs.append(error_output(UNCONFIRMED, "the grader could not run this test as written, "
                                                       "so it earns no points"))
        if records.before is None or records.after is None:
            self.flag(cell_index, "ran without the grader's check of the kernel (its record is missing)")
        elif records.changes("before"):
            self.flag(cell_index, "ran after code left running in the background changed the kernel")
        else:
            self.flag(cell_index, "was changed while it ran (by the code it called)")

    def close(self) -> None:
        """Read the guard's last records and turn every change it undid into a flag."""
        channel, self.channel = self.channel, None
        if channel is None:
            return
        channel.close()
        background: dict[str, list[str]] = {}
        for msg_id, index in self.sent.items():
            records = channel.records.get(msg_id, CellRecords())
            for change in records.changes("before"):
                cells = background.setdefault(describe_change(change), [])
                if (name := self.cell_name(index)) not in cells:
                    cells.append(name)
        for words, cells in background.items():
            shown = ", ".join(cells[:3]) + (f" and {len(cells) - 3} more" if len(cells) > 3 else "")
            self.flag(None, f"code left running in the background {words} (found before {shown})")
        for msg_id, index in [*self.sent.items(), *self.calls.items()]:
            records = channel.records.get(msg_id, CellRecords())
            for change in records.changes("after"):
                self.flag(index, describe_change(change))
            for finding in records.findings():
                self.flag(index, finding)
        if channel.flooded:
            self.flag(None, "something other than the grading kernel wrote to the grader's channel")
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type == "code" and not utils.is_locked(cell) and not self.is_test(index):
                for words in suspicious_code(cell.source):
                    if not self.flagged_with(index, words):
                        self.flag(index, f"{words} (in its code)")
