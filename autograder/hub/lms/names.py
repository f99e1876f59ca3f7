"""Account names from an LMS person's claims: ASCII, folded, fitted into a Unix name, never someone else's.

A claim (email by default) only suggests a name: two people whose claims fold together (case, NFKC, accents,
punctuation) are told apart by a short hash of who they are in the LMS; the display name is only a label.
"""

import re
import unicodedata
from collections.abc import Collection
from typing import Any

from autograder.hub.lms.launch import CLAIM, CUSTOM_PREFIX, LaunchRefused

MAX_NAME = 32  # a Unix login name, with the hub's prefix
MAX_LABEL = 100
NO_ASCII = "user"  # the name of a claim with no letter or digit that ASCII keeps


def ascii_name(text: str) -> str:
    """Return text as a Unix-safe name: NFKC, case folded, accents dropped, anything else between words -."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"[^a-z0-9_]+", "-", text).strip("-_")
    return text if not text or re.match(r"^[a-z_]", text) else f"u{text}"


def fold(name: str) -> str:
    """Return the form two names share when a reader could take one for the other (`_` and `-` alike)."""
    return re.sub(r"[-_]+", "-", name.casefold())


def claimed_name(claims: dict[str, Any], claim: str) -> str:
    """Return the name a person's claim suggests (a launch's claims, or an NRPS member's).

    `email` gives the part before the last @; `custom_X` reads X from the LTI custom claim; any other claim is
    read as it is.
    """
    if claim.startswith(CUSTOM_PREFIX):
        value = (claims.get(CLAIM + "custom") or {}).get(claim[len(CUSTOM_PREFIX):])
    else:
        value = claims.get(claim)
    text = str(value or "").strip()
    if claim == "email":
        text = text.rpartition("@")[0] if "@" in text else text
    if not text:
        raise LaunchRefused(f"the LMS sent no {claim!r} for this person, and the hub names accounts by "
                            "it; ask the instructor to have the LMS share it (privacy settings of the tool)")
    return ascii_name(text) or NO_ASCII


def account_name(prefix: str, base: str, tag: str, taken: Collection[str]) -> str:
    """Return a new account name for a person: the prefix and `base`, or, when that is too long or folds
    together with a `taken` name, the base cut short and the person's `tag` (stable, distinct)."""
    taken_folded = {fold(name) for name in taken}
    plain = f"{prefix}{base}"
    if len(plain) <= MAX_NAME and fold(plain) not in taken_folded:
        return plain
    room = MAX_NAME - len(prefix) - len(tag) - 1
    tagged = f"{prefix}{base[:room].rstrip('-_') or 'u'}-{tag}"
    if fold(tagged) in taken_folded:
        raise LaunchRefused(f"there is no account name left for you ({plain} and {tagged} are taken); tell "
                            "your instructor")
    return tagged


def label(text: str, fallback: str) -> str:
    """Return a display name on one line, without control characters (a label, never a name of anything)."""
    kept = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in str(text or ""))
    return " ".join(kept.split())[:MAX_LABEL].strip() or fallback
