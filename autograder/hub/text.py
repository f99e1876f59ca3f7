"""Text from students made safe to print to staff terminals and logs."""

import unicodedata


def printable(text: str) -> str:
    """Return text with control characters (terminal escapes, bidi overrides, bad bytes) as escapes."""
    return "".join(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") else ch for ch in text)
