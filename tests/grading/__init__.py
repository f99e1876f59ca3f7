"""Tests of grading a class: autograder/grading/."""
