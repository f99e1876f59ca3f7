"""Settings declared once: a field of a settings dataclass made by `option` carries its default, its help,
the command-line flag that sets it, its choices and its check; the command line's options are made from the
fields (`add_options`), and a settings file (hub.json, a part's JSON config) is read back into the same
dataclass and checked by the same fields (`check`).

Why not traitlets, which Jupyter's applications configure with: the settings travel as typed data between
the parts (`dataclasses.replace`, JSON files written by one process and read by another, frozen values
handed to functions), which a `HasTraits` object is not; and the commands are argparse subcommands. Each
setting is still one declaration, read from the command line and from a file, validated beside itself.
"""

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, field, fields
from pathlib import Path
from typing import Any

Check = Callable[[Any], str | None]  # the value's problem, or None when it is fine


def option(default: Any, help: str, *, flag: str = "", choices: Iterable[Any] = (),
           metavar: str | None = None, check: Check | None = None, kept: bool = False,
           kind: type | None = None) -> Any:
    """Declare a setting: its default (MISSING: it must be given), help, flag (default: the field's name with
    dashes), choices, check, whether a command that does not give it keeps the last value (`kept`: hub setup
    run again), and the type the command line reads it as (default: the default's)."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": tuple(choices),
                                            "metavar": metavar, "check": check, "kept": kept, "kind": kind})


def options(cls: type) -> list[Field]:
    """Return the fields of a settings dataclass that are options."""
    return [f for f in fields(cls) if "help" in f.metadata]


def flag_of(f: Field) -> str:
    return "--" + (f.metadata["flag"] or f.name.replace("_", "-"))


def add_options(parser: argparse.ArgumentParser, cls: type, *, kept_from: str = "the last setup") -> None:
    """Add a command-line option for each option of `cls`, its default None (not given): the value then
    comes from the caller's base (the defaults, a file, the last setup), never from a second default here."""
    for f in options(cls):
        meta, default = f.metadata, f.default
        said = default if default not in ("", MISSING, None, ()) else None
        if meta["kept"]:
            tail = f"default: as {kept_from}" + (f", else {said}" if said is not None else "")
        else:
            tail = "" if said is None else f"default: {said}"
        if isinstance(default, bool):
            kind = {"action": argparse.BooleanOptionalAction}
        elif isinstance(default, tuple):  # repeatable: each time adds one
            kind = {"action": "append"}
        else:
            kind = {"type": meta["kind"] or (type(default) if default not in (None, MISSING) else str)}
        parser.add_argument(flag_of(f), dest=f.name, default=None, metavar=meta["metavar"],
                            choices=meta["choices"] or None,
                            help=meta["help"] + (f" ({tail})" if tail else ""), **kind)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """Return the options of `cls` that the command line gave."""
    found = {f.name: getattr(args, f.name) for f in options(cls) if getattr(args, f.name, None) is not None}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in found.items()}


def to_json(settings: Any) -> str:
    """Return a settings dataclass as the JSON file another process reads it from (`read_json`)."""
    return json.dumps({f.name: getattr(settings, f.name) for f in fields(settings)}, indent=2) + "\n"


def read_json(cls: type, path: Path, **over: Any) -> Any:
    """Read a settings file written by `to_json` (command-line values in `over` win); raise ValueError for
    a file that is not one, a setting it does not know, or a value a setting's check refuses."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the settings file {path}: {exc}") from None
    names = {f.name for f in fields(cls)}
    if not isinstance(data, dict) or set(data) - names:
        raise ValueError(f"{path} is not a settings file of {cls.__name__} (unknown: "
                         f"{', '.join(sorted(set(data) - names)) if isinstance(data, dict) else 'all'})")
    settings = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in {**data, **over}.items()})
    wrong = problems(settings)
    if wrong:
        raise ValueError(f"{path}: " + "; ".join(wrong))
    return settings


def kept(last: Any, cls: type) -> dict[str, Any]:
    """Return the options of `cls` a command keeps from `last` when it does not give them."""
    return {f.name: getattr(last, f.name) for f in options(cls) if f.metadata["kept"]}


def argv_of(settings: Any) -> list[str]:
    """Return the command-line options that give a settings dataclass's values other than its defaults (for a
    command that hands its user's options on to a program run as another account)."""
    found = []
    for f in options(type(settings)):
        value = getattr(settings, f.name)
        if value == f.default:
            continue
        if isinstance(value, bool):
            found.append(flag_of(f) if value else "--no-" + flag_of(f)[2:])
        else:
            for one in value if isinstance(value, tuple) else (value,):
                found += [flag_of(f), f"{one:g}" if isinstance(one, float) else str(one)]
    return found


def problems(settings: Any) -> list[str]:
    """Return what is wrong with each option's value (its choices, its check), as `--flag value: why`."""
    found = []
    for f in options(type(settings)):
        value, meta = getattr(settings, f.name), f.metadata
        if meta["choices"] and value is not None and value not in meta["choices"]:
            why = f"choose {', '.join(map(str, meta['choices']))}"
        else:
            why = meta["check"](value) if meta["check"] else None
        if why:
            found.append(f"{flag_of(f)} {value!r}: {why}")
    return found


def at_least(low: float) -> Check:
    return lambda value: None if value >= low else f"give {low:g} or more"


def between(low: float, high: float, unit: str = "") -> Check:
    return lambda value: None if low <= value <= high else f"give {low:g}{unit} to {high:g}{unit}"


def port(value: int) -> str | None:
    return None if 1 <= value <= 65535 else "a port is 1 to 65535"


def parse(cls: type, parser: argparse.ArgumentParser, argv: list[str] | None = None) -> Any:
    """Read a program's settings: its `--config FILE` (what the process that starts it wrote, `to_json`), then
    the options given on the command line over it; a missing or refused setting ends the program with a
    usage error, as argparse does."""
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="read the settings from this JSON file; the options given beside it win")
    add_options(parser, cls, kept_from="the --config file")
    args = parser.parse_args(argv)
    try:
        if args.config:
            return read_json(cls, args.config, **given(args, cls))
        settings = cls(**given(args, cls))
    except TypeError:
        required = [flag_of(f) for f in options(cls)
                    if f.default is MISSING and getattr(args, f.name) is None]
        parser.error(f"give {', '.join(required)} (or --config FILE)")
    except ValueError as exc:
        parser.error(str(exc))
    wrong = problems(settings)
    if wrong:
        parser.error("; ".join(wrong))
    return settings
