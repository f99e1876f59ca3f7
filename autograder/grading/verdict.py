"""Our verdict on a test cell: it passes when it ran to the end without an error, whatever it displayed.

nbgrader's `utils.determine_grade` reads a test cell's outputs in order: the first `execute_result` that is
not a number gives full credit even when an error follows it (so a student whose answer displays something
first passes a failing test), and any stderr output gives 0 (so a warning costs an honest student the test).
Here a test cell scores:

- 0 when it did not run to the end: an error output (nbgrader's Execute adds one for every error reply, the
  grader one for a cell not run or not confirmed), or no "ok" reply from the kernel at all;
- its points otherwise, whatever it printed, warned or displayed;
- numeric partial credit, as nbgrader documents it, only where the instructor's test cell is written for it:
  its last statement is an expression, and the cell's result is a number (the lowest, if several came).

`SaveVerdicts` is nbgrader's SaveAutoGrades with this verdict for test cells (answer and task cells are scored
as nbgrader scores them); GraderExecute hands it the kernel's replies in the resources under REPLIES.
"""

import ast
import functools

from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import SaveAutoGrades

REPLIES = "devicelab_replies"  # resources key: cell index -> the status of the kernel's execute_reply


@functools.lru_cache(maxsize=1024)
def ends_in_expression(source: str) -> bool:
    """Return True when a cell's last statement is an expression whose value IPython displays (remembered per
    source: a test cell's source is the instructor's, the same for every student a worker grades)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        code = TransformerManager().transform_cell(source)
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return bool(tree.body) and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";")


def partial_credit(cell: NotebookNode, max_points: float) -> float:
    """Return the points a partial-credit test cell's results give (the lowest, each read by nbgrader)."""
    results = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
    scores = []
    for output in results:
        try:
            scores.append(float(utils.get_partial_grade(output, max_points)))
        except (KeyError, TypeError, ValueError):  # no text, or more than the cell's points: not credit
            scores.append(0.0)
    return min(scores, default=max_points)


def ran_to_end(cell: NotebookNode, reply: str | None) -> bool:
    """Return True when the kernel said the cell finished ("ok") and no error output was recorded."""
    return reply == "ok" and not any(o.get("output_type") == "error" for o in cell.outputs)


def score_test_cell(cell: NotebookNode, reply: str | None) -> float:
    """Return a test cell's score: 0 unless it ran to the end; partial credit only where it is written for."""
    max_points = float(cell.metadata["nbgrader"]["points"])
    if not ran_to_end(cell, reply):
        return 0.0
    if ends_in_expression(cell.source):
        return partial_credit(cell, max_points)
    return max_points


def is_test_cell(cell: NotebookNode) -> bool:
    """Return True for an autograded test cell (a graded code cell that is not an answer)."""
    return cell.cell_type == "code" and bool(utils.is_grade(cell)) and not utils.is_solution(cell)


class SaveVerdicts(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, scoring test cells by our verdict, not determine_grade's output rule."""

    def preprocess(self, nb, resources):
        """Save every graded cell's score, with the kernel's replies that GraderExecute recorded."""
        self._replies = resources.get(REPLIES)
        self._index = None
        self._grades = None
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        """Remember which cell is scored (its reply is kept by index), then save it as nbgrader does."""
        self._index = cell_index
        return super().preprocess_cell(cell, resources, cell_index)

    def _score(self, cell: NotebookNode) -> float | None:
        if not is_test_cell(cell):
            return utils.determine_grade(cell, self.log)[0]
        if self._replies is None:  # run by a plain Execute: no replies were recorded, only the outputs count
            return score_test_cell(cell, "ok")
        return score_test_cell(cell, self._replies.get(self._index))

    def _grade(self, grade_id: str):
        """Return this submitted notebook's grade of a cell, as nbgrader's `find_grade` would: its grades are
        read in one query the first time, not in one five-table join per graded cell."""
        from nbgrader.api import Grade
        from sqlalchemy.orm import joinedload

        if self._grades is None:
            submitted = self.gradebook.find_submission_notebook(self.notebook_id, self.assignment_id,
                                                                self.student_id)
            grades = self.gradebook.db.query(Grade).options(joinedload(Grade.cell)).filter(
                Grade.notebook_id == submitted.id)
            self._grades = {grade.cell.name: grade for grade in grades}
        if grade_id in self._grades:
            return self._grades[grade_id]
        return self.gradebook.find_grade(grade_id, self.notebook_id, self.assignment_id, self.student_id)

    def _add_score(self, cell: NotebookNode, resources) -> None:
        """Record the cell's score as nbgrader does (a cell already scored by hand stays up for review)."""
        grade = self._grade(cell.metadata["nbgrader"]["grade_id"])
        grade.auto_score = self._score(cell)
        grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
        self.gradebook.db.commit()
