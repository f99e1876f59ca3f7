"""What the guard records and puts back: the execution path, by identity (layer 1 of the grading kernel).

The shell, the kernel and the objects they run cells with (their attributes and hook lists), their classes,
the modules those come from and `builtins`, and the interpreter's hooks: recorded once the kernel has started
(`Snapshot.take`), put back before every message it handles (`Snapshot.restore`), each difference a `Change`.
"""

import builtins
import sys
import threading
import types
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_ as _is

# Where the code that runs a cell comes from: everything in them is part of the execution path.
PATH_PACKAGES = ("IPython", "ipykernel", "jupyter_client", "comm", "traitlets", "zmq", "tornado", "asyncio",
                 "ast", "codeop", "traceback", "linecache", "threading", "contextlib", "json")
# The course's own packages (sandbox.STUDENT_PACKAGES): the helpers a graded test judges with. Their modules,
# and the classes they define, are restored like the path; the kernel imports those the instructor's set-up
# cells name before the snapshot is taken (kernel.py), so no student code ran before they were recorded.
COURSE_PACKAGES = ("devicelab",)
# Results of running cells, not part of how cells run.
RESULT_TYPES = ("ExecutionResult", "ExecutionInfo")
SYS_HOOKS = ("excepthook", "displayhook", "breakpointhook", "unraisablehook", "stdout", "stderr", "stdin")
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
_MISSING = object()


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


def _in_course(module_name: str) -> bool:
    return module_name.split(".", 1)[0] in COURSE_PACKAGES


def _transport(module_name: str) -> bool:
    """Return True for the message transport and event loop, whose objects change state as they run."""
    return module_name.split(".", 1)[0] in TRANSPORT_PACKAGES


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
    course: bool = False  # a course module's or class's: every rebound value is put back, not only code

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
    course: dict = field(default_factory=dict)  # name -> slot of each of the course's modules
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
            elif isinstance(module, types.ModuleType) and _in_course(name):
                snap.course[name] = slot = _Slot.of(module, module.__dict__, name, module=True)
                slot.course = True
                snap.slots.append(slot)
                for value in list(vars(module).values()):
                    if isinstance(value, type) and value.__module__ == name:
                        klass = _Slot.of(value, dict(value.__dict__), f"{name}.{value.__qualname__}")
                        klass.course = True
                        snap.slots.append(klass)
        snap.sys_hooks = {name: getattr(sys, name, None) for name in SYS_HOOKS}
        snap.trace, snap.profile = sys.gettrace(), sys.getprofile()
        return snap

    def recorded(self, module: str, attribute: str | None = None):
        """Return a course module as recorded (or its attribute `attribute`); _MISSING when not recorded."""
        slot = self.course.get(module)
        if slot is None:
            return _MISSING
        return slot.owner if attribute is None else slot.values.get(attribute, _MISSING)

    def restore(self) -> list[Change]:
        """Put the pristine execution path back; return what had changed."""
        changes: list[Change] = []
        self._restore_interpreter(changes)
        for name, slot in self.course.items():  # a module swapped in sys.modules is not the one recorded
            if sys.modules.get(name) is not slot.owner:
                sys.modules[name] = slot.owner
                changes.append(Change(f"sys.modules[{name!r}]", "replaced"))
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
            important = slot.course or is_code(pristine) or name in ALWAYS_RESTORED or id(pristine) in objects
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

