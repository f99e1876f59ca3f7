"""The autograde service against `interfaces.AutogradeExchange` alone: an exchange held in memory stands in
for both backends (the folder one in tests/hub/test_hub_autograde.py, the HTTP one in
tests/hub/test_http_exchange_autograde.py), and each backend is checked to offer the interface's methods as it
declares them."""

import inspect
from pathlib import Path
from pkgutil import resolve_name

import pytest

from autograder.grading.results import Status, StudentResult
from autograder.hub.exchange.interfaces import AutogradeExchange, StaffExchange
from autograder.hub.service.autograde import Place, release_result, scan, settle_unstaged, stage
from autograder.hub.service.autograde_queue import State
from autograder.hub.setup.exchanges import BACKENDS
from tests.memory_exchange import MemoryExchange


def place(tmp_path: Path, exchange: MemoryExchange) -> Place:
    (tmp_path / "course").mkdir(exist_ok=True)
    found = Place(tmp_path / "course", exchange)
    found.queue().configure("ps01", True)
    return found


def test_new_submissions_are_queued_once_oldest_first_and_only_of_the_assignments_turned_on(
        tmp_path: Path) -> None:
    exchange = MemoryExchange()
    here = place(tmp_path, exchange)
    queue = here.queue()
    exchange.submit("bob", "ps01", "2026-01-01 10:00:02 UTC")
    exchange.submit("ann", "ps01", "2026-01-01 10:00:01 UTC")
    exchange.submit("ann", "ps02", "2026-01-01 10:00:00 UTC")  # not turned on
    assert scan(here, queue) == 2
    assert [(e.student, e.timestamp) for e in queue.entries("ps01")] == [
        ("ann", "2026-01-01 10:00:01 UTC"), ("bob", "2026-01-01 10:00:02 UTC")]
    assert scan(here, queue) == 0  # the second scan tells the exchange what the queue already knows
    assert exchange.asked[-1] == {("ps01", "ann", "2026-01-01 10:00:01 UTC"),
                                  ("ps01", "bob", "2026-01-01 10:00:02 UTC")}
    assert queue.entries("ps02") == []


def test_a_batch_is_taken_through_the_interface_and_gone_or_refused_submissions_fail_with_why(
        tmp_path: Path) -> None:
    exchange = MemoryExchange()
    here = place(tmp_path, exchange)
    queue = here.queue()
    gone = exchange.submit("ann", "ps01", "2026-01-01 10:00:01 UTC")
    exchange.submit("bob", "ps01", "2026-01-01 10:00:02 UTC", refused="it holds 2 GiB")
    exchange.submit("cy", "ps01", "2026-01-01 10:00:03 UTC", notes="its stated time was not used")
    scan(here, queue)
    exchange.remove(gone)
    batch = queue.next_batch(10)
    staged = stage(here, batch)
    left = settle_unstaged(queue, batch, staged)
    assert [e.student for e in left] == ["cy"]
    assert sorted(p.name for p in staged.work.iterdir()) == ["cy"]  # nothing is left of the other two
    assert (staged.work / "cy" / "ps01" / "ps01.ipynb").read_bytes() == b"{}"
    assert staged.notes == {"cy": "its stated time was not used"}
    outcome = {e.student: (e.state, e.status, e.detail) for e in queue.entries("ps01")}
    assert outcome["ann"] == (State.FAILED, Status.MISSING,
                              "its folder left the exchange before it was graded")
    assert outcome["bob"] == (State.FAILED, Status.REFUSED, "it holds 2 GiB")


def test_a_result_goes_back_through_the_interface_and_the_entry_is_done(tmp_path: Path) -> None:
    exchange = MemoryExchange()
    here = place(tmp_path, exchange)
    queue = here.queue()
    exchange.submit("ann", "ps01", "2026-01-01 10:00:01 UTC")
    scan(here, queue)
    batch = queue.next_batch(10)
    staged = stage(here, batch)
    result = StudentResult("ann", "ps01", Status.TIMEOUT, "a cell ran past its time",
                           timestamp=batch[0].timestamp)
    release_result(here, queue, batch[0], result, staged, graded=True)
    ((student, assignment, timestamp, pages, ids),) = exchange.given_back
    assert (student, assignment, timestamp) == ("ann", "ps01", "2026-01-01 10:00:01 UTC")
    assert list(pages) == ["ps01"] and "a cell ran past its time" in pages["ps01"]
    assert ids == {}  # the course has no ps01 notebooks to match the student's file names with
    (entry,) = queue.entries("ps01")
    assert (entry.state, entry.status) == (State.DONE, Status.TIMEOUT)


def _methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(protocol).items()
            if callable(member) and not name.startswith("_")}


BACKEND_CLASSES = [(AutogradeExchange, MemoryExchange),
                   *((AutogradeExchange, resolve_name(b.autograde)) for b in BACKENDS.values()),
                   *((StaffExchange, resolve_name(b.staff)) for b in BACKENDS.values())]


@pytest.mark.parametrize(("protocol", "backend"), BACKEND_CLASSES,
                         ids=[f"{p.__name__}-{b.__name__}" for p, b in BACKEND_CLASSES])
def test_each_backend_offers_every_method_of_its_interface_as_declared(protocol: type, backend: type) -> None:
    wanted = _methods(protocol)
    assert wanted  # the interface declares something
    for name, signature in wanted.items():
        theirs = inspect.signature(getattr(backend, name))
        assert list(theirs.parameters) == list(signature.parameters), (backend.__name__, name)
        assert [p.default for p in theirs.parameters.values()] == [
            p.default for p in signature.parameters.values()], (backend.__name__, name)
    for attribute in getattr(protocol, "__annotations__", {}):
        fields = set(getattr(backend, "__dataclass_fields__", {}))
        assert attribute in fields, (backend.__name__, attribute)
