"""Instant feedback while working: `check`, levelled `hint`s and, for practice cells, `solution`.

An exercise set (one module per assignment or lesson) lists its exercises; `checker(exercises)` gives the
three functions a notebook imports. Checks run visible-level expectations only: hidden tests and graded
solutions never ship with this package. Under nbgrader (`NBGRADER_EXECUTION` set) they do nothing.
"""

import dis
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from html import escape


class Outcome(Enum):
    """What a check found."""

    CORRECT = "correct"
    NOT_ATTEMPTED = "not attempted"
    INCORRECT = "incorrect"


@dataclass(frozen=True)
class Exercise:
    """One exercise: the function students write, how to check it, hints, and (practice only) a solution."""

    name: str
    expectations: Callable[[Callable], None]
    hints: tuple[str, ...] = ()
    solution: str | None = None
    success: str = ""
    # why solution() shows no code (the same work is graded elsewhere); the tests still run it
    withheld: str = ""


@dataclass(frozen=True, repr=False)
class Feedback:
    """A check's verdict in plain words."""

    exercise: str
    outcome: Outcome
    message: str

    def __str__(self) -> str:
        title = {Outcome.CORRECT: "Correct", Outcome.NOT_ATTEMPTED: "Not attempted yet",
                 Outcome.INCORRECT: "Not quite"}[self.outcome]
        return f"{title}: {self.exercise}. {self.message}".strip()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {Outcome.CORRECT: "#1a7f37", Outcome.NOT_ATTEMPTED: "#9a6700", Outcome.INCORRECT: "#cf222e"}
        return (f"<div style='border-left:4px solid {colour[self.outcome]};padding:4px 10px'>"
                f"{escape(str(self))}</div>")


def _silenced() -> bool:
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def _show(obj) -> None:
    """Display rich output in a notebook, plain text elsewhere."""
    if "IPython" in sys.modules:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(obj)
            return
    print(obj)


def is_stub(error: NotImplementedError, fn: Callable) -> bool:
    """Return True when the error is the exercise's stub itself: a `raise` statement in the body of `fn`.

    PyTorch raises NotImplementedError too (`.item()` on a meta tensor): there the last instruction run in
    `fn` is the call that failed, not a raise, and the student sees a bug, not "not attempted".
    """
    code = getattr(inspect.unwrap(fn), "__code__", None)
    last = error.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None or last.tb_frame.f_code is not code or not 0 <= last.tb_lasti < len(code.co_code):
        return False
    return dis.opname[code.co_code[last.tb_lasti]] == "RAISE_VARARGS"


def evaluate(exercise: Exercise, namespace: dict) -> Feedback:
    """Run an exercise's expectations against the function of that name in `namespace`."""
    fn = namespace.get(exercise.name)
    if fn is None:
        return Feedback(exercise.name, Outcome.NOT_ATTEMPTED,
                        f"There is no `{exercise.name}` yet: run the cell that defines it, then check again.")
    if not callable(fn):
        return Feedback(exercise.name, Outcome.INCORRECT,
                        f"`{exercise.name}` should be a function, but it is a {type(fn).__name__}.")
    try:
        exercise.expectations(fn)
    except NotImplementedError as error:
        if is_stub(error, fn):
            return Feedback(exercise.name, Outcome.NOT_ATTEMPTED,
                            "It still raises NotImplementedError: replace that line with your code.")
        return Feedback(exercise.name, Outcome.INCORRECT,
                        f"Calling it raised NotImplementedError: {error} (PyTorch raises this when a "
                        "tensor's device cannot do what was asked, for example reading the values of a meta "
                        "tensor).")
    except AssertionError as failure:
        return Feedback(exercise.name, Outcome.INCORRECT, str(failure) or "An expectation failed.")
    except Exception as error:  # noqa: BLE001  (the student's code may raise anything; say what and where)
        return Feedback(exercise.name, Outcome.INCORRECT,
                        f"Calling it raised {type(error).__name__}: {error}")
    return Feedback(exercise.name, Outcome.CORRECT, exercise.success or "It does what the exercise asks.")


@dataclass
class Checker:
    """The `check`, `hint` and `solution` functions of one exercise set."""

    exercises: dict[str, Exercise]
    hints_given: dict[str, int] = field(default_factory=dict)

    def _exercise(self, name: str) -> Exercise:
        if name not in self.exercises:
            known = ", ".join(repr(n) for n in self.exercises)
            raise KeyError(f"no exercise called {name!r} here; the exercises are {known}")
        return self.exercises[name]

    def check(self, name: str, namespace: dict | None = None) -> None:
        """Check the exercise `name` against the function of that name you defined, and say how it went."""
        if _silenced():
            return
        if namespace is None:
            namespace = inspect.currentframe().f_back.f_globals
        _show(evaluate(self._exercise(name), namespace))

    def hint(self, name: str) -> None:
        """Show the next hint for exercise `name` (each call gives one more)."""
        if _silenced():
            return
        hints = self._exercise(name).hints
        if not hints:
            print(f"No hints for {name}.")
            return
        level = min(self.hints_given.get(name, 0), len(hints) - 1)
        self.hints_given[name] = level + 1
        more = "call hint again for another" if level + 1 < len(hints) else "that was the last hint"
        print(f"Hint {level + 1} of {len(hints)} for {name}: {hints[level]}\n({more})")

    def solution(self, name: str) -> None:
        """Show a worked solution (practice exercises only)."""
        if _silenced():
            return
        exercise = self._exercise(name)
        if exercise.solution is None:
            print(f"{name} is graded: no solution here. Try hint({name!r}).")
            return
        if exercise.withheld:
            print(f"{exercise.withheld} Try hint({name!r}).")
            return
        print(exercise.solution.strip())


def checker(*exercises: Exercise) -> Checker:
    """Return a Checker for these exercises."""
    return Checker({e.name: e for e in exercises})
