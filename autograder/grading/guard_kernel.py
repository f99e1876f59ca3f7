"""The grading kernel: an IPython kernel that runs every cell on the execution path it started with.

Student code shares its process with the tests, so it can reach IPython's extension points (input and AST
transformers, exception handlers, event callbacks), replace methods of the shell or the kernel, or set a
tracing hook, and make later test cells pass without running them as written. This kernel defends in layers:

1. *Restore.* Once started, and before any student code runs, it records the execution path: the shell, the
   kernel and the objects they run cells with (their attributes and hook lists), their classes, the modules
   those come from (IPython, ipykernel, ...) and `builtins`, and the interpreter's hooks (tracing, profiling,
   `sys.excepthook`, ...). Before every message it handles, it puts back whatever differs, by identity, so
   it does not matter how a name was reached (a string built at run time, `getattr`, `__import__`).
2. *Block.* An audit hook (which Python never lets anyone remove) refuses what restoring cannot undo:
   changing a function's code or defaults in place; and, while a graded test cell runs, setting a tracing
   or profiling hook (one that could skip the test's lines).
3. *Report.* After every cell it compares again and writes what changed, cell by cell, to a channel that
   only the grader reads (a FIFO opened before any student code and unlinked at once). The grader flags the
   changes and fails any test cell it cannot confirm was run on the pristine path (see execution.py).

Runs inside the sandbox as a plain script next to the kernel's connection file, with the standard library and
ipykernel only. In-process defences have limits; README "Grading a class" says which.
"""

import builtins
import fcntl
import functools
import json
import os
import sys
import threading
import types
from dataclasses import dataclass, field

GRADER_KEY = "devicelab_grader"  # execute_request metadata: {"test": true} for graded test cells
# Where the code that runs a cell comes from: everything in them is part of the execution path.
PATH_PACKAGES = ("IPython", "ipykernel", "jupyter_client", "comm", "traitlets", "zmq", "tornado", "asyncio",
                 "ast", "codeop", "traceback", "linecache", "threading", "contextlib", "json")
# Results of running cells, not part of how cells run.
RESULT_TYPES = ("ExecutionResult", "ExecutionInfo")
SYS_HOOKS = ("excepthook", "displayhook", "breakpointhook", "unraisablehook", "stdout", "stderr", "stdin")
ALWAYS_BLOCKED = {"__code__": "changes a function's code in place", "__defaults__": "changes a function's defaults",
                  "__kwdefaults__": "changes a function's defaults"}
BLOCKED_IN_TESTS = {"sys.settrace": "sets a tracing hook (sys.settrace)",
                    "sys.setprofile": "sets a profiling hook (sys.setprofile)",
                    "sys.monitoring.register_callback": "registers a sys.monitoring callback"}
REPORTED = {"gc.get_objects": "walks the garbage collector (gc.get_objects)",
            "gc.get_referrers": "walks the garbage collector (gc.get_referrers)",
            "gc.get_referents": "walks the garbage collector (gc.get_referents)",
            "ctypes.string_at": "reads raw memory (ctypes.string_at)",
            "ctypes.wstring_at": "reads raw memory (ctypes.wstring_at)",
            "ctypes.cdata": "reads raw memory (ctypes from_address)"}
# Their modules are part of the path, their objects (sockets, loops, threads) are not compared.
TRANSPORT_PACKAGES = ("zmq", "tornado", "asyncio", "threading")
# Attributes that hold hooks: their contents are compared and put back, element by element.
HOOK_CONTAINERS = frozenset({"input_transformers_post", "ast_transformers", "callbacks", "cleanup_transforms",
                             "line_transforms", "token_transformers", "shell_handlers", "control_handlers",
                             "_post_execute"})
# Libraries whose own functions may register IPython callbacks (`%matplotlib inline`): put back, not flagged.
LIBRARY_CALLBACKS = ("matplotlib_inline", "matplotlib", "IPython", "ipykernel", "ipywidgets")
# Attributes put back whenever they are rebound, whatever they hold.
ALWAYS_RESTORED = HOOK_CONTAINERS | {"custom_exceptions"}
MAX_OBJECTS = 400
_MISSING = object()


class TamperingBlocked(RuntimeError):
    """Raised in student code that tries what the grading kernel does not allow."""


def is_code(value) -> bool:
    """Return True for what can run: functions, methods, classes, descriptors of code, modules, callables."""
    return callable(value) or isinstance(value, (staticmethod, classmethod, property, types.ModuleType))


def _label(owner) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    if isinstance(owner, type):
        return owner.__qualname__
    return type(owner).__name__


def _in_path(module_name: str | None) -> bool:
    root = (module_name or "").split(".", 1)[0] if isinstance(module_name, str) else ""
    return root in PATH_PACKAGES


def _transport(module_name: str) -> bool:
    """Return True for the message transport and event loop, whose objects change state as they run."""
    return module_name.split(".", 1)[0] in TRANSPORT_PACKAGES


def _runs_cells(function) -> bool:
    """Return True for a function of the execution path (or of this guard), whose code must not change."""
    if not isinstance(function, types.FunctionType):
        return False
    return function.__globals__ is globals() or _in_path(function.__globals__.get("__name__"))


@dataclass(frozen=True)
class Change:
    """One difference from the pristine execution path, already undone."""

    where: str  # e.g. "InteractiveShell.run_cell", "sys.settrace", "EventManager.callbacks['pre_run_cell']"
    what: str  # "replaced", "added", "removed", "changed"
    benign: bool = False  # only what libraries register on their own (matplotlib's inline backend)

    def to_json(self) -> dict:
        """Return the change as a JSON-ready dict."""
        return {"where": self.where, "what": self.what, "benign": self.benign}


@dataclass
class _Slot:
    """The pristine content of one attribute dictionary (an object's, a class's or a module's)."""

    owner: object
    label: str
    values: dict  # name -> pristine value
    contents: dict  # name -> shallow copy of a hook list or dict, compared element by element
    klass: type | None = None  # the owner's class, for objects (a changed __class__ is put back)
    module: bool = False

    @classmethod
    def of(cls, owner, namespace: dict, label: str, module: bool = False, instance: bool = False) -> "_Slot":
        """Record a namespace as it is now."""
        values = dict(namespace)
        contents = {}
        for name in HOOK_CONTAINERS & values.keys():
            value = values[name]
            if type(value) in (list, set):
                contents[name] = tuple(value)
            elif type(value) is dict:
                contents[name] = {k: tuple(v) if type(v) is list else v for k, v in value.items()}
        return cls(owner, label, values, contents, type(owner) if instance else None, module)


def _namespace(owner) -> dict | None:
    try:
        space = object.__getattribute__(owner, "__dict__")
    except (AttributeError, TypeError):
        return None
    return space if isinstance(space, (dict, types.MappingProxyType)) else None


@dataclass
class Snapshot:
    """The pristine execution path of one kernel, and how to put it back."""

    slots: list[_Slot] = field(default_factory=list)
    objects: frozenset = frozenset()  # ids of the execution-path objects (rebinding one is put back)
    sys_hooks: dict = field(default_factory=dict)
    trace: object = None
    profile: object = None

    @classmethod
    def take(cls, *roots) -> "Snapshot":
        """Record the execution path reachable from `roots` (the shell and the kernel)."""
        snap = cls()
        objects = _reachable(roots)
        for obj in objects:
            _materialise_traits(obj)
        snap.objects = frozenset(id(obj) for obj in objects)
        classes = {}
        for obj in objects:
            for klass in type(obj).__mro__:
                if _in_path(klass.__module__) and id(klass) not in classes:
                    classes[id(klass)] = klass
        for obj in objects:
            space = _namespace(obj)
            if space is not None:
                snap.slots.append(_Slot.of(obj, space, _label(obj), instance=True))
            traits = space.get("_trait_values") if space is not None else None
            if type(traits) is dict:
                snap.slots.append(_Slot.of(traits, traits, _label(obj)))
        for klass in classes.values():
            snap.slots.append(_Slot.of(klass, dict(klass.__dict__), klass.__qualname__))
        for name, module in sorted(sys.modules.items()):
            if isinstance(module, types.ModuleType) and (_in_path(name) or name == "builtins"):
                snap.slots.append(_Slot.of(module, module.__dict__, name, module=True))
        snap.sys_hooks = {name: getattr(sys, name, None) for name in SYS_HOOKS}
        snap.trace, snap.profile = sys.gettrace(), sys.getprofile()
        return snap

    def restore(self) -> list[Change]:
        """Put the pristine execution path back; return what had changed."""
        changes: list[Change] = []
        self._restore_interpreter(changes)
        for slot in self.slots:
            _restore_slot(slot, changes, self.objects)
        return changes

    def _restore_interpreter(self, changes: list[Change]) -> None:
        if sys.gettrace() is not self.trace:
            sys.settrace(self.trace)
            changes.append(Change("sys.settrace", "set"))
        if sys.getprofile() is not self.profile:
            sys.setprofile(self.profile)
            changes.append(Change("sys.setprofile", "set"))
        for name, value in self.sys_hooks.items():
            if getattr(sys, name, None) is not value:
                setattr(sys, name, value)
                changes.append(Change(f"sys.{name}", "replaced"))


def _materialise_traits(obj) -> None:
    """Create the lazily made default of every trait of an IPython object, so it is in the snapshot."""
    names = getattr(obj, "trait_names", None)
    if not callable(names) or not _in_path(type(obj).__module__):
        return
    for name in names():
        try:
            getattr(obj, name)
        except Exception:  # noqa: BLE001, S112  (a default that cannot be made now is made later, and seen then)
            continue


def _reachable(roots) -> list:
    """Return the roots and the execution-path objects their attributes hold, two levels deep."""
    seen: dict[int, object] = {}
    frontier = list(roots)
    for _depth in range(3):
        found = []
        for obj in frontier:
            if id(obj) in seen or len(seen) >= MAX_OBJECTS:
                continue
            seen[id(obj)] = obj
            space = _namespace(obj) or {}
            values = list(space.values())
            traits = space.get("_trait_values")
            if type(traits) is dict:
                values += list(traits.values())
            for value in values:
                kind = type(value)
                if (not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType,
                                           threading.Thread))
                        and _in_path(kind.__module__) and not _transport(kind.__module__)
                        and kind.__name__ not in RESULT_TYPES):
                    found.append(value)
        frontier = found
    return list(seen.values())


def _set(slot: _Slot, name: str, value) -> None:
    if slot.module or type(slot.owner) is dict:
        space = slot.owner.__dict__ if slot.module else slot.owner
        space[name] = value
    else:
        type.__setattr__(slot.owner, name, value) if isinstance(slot.owner, type) else object.__setattr__(
            slot.owner, name, value)


def _delete(slot: _Slot, name: str) -> None:
    if slot.module or type(slot.owner) is dict:
        space = slot.owner.__dict__ if slot.module else slot.owner
        space.pop(name, None)
    elif isinstance(slot.owner, type):
        type.__delattr__(slot.owner, name)
    else:
        object.__delattr__(slot.owner, name)


def _restore_slot(slot: _Slot, changes: list[Change], objects: frozenset) -> None:
    """Undo replaced, added and removed code in one namespace, and changed hook lists."""
    if slot.klass is not None and type(slot.owner) is not slot.klass:
        object.__setattr__(slot.owner, "__class__", slot.klass)
        changes.append(Change(f"{slot.label}.__class__", "replaced"))
    current = slot.owner.__dict__ if slot.module else (slot.owner if type(slot.owner) is dict
                                                        else _namespace(slot.owner))
    if current is None:
        return
    shadows_builtins = slot.module and slot.label != "builtins"
    for name in [n for n in current if n not in slot.values]:
        value = current[name]
        if (is_code(value) and not slot.module) or (shadows_builtins and name in builtins.__dict__):
            _delete(slot, name)
            changes.append(Change(f"{slot.label}.{name}", "added"))
    for name, pristine in slot.values.items():
        value = current.get(name, _MISSING)
        if value is not pristine:
            important = is_code(pristine) or name in ALWAYS_RESTORED or id(pristine) in objects
            if not (important or (value is not _MISSING and is_code(value))):
                continue
            _set(slot, name, pristine)
            changes.append(Change(f"{slot.label}.{name}", "removed" if value is _MISSING else "replaced"))
            value = pristine
        saved = slot.contents.get(name)
        if saved is not None:
            changes += _restore_contents(f"{slot.label}.{name}", value, saved)


def _restore_contents(where: str, value, saved) -> list[Change]:
    """Put a hook list (or a dict of them) back as it was; return one change per key that differed."""
    if type(saved) is tuple:
        return [Change(where, "changed", _library_code(added))] if (added := _put_back_list(value, saved)) else []
    changes = []
    for key in [k for k in value if k not in saved]:
        extra = value.pop(key)
        changes.append(Change(f"{where}[{key!r}]", "added", _library_code(extra if type(extra) is list else [extra])))
    for key, old in saved.items():
        new = value.get(key, _MISSING)
        if type(old) is tuple and type(new) is list:
            if added := _put_back_list(new, old):
                changes.append(Change(f"{where}[{key!r}]", "changed", _library_code(added)))
        elif new is not old:
            value[key] = old
            changes.append(Change(f"{where}[{key!r}]", "replaced"))
    return changes


def _put_back_list(value, saved: tuple) -> list | None:
    """Give a list or set its pristine elements again; return what had been added (None when unchanged)."""
    items = list(value)
    if len(items) == len(saved) and all(a is b for a, b in zip(items, saved, strict=True)):
        return None
    known = {id(x) for x in saved}
    if type(value) is set:
        value.clear()
        value.update(saved)
    else:
        value[:] = saved
    return [x for x in items if id(x) not in known]


def _library_code(added: list) -> bool:
    """Return True when everything added is a function that a library module defines (not student code)."""
    return bool(added) and all(_defined_by_library(x) for x in added)


def _defined_by_library(function) -> bool:
    target = getattr(function, "__func__", function)
    module_name = getattr(target, "__module__", None)
    if not isinstance(target, types.FunctionType) or not isinstance(module_name, str):
        return False
    if module_name.split(".", 1)[0] not in LIBRARY_CALLBACKS:
        return False
    found = sys.modules.get(module_name)
    for part in target.__qualname__.split("."):
        found = getattr(found, part, None)
    return getattr(found, "__func__", found) is target


# --- the channel to the grader ---------------------------------------------------------------------------


class Channel:
    """Where the kernel writes its records for the grader: one JSON object per line."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: str | None) -> "Channel":
        """Open the grader's FIFO for writing and unlink it, so that nobody else can open it."""
        if not path:
            return cls(None)
        fd = os.open(path, os.O_WRONLY)
        os.unlink(path)
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 700)  # out of the way of the kernel's own descriptors
        os.close(fd)
        return cls(high)

    def write(self, record: dict) -> None:
        """Send one record (silently dropped when the grader is gone)."""
        if self.fd is None:
            return
        try:
            os.write(self.fd, (json.dumps(record) + "\n").encode())
        except OSError:
            self.fd = None


# --- the guard ---------------------------------------------------------------------------------------------


class Guard:
    """Restores the execution path around every message, blocks what it cannot restore, reports the rest."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.snapshot: Snapshot | None = None
        self.testing = False  # a graded test cell is running
        self.quiet = False  # the guard itself is restoring: its own settrace calls are not tampering
        self.findings: list[str] = []
        self.pending: list[Change] = []

    def audit(self, event: str, args: tuple) -> None:
        """The audit hook: block in-place code changes always, tracing during tests; note the rest."""
        if event == "object.__setattr__" and len(args) >= 2 and args[1] in ALWAYS_BLOCKED:
            if self.snapshot is not None and _runs_cells(args[0]):
                self._note(ALWAYS_BLOCKED[args[1]])
                raise TamperingBlocked(f"the grader does not allow changing {args[1]} of a function")
        elif event in BLOCKED_IN_TESTS:
            if self.testing and not self.quiet:
                self._note(BLOCKED_IN_TESTS[event])
                raise TamperingBlocked("the grader does not allow tracing hooks while a test runs")
        elif event in REPORTED and self.snapshot is not None:
            self._note(REPORTED[event])

    def _note(self, finding: str) -> None:
        if finding not in self.findings and len(self.findings) < 50:
            self.findings.append(finding)

    def restore(self) -> list[Change]:
        """Put the pristine path back (with the guard's own hook calls not counted)."""
        if self.snapshot is None:
            return []
        self.quiet = True
        try:
            return self.snapshot.restore()
        finally:
            self.quiet = False

    def before(self) -> None:
        """Before any message: restore, and keep what changed for the next report."""
        self.pending += self.restore()

    def run_execute(self, execute_request):
        """Wrap the kernel's execute_request handler with the guard's records."""

        @functools.wraps(execute_request)
        async def guarded_execute_request(stream, ident, parent):
            header = parent.get("header", {}) if isinstance(parent, dict) else {}
            meta = parent.get("metadata") or {} if isinstance(parent, dict) else {}
            msg_id = str(header.get("msg_id", ""))
            # Restored again here, not only in shell_main: a "before" record must be true of this very request,
            # even if code reached the handler some other way.
            self.pending += self.restore()
            self.channel.write({"msg_id": msg_id, "phase": "before",
                                "changes": [c.to_json() for c in self.pending], "findings": self.findings})
            self.pending, self.findings = [], []
            self.testing = bool((meta.get(GRADER_KEY) or {}).get("test")) if isinstance(meta, dict) else False
            try:
                await execute_request(stream, ident, parent)
            finally:
                self.testing = False
                changes = self.restore()
                self.channel.write({"msg_id": msg_id, "phase": "after", "changes": [c.to_json() for c in changes],
                                    "findings": self.findings})
                self.findings = []

        return guarded_execute_request

    def install(self, kernel) -> None:
        """Route the kernel's shell messages through the guard (the pristine path is recorded at the first one)."""
        shell_main = kernel.shell_main

        execute_request = kernel.shell_handlers["execute_request"]

        @functools.wraps(shell_main)
        async def guarded_shell_main(subshell_id, msg):
            if self.snapshot is None:  # the first message (kernel_info): the kernel is fully started
                await warm_up(kernel, execute_request)
                self.snapshot = Snapshot.take(kernel.shell, kernel, sys.stdout, sys.stderr)
            self.before()
            await shell_main(subshell_id, msg)

        kernel.shell_main = guarded_shell_main
        kernel.shell_handlers["execute_request"] = self.run_execute(execute_request)


class _NullStream:
    """Swallows the reply to the guard's own warm-up cell."""

    def send_multipart(self, *args, **kwargs) -> None:
        """Send nothing."""


async def warm_up(kernel, execute_request) -> None:
    """Run one silent, empty cell, so that what the kernel sets up lazily is in place before the snapshot."""
    content = {"code": "pass", "silent": True, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": False}
    await execute_request(_NullStream(), [], kernel.session.msg("execute_request", content))


def main(argv: list[str] | None = None) -> None:
    """Start an IPython kernel guarded as above: `grading_kernel.py [--channel FIFO] -f CONNECTION_FILE`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    channel_path = None
    if "--channel" in argv:
        at = argv.index("--channel")
        channel_path = argv[at + 1]
        del argv[at:at + 2]
    if sys.path and os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0] or "."):
        del sys.path[0]  # this script's folder is the kernel's runtime folder, not a place to import from
    guard = Guard(Channel.open(channel_path))
    sys.addaudithook(guard.audit)
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(argv)
    guard.install(app.kernel)
    app.start()


if __name__ == "__main__":
    main()
