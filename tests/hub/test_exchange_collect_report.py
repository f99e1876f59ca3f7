"""CollectReport is the one type both exchanges' `collect` returns: its log survives the trip as JSON (the
folder exchange's report crosses from the grader account to root as JSON)
and reaches the instructor's lines."""

from autograder.hub.exchange.folder.tree import BadName, Collected, CollectReport


def test_a_report_with_a_log_survives_json_and_is_read_after_the_collected() -> None:
    report = CollectReport([Collected("s-ada", "2026-12-01 10:00:00", "")], ["s-bob"],
                           [BadName("junk", "not named student+assignment+time[+random]")],
                           log=["Collecting submission: s-cy ps01", "bell \x07 rings"])
    again = CollectReport.from_json(report.to_json())
    assert again == report
    lines = again.lines()
    assert lines[0] == "collected s-ada (2026-12-01 10:00:00)"
    assert lines[-2:] == ["Collecting submission: s-cy ps01", "bell \\x07 rings"]


def test_a_report_of_an_older_json_without_a_log_reads_as_empty() -> None:
    old = '{"collected": [], "unchanged": [], "skipped": []}'
    assert CollectReport.from_json(old) == CollectReport()
    assert CollectReport.from_json(old).lines() == ["no submissions to collect"]


def test_the_http_exchanges_report_is_its_log_only() -> None:
    said = ["Collecting submission: s-ada ps01"]
    assert CollectReport(log=said).lines() == said
