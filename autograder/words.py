"""The base of the grader's vocabularies: enums whose members are their own spelling in CSV, JSON and sqlite.
"""

from enum import Enum


class Word(str, Enum):
    """A str enum that prints, formats and serialises as its value (Python 3.10's stand-in for StrEnum)."""

    __str__ = str.__str__
    __format__ = str.__format__
