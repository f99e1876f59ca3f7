"""The guard's own integrity: the audit hook that holds the guard, and puts its code back before it acts
(layer 3)."""

import builtins
import sys

from .grader_channel import Channel
from .guard import GUARD_EVENT, WATCHED, Guard, own_spaces
from .snapshot import _MISSING, Change, Snapshot, _Slot

# The builtins the guard's own code calls: put back before it runs, whatever student code did to them.
GUARD_BUILTINS = ("len", "isinstance", "type", "id", "list", "tuple", "dict", "set", "frozenset", "str",
                  "bool", "getattr", "callable", "any", "all", "sorted", "vars", "compile", "object", "super",
                  "zip", "range", "hasattr", "iter", "next", "repr", "staticmethod", "classmethod",
                  "property", "map")


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


def arm(channel_path: str | None, program: dict | None = None):
    """Install the guard's audit hook; return `install(kernel)`, which routes the kernel's messages through
    it.

    The hook first puts the guard's own modules (every module of this package, and `program`, the namespace
    of the script that started the kernel), classes and `builtins` back, with functions bound here, so that
    nothing student code changed in them is used; only then does it run the guard's code.
    """
    own = own_spaces(*([] if program is None else [program]))
    guard = Guard(Channel.open(channel_path), own)
    repair_globals = _repairer(own)
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

