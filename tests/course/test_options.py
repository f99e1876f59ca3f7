"""Settings declared once (autograder/options.py): the command line made from the fields, a config file read
into them, both checked by the same fields."""

import argparse
from dataclasses import MISSING, dataclass
from pathlib import Path

import pytest

from autograder.options import at_least, option, parse, problems, read_json, to_json


@dataclass(frozen=True)
class Demo:
    folder: str = option(MISSING, "where it works", metavar="FOLDER")
    workers: int = option(2, "how many", check=at_least(1))
    mode: str = option("fast", "how", choices=("fast", "slow"))
    names: tuple[str, ...] = option((), "repeatable", flag="name")
    quiet: bool = option(False, "say less")
    limit: float | None = option(None, "seconds", kind=float)


def run(*argv: str) -> Demo:
    return parse(Demo, argparse.ArgumentParser(prog="demo"), list(argv))


def test_the_command_line_gives_each_setting_and_the_rest_keep_their_declared_defaults() -> None:
    assert run("--folder", "x") == Demo("x")
    assert run("--folder", "x", "--workers", "4", "--name", "a", "--name", "b", "--quiet", "--limit", "1.5") \
        == Demo("x", 4, names=("a", "b"), quiet=True, limit=1.5)


def test_a_config_file_written_by_one_process_is_read_by_another_and_the_command_line_wins(
        tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(to_json(Demo("x", 3, "slow", ("a",))))
    assert run("--config", str(path)) == Demo("x", 3, "slow", ("a",))
    assert run("--config", str(path), "--workers", "5").workers == 5


@pytest.mark.parametrize(("argv", "said"), [
    ((), "give --folder"),
    (("--folder", "x", "--workers", "0"), "--workers 0: give 1 or more"),
    (("--folder", "x", "--mode", "odd"), "invalid choice: 'odd'"),
])
def test_a_missing_or_refused_setting_is_a_usage_error(argv: tuple[str, ...], said: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        run(*argv)
    assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_a_config_file_with_an_unknown_setting_or_a_bad_value_is_refused(tmp_path: Path) -> None:
    unknown, bad = tmp_path / "unknown.json", tmp_path / "bad.json"
    unknown.write_text('{"folder": "x", "color": "red"}')
    bad.write_text('{"folder": "x", "mode": "odd"}')
    with pytest.raises(ValueError, match="unknown: color"):
        read_json(Demo, unknown)
    with pytest.raises(ValueError, match="--mode 'odd': choose fast, slow"):
        read_json(Demo, bad)
    assert problems(Demo("x")) == []


def test_a_commands_options_handed_on_to_another_program_mean_the_same_there() -> None:
    """`hub autograde on A --timeout 30` hands its own options to the autograde service's `on` (argv_of):
    read back by the same fields, they are the same settings; defaults are not repeated."""
    from autograder.options import argv_of

    for settings in (Demo("x"), Demo("x", 4, "slow", ("a", "b"), True, 2.5)):
        assert run(*argv_of(settings)) == settings
    assert argv_of(Demo("x")) == ["--folder", "x"]
