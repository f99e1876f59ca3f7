"""A clock that moves only when a test moves it, for code that takes its clock (`clock: Callable[[], float]`).

A test that chooses the times it passes must choose every time the code reads: with this clock the code under
test never reads the real one, so a slow or loaded machine changes nothing it sees.
"""


class ManualClock:
    """Seconds (since the epoch, or since any start the test likes) that change only by `set` or `advance`,
    and by `step` at every read: a machine so slow that each look at the clock finds it later (0: still)."""

    def __init__(self, now: float = 0.0, step: float = 0.0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def set(self, now: float) -> "ManualClock":
        """Move the clock to `now` (never backwards: no real clock does); return it."""
        if now < self.now:
            raise ValueError(f"a clock does not go back from {self.now} to {now}")
        self.now = now
        return self

    def advance(self, seconds: float) -> float:
        """Move the clock on by `seconds`; return the new time."""
        return self.set(self.now + seconds).now
