"""Grade a whole class: parallel, isolated, robust autograding on top of nbgrader.

`python -m autograder grade ASSIGNMENT SUBMISSIONS` runs `session.grade_class`. One module per job:
submissions (find each student's notebooks), restore (put back deleted or retyped test cells), sandbox
(limits, caps and isolation for student code), guard_kernel/ (the grading kernel: every cell on the pristine
execution path; a package copied whole into each sandbox), tamper (the grader's side of it: confirm tests,
word flags), execution (nbgrader's Execute with budgets, capped output and the guard), channels (kernel waits
that cannot sleep through a reply), zygote (warm start's program: a worker's kernels forked from one that
imported torch) and warm_start (the grader's handle on it), attempt (the typed jobs and reports between grader
and workers, and the retry rule), worker (grade one student in a scratch course), pool (run workers in
parallel and survive them), gradebook (merge results into the course gradebook, one at a time), report
(grades.csv and the class summary), results (what a student's grading produced), demo (a realistic class to
try it all on).
"""
