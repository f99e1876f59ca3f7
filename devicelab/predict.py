"""Predict, then reveal: the student commits to a guess before a lesson shows the answer.

A pure core (`Prediction`, `check_guess`, `commit`) and the HTML it renders, with a thin ipywidgets view that
uses only widgets of both ipywidgets 7.7 (Colab) and 8. The answer reaches the page only after the student has
committed a guess: the widget writes it into its result box inside the click handler, never before, and never
into a hidden element. Nothing waits for a click. Under nbgrader the prediction prints a one-line note without
the answer; where widgets cannot run it falls back to HTML with the answer in a collapsed `<details>` element.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from html import escape

from devicelab.ui import under_nbgrader, widgets_enabled

# A lesson's cell that asks a prediction holds only this call (the notebook checks, the book and the GPU
# recorder find the questions by it).
ASK_CELL = re.compile(r"""^\s*ask\((["'])(?P<name>[\w-]+)\1\)\s*$""")


class Verdict(Enum):
    """How a committed guess compares with the answer."""

    RIGHT = "right"
    WRONG = "wrong"


@dataclass(frozen=True)
class Prediction:
    """A question with its answer and the reason; `choices` empty means the student types the answer.

    `giveaways` are the phrases that would answer the question if a student read them first: the lesson tests
    look for them in everything a student has read before the question is asked.
    """

    question: str
    answer: str
    reason: str
    choices: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    giveaways: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.question.strip() or not self.answer.strip() or not self.reason.strip():
            raise ValueError("a prediction needs a question, an answer and a reason")
        if self.choices and self.answer not in self.choices:
            raise ValueError(f"the answer {self.answer!r} is not one of the choices {self.choices!r}")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"the choices repeat themselves: {self.choices!r}")


@dataclass(frozen=True)
class State:
    """Where one prediction stands: asking (no guess yet) or revealed (a guess and its verdict)."""

    guess: str | None = None
    verdict: Verdict | None = None
    note: str = ""

    @property
    def revealed(self) -> bool:
        """Return True once a guess has been committed and the answer may be shown."""
        return self.verdict is not None


def normalise(text: str) -> str:
    """Return free text reduced for comparison: lower case, single spaces, no quotes or end punctuation."""
    text = re.sub(r"[`'\"]", "", text.strip().lower())
    return re.sub(r"\s+", " ", text).strip(" .!?")


def _number(text: str) -> float | None:
    try:
        return float(text.replace("_", "").replace(",", ""))
    except ValueError:
        return None


def check_guess(prediction: Prediction, guess: str) -> Verdict:
    """Return whether `guess` is the answer: a choice exactly, free text after `normalise` or by value."""
    if prediction.choices:
        return Verdict.RIGHT if guess == prediction.answer else Verdict.WRONG
    wanted = [normalise(a) for a in (prediction.answer, *prediction.accept)]
    said = normalise(guess)
    if said in wanted:
        return Verdict.RIGHT
    value = _number(said)
    numbers = [n for n in map(_number, wanted) if n is not None]
    return Verdict.RIGHT if value is not None and value in numbers else Verdict.WRONG


def commit(prediction: Prediction, state: State, guess: str | None) -> State:
    """Return the state after Reveal is pressed with `guess`; an empty or a second guess changes nothing."""
    if state.revealed:
        return state
    if guess is None or not guess.strip():
        hint = "Pick one answer first." if prediction.choices else "Type your guess first."
        return replace(state, note=hint)
    if prediction.choices and guess not in prediction.choices:
        return replace(state, note="Pick one of the answers offered.")
    return State(guess=guess, verdict=check_guess(prediction, guess))


def inline_html(text: str) -> str:
    """Return lesson text as HTML: escaped, with `code` and **bold** spans kept."""
    html = escape(text)
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", html)


def question_html(prediction: Prediction) -> str:
    """Return the question as HTML, with nothing of the answer or the reason in it."""
    return f"<b>Predict:</b> {inline_html(prediction.question)}"


def result_html(prediction: Prediction, state: State) -> str:
    """Return the verdict, the answer and the reason, once a guess is committed (before that, only a note)."""
    if not state.revealed:
        return inline_html(state.note)
    said = inline_html(state.guess or "")
    verdict = ("<span style='color:#1a7f37'><b>Right.</b></span>" if state.verdict is Verdict.RIGHT
               else f"<span style='color:#cf222e'><b>Not quite:</b></span> you said {said}.")
    return f"{verdict} The answer: <b>{inline_html(prediction.answer)}</b>. {inline_html(prediction.reason)}"


def fallback_html(prediction: Prediction) -> str:
    """Return the prediction as static HTML: the question, the choices, the answer folded in `<details>`."""
    items = "".join(f"<li>{inline_html(c)}</li>" for c in prediction.choices)
    choices = f"<ol type='a'>{items}</ol>" if items else "<p><i>Write your guess down first.</i></p>"
    answer = f"The answer: <b>{inline_html(prediction.answer)}</b>. {inline_html(prediction.reason)}"
    return (f"<div>{question_html(prediction)}{choices}<details><summary>Reveal the answer "
            f"(commit to a guess first)</summary><p>{answer}</p></details></div>")


class StaticPrediction:
    """A prediction shown without widgets: HTML with a folded answer, and plain text without the answer."""

    def __init__(self, prediction: Prediction) -> None:
        self.prediction = prediction

    def _repr_html_(self) -> str:
        return fallback_html(self.prediction)

    def __repr__(self) -> str:
        options = "".join(f"\n  ({chr(97 + i)}) {c}" for i, c in enumerate(self.prediction.choices))
        return f"Predict: {self.prediction.question}{options}\n(open it in Jupyter to see the answer)"


class PredictionWidget:
    """Radio buttons or a text box, a Reveal button, and a result box left empty until a guess is in."""

    def __init__(self, prediction: Prediction) -> None:
        import ipywidgets as widgets

        self.prediction = prediction
        self.state = State()
        self.question = widgets.HTML(value=question_html(prediction))
        if prediction.choices:
            self.entry = widgets.RadioButtons(options=list(prediction.choices), index=None,
                                              layout=widgets.Layout(width="auto"))
        else:
            self.entry = widgets.Text(placeholder="your guess")
        self.button = widgets.Button(description="Reveal", button_style="primary",
                                     tooltip="commit to your guess and see the answer")
        self.result = widgets.HTML(value="")
        self.button.on_click(self._on_click)
        self.box = widgets.VBox([self.question, self.entry, widgets.HBox([self.button]), self.result])

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)

    def _on_click(self, _button) -> None:
        self.reveal()

    def reveal(self) -> State:
        """Commit the current entry; once revealed, lock the entry and show the verdict, answer and reason."""
        self.state = commit(self.prediction, self.state, self.entry.value)
        self.result.value = result_html(self.prediction, self.state)
        if self.state.revealed:
            self.entry.disabled = True
            self.button.disabled = True
        return self.state


NBGRADER_NOTE = "(Prediction skipped while nbgrader runs this notebook: answer it in Jupyter.)"


def predict(question: str, choices: Sequence[str] | None, answer: str, reason: str, *,
            accept: Sequence[str] = ()) -> None:
    """Ask for a prediction (choices or free text); show the answer and the reason once a guess is in."""
    from IPython.display import display

    prediction = Prediction(question=question, answer=answer, reason=reason, choices=tuple(choices or ()),
                            accept=tuple(accept))
    if under_nbgrader():
        print(NBGRADER_NOTE)
    elif widgets_enabled():
        display(PredictionWidget(prediction).box)
    else:
        display(StaticPrediction(prediction))


def asker(predictions: Mapping[str, Prediction]) -> Callable[[str], None]:
    """Return `ask(name)`, which shows one of `predictions`: the lesson's cell holds a name, not the answer.
    """

    def ask(name: str) -> None:
        """Show the prediction called `name`; its answer appears only after a guess."""
        if name not in predictions:
            raise KeyError(f"no prediction called {name!r}; this lesson has {sorted(predictions)}")
        p = predictions[name]
        predict(p.question, p.choices, p.answer, p.reason, accept=p.accept)

    return ask
