"""Predictions: a guess is checked; the answer stays off the page until the student commits."""

import subprocess
from unittest import mock

import pytest

from autograder import COURSE_ROOT
from devicelab import predict as predict_module
from devicelab.predict import (
    NBGRADER_NOTE,
    Prediction,
    PredictionWidget,
    State,
    StaticPrediction,
    Verdict,
    asker,
    check_guess,
    commit,
    fallback_html,
    predict,
    question_html,
    result_html,
)

CHOICE = Prediction(question="Is `torch.device('cuda') == torch.device('cuda:0')`?",
                    choices=("True", "False"), answer="False",
                    reason="an index-less device means the **current** one")
FREE = Prediction(question="How many bytes does `torch.zeros(4)` hold?", answer="16",
                  reason="4 float32 elements of 4 bytes", accept=("sixteen",))
SECRET = "current"  # a word of CHOICE's reason, nowhere in its question


def test_a_choice_is_right_only_when_it_is_the_answer():
    assert check_guess(CHOICE, "False") is Verdict.RIGHT
    assert check_guess(CHOICE, "True") is Verdict.WRONG
    assert check_guess(CHOICE, "false") is Verdict.WRONG  # choices are picked, not typed


def test_free_text_forgives_case_spaces_quotes_and_number_forms():
    for guess in ("16", " 16. ", "16.0", "`16`", "Sixteen", "1_6"):
        assert check_guess(FREE, guess) is Verdict.RIGHT, guess
    for guess in ("15", "16 bytes per element", "sixty"):
        assert check_guess(FREE, guess) is Verdict.WRONG, guess


def test_a_prediction_refuses_an_answer_outside_its_choices_and_missing_parts():
    with pytest.raises(ValueError, match="not one of the choices"):
        Prediction(question="q", choices=("a", "b"), answer="c", reason="r")
    with pytest.raises(ValueError, match="repeat"):
        Prediction(question="q", choices=("a", "a"), answer="a", reason="r")
    with pytest.raises(ValueError, match="reason"):
        Prediction(question="q", answer="a", reason=" ")


def test_commit_needs_a_guess_and_happens_once():
    asking = commit(CHOICE, State(), None)
    assert not asking.revealed and "Pick" in asking.note
    assert not commit(FREE, State(), "   ").revealed
    assert not commit(CHOICE, State(), "maybe").revealed
    done = commit(CHOICE, State(), "True")
    assert done.revealed and done.verdict is Verdict.WRONG and done.guess == "True"
    assert commit(CHOICE, done, "False") == done, "a second guess after the reveal changes nothing"


def test_the_answer_is_only_in_what_is_rendered_after_the_commit():
    assert SECRET not in question_html(CHOICE)
    assert SECRET not in result_html(CHOICE, commit(CHOICE, State(), None))
    shown = result_html(CHOICE, commit(CHOICE, State(), "True"))
    assert SECRET in shown and "Not quite" in shown and "<b>current</b>" in shown
    assert "Right." in result_html(CHOICE, commit(CHOICE, State(), "False"))


def test_lesson_text_is_escaped_but_keeps_code_spans():
    html = question_html(Prediction(question="`a<b` & <script>", answer="x", reason="y"))
    assert "<code>a&lt;b</code>" in html and "<script>" not in html


def test_the_fallback_folds_the_answer_and_its_plain_text_holds_none():
    html = fallback_html(CHOICE)
    assert html.index("<details>") < html.index(SECRET) < html.index("</details>")
    assert "<details open" not in html
    assert SECRET not in repr(StaticPrediction(CHOICE)) and "(b) False" in repr(StaticPrediction(CHOICE))


def _page_state(widget) -> str:
    """Return everything the widget has sent to the page: the synced state of the box and all its children."""
    parts, todo = [], [widget.box]
    while todo:
        w = todo.pop()
        parts.append(str(w.get_state()))
        todo.extend(getattr(w, "children", ()))
    return " ".join(parts)


def test_the_widget_shows_nothing_of_the_answer_until_reveal_is_pressed():
    widget = PredictionWidget(CHOICE)
    assert SECRET not in _page_state(widget) and widget.entry.value is None, "no choice is preselected"
    widget.button.click()
    assert SECRET not in _page_state(widget) and "Pick one answer" in widget.result.value
    assert not widget.entry.disabled
    widget.entry.value = "False"
    widget.button.click()
    assert SECRET in widget.result.value and "Right." in widget.result.value
    assert widget.entry.disabled and widget.button.disabled


def test_the_free_text_widget_checks_what_was_typed():
    widget = PredictionWidget(FREE)
    widget.entry.value = "17"
    assert widget.reveal().verdict is Verdict.WRONG
    assert "you said 17" in widget.result.value


def test_under_nbgrader_predict_prints_one_line_and_no_answer(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with mock.patch("IPython.display.display") as display:
        predict(CHOICE.question, CHOICE.choices, CHOICE.answer, CHOICE.reason)
    assert not display.called
    assert capsys.readouterr().out == NBGRADER_NOTE + "\n"


def test_without_a_kernel_predict_falls_back_to_static_html(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with mock.patch("IPython.display.display") as display:
        predict(FREE.question, None, FREE.answer, FREE.reason)
    (shown,), _ = display.call_args
    assert isinstance(shown, StaticPrediction) and shown.prediction.answer == "16"


def test_with_widgets_predict_displays_the_widget_and_returns_at_once(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(predict_module, "widgets_enabled", lambda: True)
    with mock.patch("IPython.display.display") as display:
        assert predict(CHOICE.question, CHOICE.choices, CHOICE.answer, CHOICE.reason) is None
    (box,), _ = display.call_args
    assert SECRET not in str([c.get_state() for c in box.children])


COLAB_PROBE = """
from devicelab.predict import Prediction, PredictionWidget
import ipywidgets
w = PredictionWidget(Prediction(question="q", choices=("a", "b"), answer="b", reason="because"))
assert w.entry.value is None and w.result.value == ""
w.entry.value = "a"
w.button.click()
print(ipywidgets.__version__, w.state.verdict.value, "because" in w.result.value, w.entry.disabled)
"""


def test_the_widget_works_with_colabs_ipywidgets_7(tmp_path):
    python = COURSE_ROOT / ".colab-venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("no Colab-shaped environment here: run `make colab-env`")
    out = subprocess.run([python, "-c", COLAB_PROBE], capture_output=True, text=True, cwd=COURSE_ROOT,
                         check=True)
    assert out.stdout.split() == ["7.7.1", "wrong", "True", "True"]


def test_ask_shows_a_named_prediction_and_refuses_an_unknown_name(monkeypatch):
    ask = asker({"device-equality": CHOICE})
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with mock.patch("IPython.display.display") as display:
        ask("device-equality")
    (shown,), _ = display.call_args
    assert shown.prediction == CHOICE
    with pytest.raises(KeyError, match="device-equality"):
        ask("device-equal")
