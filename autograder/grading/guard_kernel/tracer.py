"""Tracing a graded test cell: student code that the test runs without naming it is reported (layer 5)."""

import ast
import builtins
import functools
import os
import sys
import types

TRACE_EVENT = "devicelab.guard.trace"  # raised by the guard's own tracer during graded test cells


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


def _bound_names(source: str) -> dict:
    """Return the names a cell's code binds at its top level, each with where an import takes it from:
    (module, attribute) for `from module import attribute`, (module, None) for `import module`, None for
    what it assigns or defines."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = alias.name if alias.asname else alias.name.split(".", 1)[0]
                names[alias.asname or module] = (module, None)
        elif isinstance(node, ast.ImportFrom):
            module = node.module if node.module and not node.level else None
            names.update({alias.asname or alias.name: module and (module, alias.name)
                          for alias in node.names if alias.name != "*"})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update((n.id, None) for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


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


def library_roots(own: tuple = ()) -> tuple:
    """Return the folders whose code is a library's, not a student's: Python's, the venv's, editable
    installs', and the files of the guard's own code (`own`: its modules and the program that started it).
    """
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.abspath(__file__), *own,
             "<grading-kernel>", "<frozen "}
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

