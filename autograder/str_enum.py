"""The base of the grader's vocabularies: enums whose members are their own spelling in CSV, JSON and sqlite.
"""

from enum import Enum


class StrEnum(str, Enum):
    """A str enum that prints, formats and serialises as its value (Python 3.10's stand-in for 3.11's
    `enum.StrEnum`)."""

    __str__ = str.__str__
    __format__ = str.__format__
