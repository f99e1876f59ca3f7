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
3. *Seal.* Only the audit hook holds the guard's state: the kernel's message handlers reach it by raising
   audit events (checked to come from those handlers), so no closure, frame or global that student code can
   walk to leads to it, and before it acts the hook puts the guard's own module, classes and the builtins it
   uses back.
4. *Report.* After every cell it compares again and writes what changed to a channel that only the grader
   reads (a FIFO opened before any student code and unlinked at once), each line signed with a key sent as the
   first line; a look into the interpreter's internals by student code (the garbage collector, frames outside
   its own, ctypes, the process's memory) is written the moment it happens, before it can be used.
5. *Trace tests.* While a graded test cell's code runs (from IPython's `exec` of it: reading and compiling
   the cell go through hooks restored before it), a trace function reports student code that the test's lines
   run without naming it (an `__eq__` or `__class__` of a returned object, a stand-in `torch`, a shadowed
   builtin) or that IPython runs on its own (a custom exception handler that swallows the test's error).
   The grader flags every report and fails the test cells it cannot confirm (see execution.py).

Runs inside the sandbox as a plain script next to the kernel's connection file, with the standard library and
ipykernel only. In-process defences have limits; README "Grading a class" says which.
"""

import ast
import builtins
import fcntl
import functools
import hashlib
import marshal
import os
import re
import sys
import tempfile
import threading
import types
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_ as _is

GRADER_KEY = "devicelab_grader"  # execute_request metadata: {"test": true} for graded test cells
# Where the code that runs a cell comes from: everything in them is part of the execution path.
PATH_PACKAGES = ("IPython", "ipykernel", "jupyter_client", "comm", "traitlets", "zmq", "tornado", "asyncio",
                 "ast", "codeop", "traceback", "linecache", "threading", "contextlib", "json")
# Results of running cells, not part of how cells run.
RESULT_TYPES = ("ExecutionResult", "ExecutionInfo")
SYS_HOOKS = ("excepthook", "displayhook", "breakpointhook", "unraisablehook", "stdout", "stderr", "stdin")
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
# Their modules are part of the path, their objects (sockets, loops, threads) are not compared.
TRANSPORT_PACKAGES = ("zmq", "tornado", "asyncio", "threading")
# Attributes that hold hooks: their contents are compared and put back, element by element.
HOOK_CONTAINERS = frozenset({"input_transformers_post", "ast_transformers", "callbacks", "cleanup_transforms",
                             "line_transforms", "token_transformers", "shell_handlers", "control_handlers",
                             "_post_execute"})
# Libraries whose own functions may register IPython callbacks (`%matplotlib inline`): put back, not flagged.
LIBRARY_CALLBACKS = ("matplotlib_inline", "matplotlib", "IPython", "ipykernel", "ipywidgets")
# Attributes put back whenever they are rebound, whatever they hold.
ALWAYS_RESTORED = HOOK_CONTAINERS | {"custom_exceptions", "user_ns", "user_module"}
MAX_OBJECTS = 400
# The builtins the guard's own code calls: put back before it runs, whatever student code did to them.
GUARD_BUILTINS = ("len", "isinstance", "type", "id", "list", "tuple", "dict", "set", "frozenset", "str",
                  "bool", "getattr", "callable", "any", "all", "sorted", "vars", "compile", "object", "super",
                  "zip", "range", "hasattr", "iter", "next", "repr", "staticmethod", "classmethod",
                  "property", "map")
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
    names: tuple = ()  # the names of `values`, and their values in the same order (for the quick check)
    pristine: tuple = ()

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
        return cls(owner, label, values, contents, type(owner) if instance else None, module,
                   tuple(values), tuple(values.values()))


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
        for klass in [*classes.values(), *_transport_classes(classes)]:
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


def _transport_classes(known: dict) -> list[type]:
    """Return the classes the message transport defines (zmq's sockets and streams): their code is path too.
    """
    found = []
    for name, module in sorted(sys.modules.items()):
        if not (isinstance(module, types.ModuleType) and name.split(".", 1)[0] == "zmq"):
            continue
        for value in list(vars(module).values()):
            if (isinstance(value, type) and id(value) not in known
                    and getattr(value, "__module__", "") == name and value not in found):
                found.append(value)
    return found


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
    # Most namespaces are as they were: the same size, and every name still holds its very object (compared by
    # identity, in C, calling nothing of what the namespace holds). Only the others are gone through.
    if len(current) != len(slot.names) or not all(map(_is, map(current.get, slot.names, repeat(_MISSING)),
                                                          slot.pristine)):
        _undo_changes(slot, current, changes, objects)
    for name, saved in slot.contents.items():
        changes += _restore_contents(f"{slot.label}.{name}", slot.values[name], saved)


def _undo_changes(slot: _Slot, current, changes: list[Change], objects: frozenset) -> None:
    """Put back the code a namespace lost, gained or had replaced (hook lists are always put back)."""
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


def _restore_contents(where: str, value, saved) -> list[Change]:
    """Put a hook list (or a dict of them) back as it was; return one change per key that differed."""
    if type(saved) is tuple:
        return ([Change(where, "changed", _library_code(added))]
                if (added := _put_back_list(value, saved)) else [])
    changes = []
    for key in [k for k in value if k not in saved]:
        extra = value.pop(key)
        changes.append(Change(f"{where}[{key!r}]", "added",
                              _library_code(extra if type(extra) is list else [extra])))
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
    """Where the kernel writes its records for the grader: one signed line per record.

    The first line, written before any student code runs, gives the grader a fresh key; every later line is
    `MAC HEX` (a keyed BLAKE2b of the marshalled record, then the record), so a line written by anything that
    does not hold the key is seen as forged. The key and the writing functions are bound here at start.
    """

    def __init__(self, fd: int | None, key: bytes = b"") -> None:
        self.fd = fd
        self._key = key
        self._write, self._dumps, self._mac = os.write, marshal.dumps, hashlib.blake2b

    @classmethod
    def open(cls, path: str | None) -> "Channel":
        """Open the grader's FIFO for writing, unlink it (nobody else can open it), and send the key."""
        if not path:
            return cls(None)
        fd = os.open(path, os.O_WRONLY)
        os.unlink(path)
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 700)  # out of the way of the kernel's own descriptors
        os.close(fd)
        channel = cls(high, os.urandom(32))
        os.write(high, b"key " + channel._key.hex().encode() + b"\n")
        return channel

    def write(self, record: dict) -> None:
        """Send one record (silently dropped when the grader is gone or the record cannot be encoded)."""
        if self.fd is None:
            return
        try:
            payload = self._dumps(record)
            mac = self._mac(payload, key=self._key, digest_size=16).hexdigest()
            self._write(self.fd, (mac + " " + payload.hex() + "\n").encode())
        except (OSError, ValueError):
            self.fd = None


# --- the guard ---------------------------------------------------------------------------------------------

GUARD_EVENT = "devicelab.guard"  # raised by the kernel's message handlers (the triggers below) only
TRACE_EVENT = "devicelab.guard.trace"  # raised by the guard's own tracer during graded test cells
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


def _test_names(source: str) -> tuple[frozenset, frozenset]:
    """Return the names a test cell's code reads (as variables) and the attributes it reads, nested code
    included.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset(), frozenset()
    variables, attributes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            variables.add(node.id)
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
    return frozenset(variables), frozenset(attributes)


def _runs_code(source: str) -> bool:
    """Return True for a cell of Python with statements: IPython runs it through `exec` (or `eval`), which
    raise the audit event the tracer starts at. (Cells Python cannot parse, IPython's own syntax among them,
    are not checked.)"""
    try:
        return bool(ast.parse(source).body)
    except (SyntaxError, ValueError):
        return False


def _allowed_codes(names: frozenset, ns: dict) -> frozenset:
    """Return the code a test may call by name: functions it names, and the methods of classes it names."""
    codes = set()
    for name in names:
        value = ns.get(name)
        if name in builtins.__dict__:
            continue  # a builtin the notebook shadows is not an answer
        if isinstance(value, types.FunctionType):
            codes.add(value.__code__)
        elif value is not None and not isinstance(value, (type, types.ModuleType)):
            # an instance the notebook made before the test: it may be called
            for klass in type(value).__mro__:
                call = vars(klass).get("__call__")
                if isinstance(call, types.FunctionType):
                    codes.add(call.__code__)
                    break
        if isinstance(value, type):
            for klass in value.__mro__:
                for member in vars(klass).values():
                    member = getattr(member, "__func__", member)
                    for part in (member, getattr(member, "fget", None), getattr(member, "fset", None)):
                        if isinstance(part, types.FunctionType):
                            codes.add(part.__code__)
    return frozenset(codes)


def library_roots() -> tuple:
    """Return the folders whose code is a library's, not a student's: Python's, the venv's, editable
    installs'.
    """
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.abspath(__file__), "<grading-kernel>",
             "<frozen "}
    for name, module in list(sys.modules.items()):
        mapping = getattr(module, "MAPPING", None) if name.startswith("__editable__") else None
        if isinstance(mapping, dict):
            roots.update(str(path) for path in mapping.values())
    return tuple(sorted(root for root in roots if root))


def is_students(space: dict, ns, roots: tuple, kinds: dict) -> bool:
    """Return True for code whose globals are the notebook's, or a module not in a library folder."""
    if space is ns:
        return True
    known = kinds.get(id(space))
    if known is not None and known[0] is space:
        return known[1]
    where = space.get("__file__")
    kind = not (type(where) is str and where.startswith(roots)) and not _namedtuple_space(space)
    kinds[id(space)] = (space, kind)  # kept alive with it, so that its id is never another's
    return kind


def _namedtuple_space(space: dict) -> bool:
    """Return True for the namespace `collections.namedtuple` makes its `__new__` in (no builtins, no other
    name).
    """
    return (set(space) <= {"_tuple_new", "__builtins__", "__name__"}
            and space.get("_tuple_new") is tuple.__new__
            and space.get("__builtins__") == {})


def make_tracer(ns: dict, machinery: frozenset, test_file: list, methods: frozenset, allowed: frozenset,
                roots: tuple = (), report=None):
    """Return the global trace function of one graded test cell: it reports student code the test did not
    call.

    Student code (from answer cells, or from a module of the student's own) that runs straight from the test's
    own lines but is not named by them (an `__eq__`, a `__class__` property, a stand-in `torch.equal`, a
    shadowed builtin), or straight from IPython's own machinery (a custom exception handler, a replaced
    `showtraceback`), is reported.
    """
    report = report or functools.partial(sys.audit, TRACE_EVENT)
    kinds: dict = {}

    def tracer(frame, event, arg):
        space = frame.f_globals  # (is_students' answer for a namespace seen before, without calling it)
        if space is not ns:
            known = kinds.get(id(space))
            if known is None or known[0] is not space:
                if not is_students(space, ns, roots, kinds):
                    return
            elif not known[1]:
                return
        caller = frame.f_back
        if caller is None:
            return
        code, where = frame.f_code, test_file[0]
        if caller.f_globals is ns:
            if caller.f_code.co_filename != where or code.co_filename == where or code in allowed:
                return
            if (code.co_name in methods and not code.co_name.startswith("__")
                    and _on_students(frame, ns, roots, kinds)):
                return
            report(f"the test called code from an answer cell that it does not name ({code.co_name})")
        elif id(caller.f_globals) in machinery and code.co_filename != where:
            report(f"IPython ran code from an answer cell while a test ran ({code.co_name})")
        return

    return tracer


def _on_students(frame, ns: dict, roots: tuple, kinds: dict) -> bool:
    """Return True when a called function is a method of an object whose class is the student's own."""
    code = frame.f_code
    if code.co_argcount < 1:
        return False
    klass = type(frame.f_locals.get(code.co_varnames[0]))
    module = sys.modules.get(getattr(klass, "__module__", None) or "")
    return module is None or is_students(vars(module), ns, roots, kinds)


class Guard:
    """Restores the execution path around every message, blocks what it cannot restore, reports the rest.

    Only the audit hook holds the guard (see `arm`): the kernel's handlers reach it by raising audit events,
    so no object student code can walk to (a handler's closure, a frame's locals) holds its state.
    """

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
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
            if self.snapshot is not None and _runs_cells(args[0]):
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
        frame, own = caller, globals()
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if frame.f_globals is not own and not (type(name) is str and name.split(".", 1)[0] in passing):
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
        self.roots = library_roots()
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
            self.testing = bool(grader.get("test")) if isinstance(grader, dict) else False
            if self.testing:
                self._start_test(str((parent.get("content") or {}).get("code", "")))
            return
        if self.testing:
            self._stop_test()
        self.testing = False
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
        self.test_file = [None]
        self.test_runs_code = _runs_code(source)
        self.tracer = make_tracer(self.ns, self.machinery, self.test_file, attributes,
                                  _allowed_codes(names, self.ns), self.roots)
        self.tracer_cells = tuple((c, c.cell_contents) for c in self.tracer.__closure__ or ())

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


# --- the guard's own integrity -----------------------------------------------------------------------------


def _repairer(spaces: list):
    """Return a function that puts the guard's own namespaces back as they are now; True when it had to."""
    saved = [(space, tuple(space.items()), len(space)) for space in spaces]
    clear, update, get = dict.clear, dict.update, dict.get

    def repair() -> bool:
        repaired = False
        for space, items, size in saved:
            same = len(space) == size
            if same:
                for key, value in items:
                    if get(space, key, _MISSING) is not value:
                        same = False
                        break
            if not same:
                clear(space)
                update(space, items)
                repaired = True
        return repaired

    return repair


def _builtins_repairer(names: tuple):
    """Return a function that puts back the builtins the guard's code uses; True when it had to."""
    space = builtins.__dict__
    saved = tuple((name, space[name]) for name in names)
    get = dict.get

    def repair() -> bool:
        repaired = False
        for name, value in saved:
            if get(space, name, _MISSING) is not value:
                space[name] = value
                repaired = True
        return repaired

    return repair


def _class_repairer(classes: list):
    """Return a function that puts the guard's own classes' attributes back; True when it had to."""
    saved = [(klass, tuple(vars(klass).items())) for klass in classes]
    set_attr, del_attr = type.__setattr__, type.__delattr__

    def repair() -> bool:
        repaired = False
        for klass, items in saved:
            space = vars(klass)
            if len(space) != len(items) or any(space.get(k, _MISSING) is not v for k, v in items):
                for key in [k for k in space if k not in dict(items)]:
                    del_attr(klass, key)
                for key, value in items:
                    if (key not in ("__dict__", "__weakref__", "__doc__")
                            and space.get(key, _MISSING) is not value):
                        set_attr(klass, key, value)
                repaired = True
        return repaired

    return repair


TRIGGERS = """
async def guarded_shell_main(subshell_id, msg):
    if _first:
        _first.clear()
        await _warm_up(_kernel, _execute_request)
        _audit(_EVENT, "setup", _kernel)
    _audit(_EVENT, "message", None)
    return await _shell_main(subshell_id, msg)


async def guarded_execute_request(stream, ident, parent):
    _audit(_EVENT, "before", parent)
    try:
        return await _execute_request(stream, ident, parent)
    finally:
        _audit(_EVENT, "after", parent)
"""


def arm(channel_path: str | None):
    """Install the guard's audit hook; return `install(kernel)`, which routes the kernel's messages through
    it.

    The hook first puts the guard's own module, classes and `builtins` back, with functions bound here, so
    that nothing student code changed in them is used; only then does it run the guard's code.
    """
    guard = Guard(Channel.open(channel_path))
    repair_globals = _repairer([globals()])
    repair_builtins = _builtins_repairer(GUARD_BUILTINS)
    repair_classes = _class_repairer([Guard, Snapshot, _Slot, Change, Channel])
    getframe, audit, watched, busy = sys._getframe, Guard.audit, WATCHED, [False]
    trigger_space: dict = {}

    def hook(event, args):
        if busy[0]:
            return
        if event not in watched:
            if not event.startswith("ctypes."):
                return
        elif event == "object.__getattr__":  # (the names of audited reads are exact strings)
            if len(args) < 2 or args[1] != "__code__":
                return
        elif event == "open" and (not args or type(args[0]) is not str or not args[0].startswith("/proc/")):
            return
        busy[0] = True
        try:
            tampered = repair_builtins() | repair_globals() | repair_classes() | (
                event == GUARD_EVENT and repair_triggers[0]())
            if tampered and guard.snapshot is not None:
                guard._alarm("changes the grader's own code")
            audit(guard, event, args, getframe(1))
        finally:
            busy[0] = False

    repair_triggers = [lambda: False]
    sys.addaudithook(hook)

    def install(kernel) -> None:
        trigger_space.update({"__builtins__": {}, "__file__": "<grading-kernel>", "_audit": sys.audit,
                              "_EVENT": GUARD_EVENT, "_first": [True],
                              "_kernel": kernel, "_warm_up": warm_up, "_shell_main": kernel.shell_main,
                              "_execute_request": kernel.shell_handlers["execute_request"]})
        exec(compile(TRIGGERS, "<grading-kernel>", "exec"), trigger_space)  # noqa: S102  (our own source)
        shell_main, execute_request = (trigger_space["guarded_shell_main"],
                                       trigger_space["guarded_execute_request"])
        guard.triggers = frozenset({shell_main.__code__, execute_request.__code__})
        repair_triggers[0] = _repairer([trigger_space])
        kernel.shell_main = shell_main
        kernel.shell_handlers["execute_request"] = execute_request

    return install


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
    # IPython's profile (config files, startup scripts, extensions) lives in HOME, which student code of an
    # earlier notebook could write: this kernel reads a fresh, empty one instead.
    os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="ipython-")
    install = arm(channel_path)
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(argv)
    while "" in sys.path:  # nothing is imported from the notebook's folder until the snapshot is taken
        sys.path.remove("")
    install(app.kernel)
    del install  # this frame stays on the stack while cells run: it holds nothing that leads to the guard
    app.start()


if __name__ == "__main__":
    main()
