"""Out-of-process test cells: the grader runs the test's code itself, calling the student's functions in the
kernel with plain data across.

A test cell the instructor tags `out-of-process` (a cell tag, as `requires-cuda` is) in the source notebook
is never sent to the kernel. The grader (execution.py) runs the instructor's code of that
cell from the source notebook, in a namespace made from the notebook's locked set-up cells (the imports),
also from the source notebook, run here; every other name the test reads becomes a `StudentFunction`. While
the test runs, the kernel runs one request of the grader's (`serve_code`): a loop that asks for the next call
with `input()` (the kernel's stdin channel, which only the grader answers), calls the student's function
(KERNEL_SIDE) and prints what it returned, or the exception it raised, as plain data on a line of its own
after a marker the grader chose. Calling a `StudentFunction` sends its name and arguments (plain_data.py) as
the answer to that `input()`. (One request per test cell, not one per call: the guard's work around each
request is paid once.) So
nothing the student's code does in its own process (an always-equal object, a stand-in `torch`, a patched
IPython, a forged message, the guard erased) reaches the code that decides the verdict: at most it changes
what the function returned, which the test then judges like any other answer.
"""

import ast
import builtins
import contextlib
import io
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from autograder.grading.plain_data import PLAIN_WORDS, NotPlainData, dumps, loads

OUT_OF_PROCESS = "out-of-process"  # the cell tag of a test cell that runs out of process
MAX_REPLY_CHARS = 96 * 2**20  # the kernel's answer to one call: base64 of at most plain_data.MAX_BYTES
OUTPUT_CHARS = 100_000
END = "end"  # the answer to the kernel's `input()` that ends the loop

# Runs in the kernel: call the student's function on the arguments and return, as base64 of plain data, what
# it returned or what it raised.
KERNEL_SIDE = '''
def _devicelab_call(ns, name, payload):
    import base64, io, torch

    def save(obj):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    try:
        args, kwargs = torch.load(io.BytesIO(base64.b64decode(payload)), weights_only=True)
    except Exception as exc:
        return save(("broken", type(exc).__name__))
    if name not in ns:
        return save(("missing", name))
    try:
        value = ns[name](*args, **kwargs)
    except Exception as exc:
        try:
            names, message = [k.__name__ for k in type(exc).__mro__], str(exc)[:4000]
        except Exception:
            names, message = ["Exception"], "(the exception's message could not be read)"
        return save(("raised", names, message))
    try:
        return save(("returned", value))
    except Exception:
        return save(("unsaved", type(value).__module__ + "." + type(value).__qualname__))
'''


class AnswerRejected(BaseException):
    """The student's function answered with something the grader cannot take (not plain data).

    A BaseException, so that a test's `except Exception:` cannot take a rejected answer for the error it
    expects.
    """


class CallFailed(BaseException):
    """A call into the kernel did not come back (the kernel died or ran out of time), or the test passes
    something that cannot cross."""


class StudentError(Exception):
    """An exception of the student's function whose type is none of Python's own (named in the message)."""


def is_marked(cell: dict) -> bool:
    """Return True for a test cell the instructor tagged to run out of process."""
    tags = (cell.get("metadata") or {}).get("tags")
    return isinstance(tags, list) and OUT_OF_PROCESS in tags


@dataclass
class Plan:
    """What the instructor's notebook says for out-of-process tests: set-up code, and each marked cell's."""

    setup: tuple[str, ...] = ()  # sources of locked code cells that are neither answers nor graded
    tests: dict[str, str] = field(default_factory=dict)  # grade_id -> the instructor's test code
    _namespace: dict | None = None

    @classmethod
    def read(cls, path: Path) -> "Plan":
        """Read the plan of the instructor's notebook at `path` (an empty plan when there is none)."""
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        setup, tests = [], {}
        for cell in nb.get("cells", []):
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            source = "".join(cell.get("source", ""))
            if cell.get("cell_type") != "code" or meta.get("solution"):
                continue
            if meta.get("grade") and is_marked(cell) and meta.get("grade_id"):
                tests[str(meta["grade_id"])] = source
            elif meta.get("locked") and not meta.get("grade") and not meta.get("task"):
                setup.append(source)
        return cls(tuple(setup), tests)

    def namespace(self) -> dict:
        """Return a fresh copy of the set-up cells' namespace (they run here once, the first time)."""
        if self._namespace is None:
            space: dict = {"__name__": "__grader__", "__builtins__": builtins}
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                for number, source in enumerate(self.setup):
                    exec(compile(source, f"<set-up cell {number + 1}>", "exec"), space)  # noqa: S102
            self._namespace = space
        return dict(self._namespace)


def preload(folder: Path) -> None:
    """Run the set-up cells of the notebooks in `folder` that have out-of-process tests, here and now, so
    that processes forked from this one (the grading workers) find what they import already imported (with
    no garbage collections meanwhile: a sixth of torch's import, as the zygote finds; and then frozen, so
    that no later collection here or in a worker walks torch's objects again)."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        for path in sorted(folder.glob("*.ipynb")):
            plan = Plan.read(path)
            if plan.tests:
                try:
                    plan.namespace()
                except Exception:  # noqa: BLE001, S110  (each worker runs them again, and reports what fails)
                    pass
        gc.freeze()
    finally:
        if collecting:
            gc.enable()


SERVE = KERNEL_SIDE + '''
while True:
    _line = input()
    if _line == END:
        break
    _name, _, _payload = _line.partition(" ")
    print("\\n" + MARKER + " " + _devicelab_call(NS, _name, _payload), flush=True)
'''


def serve_code(marker: str) -> str:
    """Return the code of the kernel's loop that answers calls, each answer printed after `marker`."""
    names = f"'NS': globals(), 'MARKER': {marker!r}, 'END': {END!r}"
    return f"exec({SERVE!r}, {{'__builtins__': __import__('builtins'), {names}}})"


def call_line(name: str, payload: bytes) -> str:
    """Return the answer to the kernel's `input()` that calls `name` on the serialised arguments."""
    import base64

    return f"{name} {base64.b64encode(payload).decode('ascii')}"


def read_result(name: str, encoded: object) -> object:
    """Return what the student's function returned, from the kernel's answer (base64 of plain data); raise
    what it raised (Python's own exception types by name, StudentError otherwise), AnswerRejected for anything
    else."""
    import base64

    if not isinstance(encoded, str) or len(encoded) > MAX_REPLY_CHARS:
        raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")
    try:
        outcome = loads(base64.b64decode(encoded.strip(), validate=True))
    except (ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise AnswerRejected(f"{name} answered with {exc}") from None
    return _unpack(name, outcome)


def _unpack(name: str, outcome: object) -> object:
    if not isinstance(outcome, tuple) or not outcome or not isinstance(outcome[0], str):
        raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")
    kind, rest = outcome[0], outcome[1:]
    if kind == "returned" and len(rest) == 1:
        return rest[0]
    if kind == "raised" and len(rest) == 2 and isinstance(rest[0], list) and isinstance(rest[1], str):
        raise _exception(rest[0], rest[1])
    if kind == "missing":
        raise NameError(f"name {name!r} is not defined")
    if kind == "unsaved" and len(rest) == 1:
        raise AnswerRejected(f"{name} returned a {rest[0]} object, which is not plain data ({PLAIN_WORDS})")
    raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")


def _exception(names: list, message: str) -> Exception:
    """Return the exception to raise in the test for one the student's function raised."""
    for name in names:
        found = getattr(builtins, name, None) if isinstance(name, str) else None
        if isinstance(found, type) and issubclass(found, Exception) and found is not Exception:
            try:
                return found(message)
            except TypeError:  # (a type whose constructor wants more, e.g. UnicodeDecodeError)
                break
    first = names[0] if names and isinstance(names[0], str) else "Exception"
    return StudentError(f"{first[:100]}: {message}")


class StudentFunction:
    """Stands in, on the grader's side, for one of the student's functions: a call runs it in the kernel."""

    def __init__(self, name: str, call: Callable[[str, bytes], str]) -> None:
        self.name = name
        self._call = call

    def __call__(self, *args, **kwargs):
        """Call the student's function in the kernel on plain-data arguments; return its plain-data answer."""
        try:
            payload = dumps((list(args), dict(kwargs)))
        except NotPlainData as exc:
            raise CallFailed(f"the test passes {exc} to {self.name}: only plain data crosses to the kernel, "
                             "so this test cell cannot run out of process") from None
        return read_result(self.name, self._call(self.name, payload))

    def __repr__(self) -> str:
        return f"<the student's {self.name}, called in the kernel>"


def free_names(source: str, namespace: dict) -> list[str]:
    """Return the names a test reads that neither the namespace nor Python's builtins define."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return sorted(n for n in names if n not in namespace and not hasattr(builtins, n))


@dataclass
class TestRun:
    """What running one test cell on the grader's side gave: its outputs, and "ok" or "error"."""

    outputs: list = field(default_factory=list)
    status: str = "ok"


def run_test(source: str, namespace: dict, call: Callable[[str, bytes], str], label: str) -> TestRun:
    """Run an instructor's test code here, the student's functions called through `call`; return its outputs.
    """
    for name in free_names(source, namespace):
        namespace[name] = StudentFunction(name, call)
    filename = f"<test {label}>"
    run, printed = TestRun(), io.StringIO()
    try:
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (the instructor's own test)
            value = (eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
                     if last is not None else None)
    except BaseException as exc:  # noqa: BLE001  (every failure of the test is its verdict)
        run.status = "error"
        _add_stream(run, printed.getvalue())
        run.outputs.append(_error(exc, filename, source))
        return run
    _add_stream(run, printed.getvalue())
    if value is not None:
        run.outputs.append(NotebookNode(output_type="execute_result", execution_count=None, metadata={},
                                        data={"text/plain": repr(value)[:OUTPUT_CHARS]}))
    return run


def _add_stream(run: TestRun, text: str) -> None:
    if text:
        run.outputs.append(NotebookNode(output_type="stream", name="stdout", text=text[:OUTPUT_CHARS]))


def _error(exc: BaseException, filename: str, source: str) -> NotebookNode:
    """Return the error output of a failed test: its type, message and the test's own lines."""
    code = source.splitlines()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = [f"Cell In[1], line {f.lineno}\n----> {code[f.lineno - 1].strip()}" for f in frames
             if f.lineno and 0 < f.lineno <= len(code)][:10]  # (IPython's words: redact.py reads the first)
    ename, evalue = type(exc).__name__, str(exc)[:OUTPUT_CHARS]
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[*lines, f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])
