"""The course module: nbgrader's settings as nbgrader reads them, and the one way to pick nbgrader's error
line.
"""

from autograder.course import course_directory, error_line


def test_error_line_takes_the_exception_of_a_traceback_without_colours():
    traceback = ("Traceback\n  File \"x\", line 1\n----> 1 check(x)\n"
                 "\x1b[0;31mAssertionError\x1b[0m: expected 4")
    assert error_line(traceback) == "AssertionError: expected 4"
    assert error_line("x = 1\nKeyboardInterrupt") == "KeyboardInterrupt"


def test_error_line_finds_the_error_in_nbgrader_s_log():
    log = ("[INFO] Converting\nRuntimeError: Kernel died before replying to kernel_info\n"
           "[AutogradeApp | ERROR] There was an error processing the assignment")
    assert error_line(log) == "RuntimeError: Kernel died before replying to kernel_info"
    assert error_line("[INFO] only info\n", "nothing said") == "nothing said"


def test_a_course_without_nbgrader_config_gets_nbgrader_s_defaults(tmp_path):
    course = course_directory(tmp_path)
    assert course.course_id == "" and course.root == str(tmp_path)
    assert course.db_url == f"sqlite:///{tmp_path / 'gradebook.db'}"
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.course_id = 'cs101'\n")
    assert course_directory(tmp_path).course_id == "cs101"
