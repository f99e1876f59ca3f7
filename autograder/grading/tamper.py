"""The grader's side of the grading kernel's guard (guard_kernel/): read its records, judge, and word flags.

The grading kernel writes two records per executed cell to a FIFO that only this process reads: "before"
(what it had to put back before the cell) and "after" (what the cell changed, and what the audit hook
blocked or saw). From them the grader decides two things:

- a graded test cell counts only when it is *confirmed*: both records came, nothing had to be put back right
  before it (code left running in the background), and it changed nothing while it ran;
- every change a cell made becomes a flag for the instructor, in words ("answer cell 'describe' installs an
  IPython input transformer"). Changes that libraries make on their own (`%matplotlib inline`) are not.

A plain reading of the answer cells adds flags for tampering that had no effect (IPython itself undoes a
replaced `sys.excepthook` after each cell) and so leaves nothing for the kernel to see.
"""

import hashlib
import hmac
import marshal
import os
import re
import select
import threading
import time
from dataclasses import dataclass, field

MAX_RECORDS = 20_000
MAX_LINE = 1 << 16

# What a change to a part of the execution path means, most specific first: (pattern on `where`, words).
MEANINGS = (
    (r"cleanup_transforms|line_transforms|token_transformers|input_transformers",
     "installs an IPython input transformer"),
    (r"ast_transformers", "installs an IPython AST transformer"),
    (r"CustomTB|custom_exceptions", "installs a custom exception handler"),
    (r"callbacks\['(\w+)'\]", "registers an IPython event callback ('{0}')"),
    (r"showtraceback|InteractiveTB|SyntaxTB|excepthook", "replaces how errors are reported ({where})"),
    (r"^sys\.(settrace|setprofile)$", "sets a tracing hook (sys.{0})"),
    (r"(?:Shell|shell)\.(\w+)$", "replaces the IPython shell's {0}"),
    (r"Kernel\.(\w+)$", "replaces the kernel's {0}"),
)
# Text in an answer cell that only tampering needs (checked on the code, not the comments).
SUSPICIOUS_CODE = (
    (r"\bexcepthook\b", "replaces sys.excepthook"),
    (r"\bset_custom_exc\b", "installs a custom exception handler"),
    (r"\b(?:input_transformers_(?:cleanup|post)|input_transformer_manager)\b",
     "installs an IPython input transformer"),
    (r"\bast_transformers\b", "installs an IPython AST transformer"),
    (r"\b_?showtraceback\b", "replaces how errors are reported"),
    (r"\b(?:settrace|setprofile)\b", "sets a tracing hook"),
    (r"\bevents\s*\.\s*register\b", "registers an IPython event callback"),
    (r"\b(?:run_cell(?:_async)?|run_ast_nodes|run_code|transform_cell|do_execute)\b",
     "replaces how cells are run"),
)


@dataclass
class CellRecords:
    """What the grading kernel said about one executed cell."""

    before: dict | None = None
    after: dict | None = None
    alarms: list[str] = field(default_factory=list)  # what the kernel reported the moment it happened

    def changes(self, phase: str) -> list[dict]:
        """Return the changes of one phase that were not a library's own doing."""
        record = self.before if phase == "before" else self.after
        return [c for c in (record or {}).get("changes", []) if isinstance(c, dict) and not c.get("benign")]

    def findings(self) -> list[str]:
        """Return what the audit hook blocked or saw while the cell ran (reported at once, or in the record).
        """
        found = [str(f) for f in (self.after or {}).get("findings", [])]
        return found + [a for a in self.alarms if a not in found]

    @property
    def confirmed(self) -> bool:
        """Return True when the cell ran on the pristine path and left it pristine."""
        return (self.before is not None and self.after is not None and not self.changes("before")
                and not self.changes("after") and not self.findings())


@dataclass
class ChannelReader:
    """Reads the grading kernel's FIFO in a thread (so the kernel never blocks on a full pipe)."""

    path: str
    records: dict[str, CellRecords] = field(default_factory=dict)
    flooded: bool = False

    def __post_init__(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.mkfifo(self.path, 0o600)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._count = 0
        self._key: bytes | None = None
        self._thread = threading.Thread(target=self._read, name="guard-channel", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer, writer_seen = b"", False
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not chunk:
                if writer_seen:
                    break  # the kernel closed its end: it has exited
                time.sleep(0.02)  # no writer yet: the kernel is starting
                continue
            writer_seen = True
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > MAX_LINE:
                buffer, self.flooded = b"", True
            for line in lines:
                self._take(line)

    def _take(self, line: bytes) -> None:
        record = self._verified(line)
        if record == {"phase": "key"}:
            return
        if not isinstance(record, dict) or record.get("phase") not in ("before", "after", "alarm"):
            self.flooded = True  # not the kernel's writing: something else wrote to its channel
            return
        if record["phase"] == "alarm":
            with self._arrived:
                cell = self.records.setdefault(str(record.get("msg_id")), CellRecords())
                if len(cell.alarms) < 50:
                    cell.alarms.append(str(record.get("finding")))
            return
        with self._arrived:
            self._count += 1
            if self._count > MAX_RECORDS:
                self.flooded = True
                return
            cell = self.records.setdefault(str(record.get("msg_id")), CellRecords())
            if getattr(cell, record["phase"]) is None:  # the first one counts; a second one is forged
                setattr(cell, record["phase"], record)
            else:
                self.flooded = True
            self._arrived.notify_all()

    def _verified(self, line: bytes) -> dict | None:
        """Return the record a line carries when the kernel's key signed it (the first line gives the key)."""
        if self._key is None:
            if line.startswith(b"key "):
                try:
                    self._key = bytes.fromhex(line[4:].decode())
                except ValueError:
                    self._key = b""
                return {"phase": "key"} if self._key else None
            self._key = b""  # the first line was not a key: nothing on this channel can be trusted
            return None
        mac, _, payload = line.partition(b" ")
        try:
            data = bytes.fromhex(payload.decode())
        except ValueError:
            return None
        expected = hashlib.blake2b(data, key=self._key, digest_size=16).hexdigest().encode()
        if not self._key or not hmac.compare_digest(mac, expected):
            return None
        try:
            return marshal.loads(data)  # signed by the kernel: written by its own marshal.dumps
        except (ValueError, EOFError, TypeError):
            return None

    def wait_for(self, msg_id: str, seconds: float) -> CellRecords:
        """Return the records of one cell, waiting up to `seconds` for its "after" record."""
        deadline = time.monotonic() + seconds
        with self._arrived:
            while (self.records.get(msg_id) is None or self.records[msg_id].after is None) \
                    and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._arrived.wait(min(left, 0.1))
            return self.records.get(msg_id) or CellRecords()

    def close(self, seconds: float = 5.0) -> None:
        """Read what is left (the kernel has exited), then stop."""
        self._thread.join(seconds)
        self._stop.set()
        self._thread.join(30)  # it sees the stop within 0.1 s, however slow the machine
        if not self._thread.is_alive():
            # Closed here, after the reader is gone, never by the reader itself: a reader that closed it late
            # would close whatever file the grader had opened meanwhile under the same number.
            os.close(self._fd)
        if os.path.exists(self.path):
            os.unlink(self.path)


def describe_change(change: dict) -> str:
    """Return what a change to the execution path means, in words."""
    where = str(change.get("where", "?"))
    for pattern, words in MEANINGS:
        found = re.search(pattern, where)
        if found:
            return words.format(*found.groups(), where=where)
    verb = {"added": "adds", "removed": "removes", "changed": "changes", "set": "sets"}.get(
        str(change.get("what")), "replaces")
    return f"{verb} {where}"


def suspicious_code(source: str) -> list[str]:
    """Return what an answer cell's code (comments and strings left out) plainly sets out to tamper with."""
    code = _code_only(source)
    return [words for pattern, words in SUSPICIOUS_CODE if re.search(pattern, code)]


def _code_only(source: str) -> str:
    """Return the source without comments (strings are kept: names built from strings are still names)."""
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())
