"""Tests of the student package: devicelab/."""
