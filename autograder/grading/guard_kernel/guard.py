"""The guard: what the audit hook decides for each event and each of the kernel's messages (layers 2 and 4).

It restores the execution path around every message (snapshot.py), blocks what it cannot restore, reports the
rest to the grader (grader_channel.py) and traces graded test cells (tracer.py). Only the audit hook holds it
(seal.py).
"""

import builtins
import functools
import os
import re
import sys
import threading
import types

from .grader_channel import Channel
from .snapshot import _MISSING, Change, Snapshot, _defined_by_library, _in_course, _in_path, is_code
from .tracer import (
    TRACE_EVENT,
    _allowed_codes,
    _bound_names,
    _runs_code,
    _test_names,
    is_students,
    library_roots,
    make_tracer,
)

# execute_request metadata: {"test": true} for graded test cells, {"setup": true} for the instructor's set-up
# cells (the locked imports)
GRADER_KEY = "devicelab_grader"
ALWAYS_BLOCKED = types.MappingProxyType({"__code__": "changes a function's code in place",
                                         "__defaults__": "changes a function's defaults",
                                         "__kwdefaults__": "changes a function's defaults"})
BLOCKED_IN_TESTS = types.MappingProxyType({"sys.settrace": "sets a tracing hook (sys.settrace)",
                    "sys.setprofile": "sets a profiling hook (sys.setprofile)",
                    "sys.monitoring.register_callback": "registers a sys.monitoring callback"})
REPORTED = types.MappingProxyType({"gc.get_objects": "walks the garbage collector (gc.get_objects)",
            "gc.get_referrers": "walks the garbage collector (gc.get_referrers)",
            "gc.get_referents": "walks the garbage collector (gc.get_referents)",
            "ctypes.string_at": "reads raw memory (ctypes.string_at)",
            "ctypes.wstring_at": "reads raw memory (ctypes.wstring_at)",
            "ctypes.cdata": "reads raw memory (ctypes from_address)"})

GUARD_EVENT = "devicelab.guard"  # raised by the kernel's message handlers (the triggers below) only
# Audit events the hook looks at; everything else returns at once.
WATCHED = frozenset({GUARD_EVENT, TRACE_EVENT, "object.__setattr__", "object.__getattr__", "sys._getframe",
                     "sys._current_frames", "open", "exec", *BLOCKED_IN_TESTS, *REPORTED})
# Modules that only pass a call along (a thread's target, a callback): the caller is whoever gave it to them.
TRAMPOLINES = frozenset({"threading", "concurrent", "asyncio", "functools", "contextlib", "weakref", "ctypes",
                         "operator", "runpy", "_weakrefset"})
# The kernel's event loop and message handling, which run callbacks student code scheduled (`call_soon`).
EVENT_LOOP = frozenset({"tornado", "ipykernel", "zmq", "jupyter_client", "anyio", "IPython", "traitlets"})
# What runs cells: student code called straight from here while a test runs was not called by the test.
MACHINERY = ("IPython.core.interactiveshell", "ipykernel.zmqshell", "ipykernel.ipkernel",
             "ipykernel.kernelbase")
MEMORY_FILES = re.compile(r"^/proc/(?:self|thread-self|\d+)/(?:mem|fd/\d+|task/\d+/mem)$")
SENSITIVE_READS = types.MappingProxyType({"gc.get_objects": "walks the garbage collector (gc.get_objects)",
                   "gc.get_referrers": "walks the garbage collector (gc.get_referrers)",
                   "gc.get_referents": "walks the garbage collector (gc.get_referents)",
                   "sys._current_frames": "reads the interpreter's frames (sys._current_frames)"})


_UNBOUND = object()


class TamperingBlocked(RuntimeError):
    """Raised in student code that tries what the grading kernel does not allow."""


def own_spaces(*program: dict) -> list[dict]:
    """Return the guard's own namespaces: every module of this package (all imported before any student code
    runs) and `program`'s, the script that started the kernel (its frame stays on the stack while cells run).
    """
    package = __name__.rpartition(".")[0]
    return [*(vars(module) for name, module in sorted(sys.modules.items())
              if name == package or name.startswith(package + ".")), *program]


def _runs_cells(function, own: frozenset) -> bool:
    """Return True for a function of the execution path, of the course's own modules (the helpers tests judge
    with) or of this guard (its namespace's id is in `own`), whose code must not change."""
    if not isinstance(function, types.FunctionType):
        return False
    module = function.__globals__.get("__name__")
    return (id(function.__globals__) in own or _in_path(module)
            or (type(module) is str and _in_course(module)))


class Guard:
    """Restores the execution path around every message, blocks what it cannot restore, reports the rest.

    Only the audit hook holds the guard (see `arm`): the kernel's handlers reach it by raising audit events,
    so no object student code can walk to (a handler's closure, a frame's locals) holds its state.
    """

    def __init__(self, channel: Channel, own: list[dict] | None = None) -> None:
        self.channel = channel
        own = own_spaces() if own is None else own
        self.own = frozenset(id(space) for space in own)  # the guard's own namespaces (own_spaces)
        self.own_files = tuple(os.path.abspath(space["__file__"]) for space in own
                               if type(space.get("__file__")) is str)
        self.snapshot: Snapshot | None = None
        self.testing = False  # a graded test cell is running
        self.quiet = False  # the guard itself is restoring: its own settrace calls are not tampering
        self.findings: list[str] = []
        self.pending: list[Change] = []
        self.msg_id = ""
        self.sent: set = set()  # (msg_id, phase) already written: a second one is a forged call
        self.triggers: frozenset = frozenset()  # code of the kernel's handlers that may raise GUARD_EVENT
        self.ns: dict | None = None  # the notebook's namespace
        self.machinery: frozenset = frozenset()
        self.test_file: list = [None]
        self.test_runs_code = False  # the graded test cell running is Python with statements in it
        self.tracer = None
        self.tracer_cells: tuple = ()
        self.tracer_code = make_tracer({}, frozenset(), [None], frozenset(), frozenset()).__code__
        self.roots: tuple = (sys.prefix,)
        self.kinds: dict = {}  # id of a globals dict -> (it, whether its code is a student's)
        self.setting_up: dict | None = None  # what the set-up cell running binds (`_bound_names`), if one is
        self.set_up: dict = {}  # name -> what the instructor's set-up cells bound it to (the first binding)
        self.test_names: frozenset = frozenset()  # the names the graded test cell running reads

    # --- the audit hook --------------------------------------------------------------------------------

    def audit(self, event: str, args: tuple, caller=None) -> None:
        """The audit hook: block in-place code changes always, tracing during tests; report the rest at once.
        """
        if event == GUARD_EVENT:
            self._trigger(args, caller)
        elif event == TRACE_EVENT:
            if caller is not None and caller.f_code is self.tracer_code and self.testing:
                self._note(str(args[0]) if args else "?")
        elif event == "object.__setattr__" and len(args) >= 2 and args[1] in ALWAYS_BLOCKED:
            if self.snapshot is not None and _runs_cells(args[0], self.own):
                self._alarm(ALWAYS_BLOCKED[args[1]])
                raise TamperingBlocked(f"the grader does not allow changing {args[1]} of a function")
        elif event in BLOCKED_IN_TESTS:
            if self.testing and not self.quiet:
                self._alarm(BLOCKED_IN_TESTS[event])
                raise TamperingBlocked("the grader does not allow tracing hooks while a test runs")
        elif event == "exec":
            self._exec(args, caller)
        elif self.snapshot is not None or caller is None:
            self._sensitive(event, args, caller)

    def _sensitive(self, event: str, args: tuple, caller) -> None:
        """Report a look into the interpreter's internals made by student code, the moment it happens."""
        if event == "object.__getattr__":
            if (len(args) >= 2 and args[1] == "__code__"
                    and getattr(args[0], "__code__", None) in self.triggers):
                self._alarm("reads the code of the grader's own message handlers")
            return
        if event == "open":
            path = args[0] if args else None
            if type(path) is str and MEMORY_FILES.match(path) and self._by_student(caller):
                self._alarm(f"opens the process's own memory or descriptors ({path})")
            return
        if event == "sys._getframe":
            frame = args[0] if args else None
            if (frame is not None and not is_students(frame.f_globals, self.ns, self.roots, self.kinds)
                    and self._by_student(caller)):
                self._alarm("reads the interpreter's frames outside its own code (sys._getframe)")
            return
        words = REPORTED.get(event) or SENSITIVE_READS.get(event)
        if words is None and event.startswith("ctypes."):
            words = f"uses ctypes on the interpreter's memory ({event})"
        if words is not None and self._by_student(caller, TRAMPOLINES | EVENT_LOOP):
            self._alarm(words)

    def _by_student(self, caller, passing: frozenset = TRAMPOLINES) -> bool:
        """Return True when the nearest caller that only passes calls along is student code, or there is none.

        A chain of nothing but trampolines (a thread whose target is `gc.get_objects`, a callback the event
        loop runs) was set up by student code: no library calls these for itself from there.
        """
        if caller is None:
            return True
        frame, own = caller, self.own
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if (id(frame.f_globals) not in own
                    and not (type(name) is str and name.split(".", 1)[0] in passing)):
                break
            frame = frame.f_back
        return frame is None or is_students(frame.f_globals, self.ns, self.roots, self.kinds)

    def _exec(self, args: tuple, caller) -> None:
        """As IPython starts running the test cell's code: note its file name (the tracer tells the test's
        lines by it) and start tracing. (Before, IPython only reads and compiles the cell, with the hooks that
        could call student code on the way already put back: tracing that too would double the cell's time.)
        """
        if (self.testing and self.test_file[0] is None and caller is not None and args
                and id(caller.f_globals) in self.machinery and isinstance(args[0], types.CodeType)):
            self.test_file[0] = args[0].co_filename
            if self.tracer is not None:
                self.quiet = True
                try:
                    sys.settrace(self.tracer)
                finally:
                    self.quiet = False

    def _note(self, finding: str) -> None:
        if finding not in self.findings and len(self.findings) < 50:
            self.findings.append(finding)

    def _alarm(self, finding: str) -> None:
        """Write a finding to the grader now (before the move it reports can be used), and keep it for the
        cell.
        """
        if finding not in self.findings:
            self.channel.write({"msg_id": self.msg_id, "phase": "alarm", "finding": finding})
        self._note(finding)

    # --- the kernel's messages -------------------------------------------------------------------------

    def _trigger(self, args: tuple, caller) -> None:
        """Handle a message event raised by the kernel's handlers (and only by them)."""
        if caller is None or caller.f_code not in self.triggers or len(args) < 2:
            self._alarm("raises the grader's own events itself")
            return
        phase, subject = args[0], args[1]
        if phase == "setup" and self.snapshot is None:
            self.setup(subject)
        elif phase == "message":
            self.pending += self.restore()
        elif phase in ("before", "after"):
            self._execute(phase, subject if isinstance(subject, dict) else {})

    def setup(self, kernel) -> None:
        """Record the pristine path (the kernel has started and warmed up; no student code has run yet)."""
        self.snapshot = Snapshot.take(kernel.shell, kernel, sys.stdout, sys.stderr)
        self.ns = kernel.shell.user_ns
        self.machinery = frozenset(id(vars(sys.modules[m])) for m in MACHINERY if m in sys.modules)
        self.roots = library_roots(self.own_files)
        if "" not in sys.path:
            sys.path.insert(0, "")  # the notebook's own folder is importable again, as in plain IPython

    def _execute(self, phase: str, parent: dict) -> None:
        header, meta = parent.get("header") or {}, parent.get("metadata") or {}
        msg_id = str(header.get("msg_id", ""))
        if (msg_id, phase) in self.sent:
            self._alarm("calls the grader's message handler itself")
            return
        self.sent.add((msg_id, phase))
        if phase == "before":
            self.msg_id = msg_id
            self.pending += self.restore()
            self.channel.write({"msg_id": msg_id, "phase": "before",
                                "changes": [c.to_json() for c in self.pending], "findings": self.findings})
            self.pending, self.findings = [], []
            grader = meta.get(GRADER_KEY) if isinstance(meta, dict) else None
            grader = grader if isinstance(grader, dict) else {}
            self.testing = bool(grader.get("test"))
            self.setting_up = None
            if grader.get("setup") and self.ns is not None:
                self.setting_up = _bound_names(str((parent.get("content") or {}).get("code", "")))
            if self.testing:
                self._start_test(str((parent.get("content") or {}).get("code", "")))
            return
        if self.testing:
            self._stop_test()
            self._check_set_up(self.test_names)  # again: a thread may have rebound one while the test ran
        self.testing = False
        if self.setting_up is not None:
            self._pin(self.setting_up)
            self.setting_up = None
        changes = self.restore()
        self.channel.write({"msg_id": msg_id, "phase": "after", "changes": [c.to_json() for c in changes],
                            "findings": self.findings})
        self.findings = []

    def _start_test(self, source: str) -> None:
        """Check the names the test uses, and trace which student code it runs."""
        if self.ns is None:
            return
        names, attributes = _test_names(source)
        for name in sorted(names):
            module = sys.modules.get(name)
            if isinstance(module, types.ModuleType) and name in self.ns and self.ns[name] is not module:
                self._note(f"replaces {name} in the notebook's namespace")
            value = self.ns.get(name)
            if (name in builtins.__dict__ and is_code(value) and value is not builtins.__dict__[name]
                    and not _defined_by_library(value)):
                self._note(f"shadows the builtin {name} in the notebook's namespace")
        self.test_names = names
        self._check_set_up(names)
        if self._student_threads():
            self._note("runs a thread of its own while a test runs (it could change what the test reads)")
        self.test_file = [None]
        self.test_runs_code = _runs_code(source)
        self.tracer = make_tracer(self.ns, self.machinery, self.test_file, attributes,
                                  _allowed_codes(names, self.ns), self.roots)
        self.tracer_cells = tuple((c, c.cell_contents) for c in self.tracer.__closure__ or ())

    def _pin(self, bound: dict) -> None:
        """Record what a set-up cell bound (the first binding of a name is kept): a name imported from one of
        the course's modules is pinned to that module's attribute as the snapshot recorded it, before any
        student code, whatever the cell found there; any other name to what the namespace holds now."""
        for name, origin in bound.items():
            if name in self.set_up or self.ns is None:
                continue
            value = self.ns.get(name, _UNBOUND)
            if origin is not None and self.snapshot is not None:
                recorded = self.snapshot.recorded(*origin)
                value = value if recorded is _MISSING else recorded
            if value is not _UNBOUND:
                self.set_up[name] = value

    def _student_threads(self) -> list:
        """Return the live threads that run student code: a target (or a `run` of its class) whose code is a
        student's, or a builtin such as `exec` (no library starts a thread on one); libraries' own threads
        (the kernel's, a thread pool's idle workers) are not."""
        found = []
        for thread in threading.enumerate():
            if thread is threading.main_thread():
                continue
            target = getattr(thread, "_target", None)
            while isinstance(target, functools.partial):
                target = target.func
            if target is None:
                target = getattr(type(thread), "run", None)
            target = getattr(target, "__func__", target)
            if isinstance(target, types.FunctionType):
                if is_students(target.__globals__, self.ns, self.roots, self.kinds):
                    found.append(thread)
            elif isinstance(target, types.BuiltinFunctionType) and getattr(target, "__self__", None) in (
                    builtins, None):
                found.append(thread)
        return found

    def _check_set_up(self, names: frozenset) -> None:
        """Note each name a graded test reads that no longer holds what the set-up cells bound it to."""
        for name in sorted(names & self.set_up.keys()):
            if self.ns is not None and self.ns.get(name, _UNBOUND) is not self.set_up[name]:
                self._note(f"replaces {name}, which the notebook's set-up cells define, in the notebook's "
                           "namespace")

    def _stop_test(self) -> None:
        started = self.test_file[0] is not None  # (a cell of comments only never runs any code)
        if self.test_runs_code and not started:
            self._note("ran a test without IPython running its code (so it could not be traced)")
        self.quiet = True
        try:
            if sys.gettrace() is self.tracer and started:
                sys.settrace(None)
            elif sys.gettrace() is not None or (self.tracer is not None and started):
                self._note("replaced the grader's tracer while a test ran")
                sys.settrace(None)
        finally:
            self.quiet = False
        if any(cell.cell_contents is not value for cell, value in self.tracer_cells):
            self._note("changes the grader's own code (its test tracer)")
        self.tracer, self.tracer_cells = None, ()

    def restore(self) -> list[Change]:
        """Put the pristine path back (with the guard's own hook calls not counted)."""
        if self.snapshot is None:
            return []
        self.quiet = True
        try:
            return self.snapshot.restore()
        finally:
            self.quiet = False

