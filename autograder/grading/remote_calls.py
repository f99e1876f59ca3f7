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

Two things a test needs from the student's process also cross as plain data (`Request`, `Answer`):

- a fake (`Fake`): what a function returns on a faked machine, or for an argument that is no plain data (a
  tensor that reports another device), is a value too, but the fake must act where the function runs. So a
  test names one of the course's own fakes and its plain-data parameters, and the kernel sets it up around
  that one call (a fake set up on the grader's side would fake the grader's torch, which the student's code
  never sees). Only its name and parameters cross; its code is the course's, imported in the kernel.
- the arguments after the call (`keep`): "the function leaves its argument unchanged" is judged by the
  grader on copies of the arguments as the kernel holds them after the call (their `.grad` too, which
  `torch.save` leaves out), not by looking into the kernel.

Course helpers (devicelab) ask for both through `StudentFunction.in_kernel`, found by name: they run in
students' notebooks too, where the grader is not installed.
"""

import ast
import builtins
import contextlib
import inspect
import io
import json
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from autograder.grading.plain_data import PLAIN_WORDS, NotPlainData, dumps, loads
from autograder.grading.sandbox import STUDENT_PACKAGES

OUT_OF_PROCESS = "out-of-process"  # the cell tag of a test cell that runs out of process
MAX_REPLY_CHARS = 96 * 2**20  # the kernel's answer to one call: base64 of at most plain_data.MAX_BYTES
OUTPUT_CHARS = 100_000
END = "end"  # the answer to the kernel's `input()` that ends the loop

FAKE_NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # "package.module:function"


def tensors_in(value: object) -> list:
    """Return the tensors in `value` (lists, tuples and dicts walked in order), each time it appears.

    Both sides walk the arguments after a call with this same function (the kernel gets its source), so the
    kernel's list of their gradients lines up with the grader's copies of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


# Runs in the kernel: call the student's function on the arguments (under the fake the grader named, if
# any) and return, as base64 of plain data, what it returned (with the arguments as they are after the call,
# if the grader asked) or what it raised.
KERNEL_SIDE = inspect.getsource(tensors_in) + '''
def _devicelab_call(ns, name, payload):
    import base64, importlib, io, torch

    def save(obj):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    def kind(value):
        return type(value).__module__ + "." + type(value).__qualname__

    try:
        args, kwargs, fake, keep = torch.load(io.BytesIO(base64.b64decode(payload)), weights_only=True)
    except Exception as exc:
        return save(("broken", type(exc).__name__))
    if name not in ns:
        return save(("missing", name))
    function = ns[name]
    if fake is not None:
        try:
            module, _, attribute = fake[0].partition(":")
            function = getattr(importlib.import_module(module), attribute)(function, **fake[1])
        except Exception as exc:
            return save(("unfaked", fake[0], (type(exc).__name__ + ": " + str(exc))[:4000]))
    try:
        value = function(*args, **kwargs)
    except Exception as exc:
        try:
            names, message = [k.__name__ for k in type(exc).__mro__], str(exc)[:4000]
        except Exception:
            names, message = ["Exception"], "(the exception's message could not be read)"
        return save(("raised", names, message))
    try:
        after = (args, kwargs, [t.grad for t in tensors_in((args, kwargs))]) if keep else None
        return save(("returned", value, after))
    except Exception:
        pass
    try:
        save(value)
    except Exception:
        return save(("unsaved", kind(value)))
    return save(("unkept",))
'''


@dataclass(frozen=True)
class Fake:
    """One of the course's own fakes, which the kernel sets up around one call.

    `name` is "module:function" in a course package (sandbox.STUDENT_PACKAGES, which the kernel can import);
    the kernel calls `function(student_function, **params)` and calls what that returns in the student's
    function's place (the student's function on a faked machine, say, or with its first argument made into
    a tensor that reports another device). The test chooses it; only the name and the plain-data params
    cross.
    """

    name: str
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        package = re.split(r"[.:]", self.name)[0]
        if not FAKE_NAME.fullmatch(self.name) or package not in STUDENT_PACKAGES:
            raise ValueError(f"a fake is a function of the course's own packages {STUDENT_PACKAGES}, named "
                             f"'module:function'; not {self.name!r}")
        if not isinstance(self.params, dict) or not all(isinstance(k, str) for k in self.params):
            raise ValueError(f"the parameters of the fake {self.name} are keyword arguments: a dict by name")


@dataclass(frozen=True)
class Request:
    """One call the grader asks of the kernel: the arguments, the fake to set up around it (if any), and
    whether to bring back the arguments as they are after the call."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    fake: Fake | None = None
    keep: bool = False

    def encode(self) -> bytes:
        """Return the request as plain-data bytes (NotPlainData when an argument or parameter is not)."""
        fake = None if self.fake is None else (self.fake.name, dict(self.fake.params))
        return dumps((list(self.args), dict(self.kwargs), fake, bool(self.keep)))


@dataclass(frozen=True)
class Answer:
    """What one call gave: the student's function's value and, when the request kept them, copies of its
    arguments as the kernel held them after the call (their gradients put back)."""

    value: object
    args: list | None = None
    kwargs: dict | None = None


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
    """Return what the student's function returned, from the kernel's answer (see read_answer)."""
    return read_answer(name, encoded).value


def read_answer(name: str, encoded: object) -> Answer:
    """Return the kernel's answer (base64 of plain data) to a call of `name`: what the student's function
    returned, and its arguments after the call if they came; raise what it raised (Python's own exception
    types by name, StudentError otherwise), AnswerRejected for anything else."""
    import base64

    if not isinstance(encoded, str) or len(encoded) > MAX_REPLY_CHARS:
        raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")
    try:
        outcome = loads(base64.b64decode(encoded.strip(), validate=True))
    except (ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise AnswerRejected(f"{name} answered with {exc}") from None
    return _unpack(name, outcome)


def _unpack(name: str, outcome: object) -> Answer:
    if not isinstance(outcome, tuple) or not outcome or not isinstance(outcome[0], str):
        raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")
    kind, rest = outcome[0], outcome[1:]
    if kind == "returned" and len(rest) == 2:
        return _answer(name, *rest)
    if kind == "raised" and len(rest) == 2 and isinstance(rest[0], list) and isinstance(rest[1], str):
        raise _exception(rest[0], rest[1])
    if kind == "missing":
        raise NameError(f"name {name!r} is not defined")
    if kind == "unsaved" and len(rest) == 1:
        raise AnswerRejected(f"{name} returned a {rest[0]} object, which is not plain data ({PLAIN_WORDS})")
    if kind == "unkept" and not rest:
        raise AnswerRejected(f"{name} left its arguments holding what is not plain data ({PLAIN_WORDS})")
    if kind == "unfaked" and len(rest) == 2:
        raise CallFailed(f"the kernel could not set up the fake {rest[0]} for {name} ({rest[1]})")
    raise AnswerRejected(f"the call to {name} did not come back as the grader sent it")


def _answer(name: str, value: object, after: object) -> Answer:
    """Return the Answer of a call that returned; its arguments after the call, if they came, get back their
    gradients (one per tensor, in tensors_in's order, each fitting its tensor, or the answer is rejected)."""
    if after is None:
        return Answer(value)
    broken = AnswerRejected(f"the arguments of {name} did not come back as the grader sent them")
    if not (isinstance(after, tuple) and len(after) == 3 and isinstance(after[0], list)
            and isinstance(after[1], dict) and isinstance(after[2], list)):
        raise broken
    args, kwargs, grads = after
    tensors = tensors_in((args, kwargs))
    if len(grads) != len(tensors):
        raise broken
    for tensor, grad in zip(tensors, grads, strict=True):
        if grad is None:
            continue
        try:
            tensor.grad = grad
        except Exception:  # noqa: BLE001  (a gradient that does not fit its tensor: not what was sent)
            raise broken from None
    return Answer(value, args, kwargs)


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
        return self.ask(Request(args, kwargs)).value

    def in_kernel(self, args: tuple = (), kwargs: dict | None = None, *, fake: str | None = None,
                  params: dict | None = None, keep: bool = False) -> Answer:
        """Call the student's function in the kernel under the course's fake `fake` (with `params`), if one
        is named, and bring back its arguments after the call if `keep`.

        The course's test helpers call this (they find it by name: they cannot import the grader)."""
        try:
            named = None if fake is None else Fake(fake, dict(params or {}))
        except ValueError as exc:
            raise CallFailed(f"the test asks for {exc}") from None
        return self.ask(Request(tuple(args), dict(kwargs or {}), named, keep))

    def ask(self, request: Request) -> Answer:
        """Send one request to the kernel; return its answer."""
        try:
            payload = request.encode()
        except NotPlainData as exc:
            raise CallFailed(f"the test passes {exc} to {self.name}: only plain data crosses to the kernel, "
                             "so this test cell cannot run out of process") from None
        return read_answer(self.name, self._call(self.name, payload))

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
