"""nbgrader configuration: the repository root is the course root."""

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "device-lab"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"

# Per-cell time limit when nbgrader executes a notebook (validate, autograde).
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Only notebooks and student data files reach release/: instructor notes, solutions kept beside the
# notebooks and caches stay behind.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    "*.md",
    "*.py",
    "*.txt",
    "instructor*",
    "solutions*",
    ".nbgrader.log",
]

# What students see where a solution was removed.
c.ClearSolutions.code_stub = {
    "python": (
        "# YOUR CODE HERE\n"
        "raise NotImplementedError(\"Not done yet: replace this line with your code, then run the tests below.\")"
    )
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
