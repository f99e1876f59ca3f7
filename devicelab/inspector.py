"""List every tensor in a namespace, model or container with its shape, dtype, device and size."""

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from html import escape

import torch
from torch import nn

from devicelab.units import format_bytes

# Names IPython puts in a notebook's namespace that hold cell history, not the user's tensors.
_IPYTHON_HISTORY = frozenset({"In", "Out"})
_COLUMNS = ("name", "kind", "shape", "dtype", "device", "pinned", "size")
_ATTRIBUTE_NOTE = ("kind 'attribute': a plain tensor stored on a module; module.to() does not move it "
                   "(register it with register_buffer so that it moves).")
# What `is_pinned()` raises where it cannot answer: no driver, no kernel for a layout or subclass, or
# (CPU-only builds) torch.cuda's "not compiled with CUDA" assertion. The table shows "n/a" instead.
_CANNOT_ASK = (RuntimeError, NotImplementedError, TypeError, AssertionError)


@dataclass(frozen=True)
class TensorRow:
    """One tensor as the inspector sees it."""

    name: str
    kind: str  # "tensor", "parameter", "buffer" or "attribute" (a plain tensor on a module)
    shape: tuple[int, ...] | None  # None when the layout has no single shape (nested tensors)
    dtype: torch.dtype
    device: torch.device
    pinned: bool | None  # None: not applicable (not in host memory) or could not be asked
    nbytes: int | None  # elements x bytes per element; None when undefined (sparse tensors)

    def cells(self) -> tuple[str, ...]:
        """Return the row as display strings, in column order."""
        return (
            self.name,
            self.kind,
            "n/a" if self.shape is None else str(self.shape),
            str(self.dtype).removeprefix("torch."),
            str(self.device),
            {True: "yes", False: "no", None: "n/a"}[self.pinned],
            "n/a" if self.nbytes is None else format_bytes(self.nbytes),
        )


@dataclass(frozen=True)
class DeviceTotal:
    """How many tensors live on one device and how many bytes they take."""

    device: torch.device
    count: int
    nbytes: int
    unknown_sizes: int = 0


@dataclass(frozen=True)
class TensorTable:
    """Rows of tensors that print as aligned text and render as HTML in Jupyter."""

    rows: tuple[TensorRow, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[TensorRow]:
        return iter(self.rows)

    def as_dicts(self) -> list[dict]:
        """Return the rows as plain dictionaries (one per tensor)."""
        return [asdict(row) for row in self.rows]

    def totals(self) -> dict[torch.device, DeviceTotal]:
        """Return the count and total bytes per device, in order of first appearance."""
        found: dict[torch.device, DeviceTotal] = {}
        for row in self.rows:
            old = found.get(row.device, DeviceTotal(row.device, 0, 0))
            found[row.device] = DeviceTotal(
                row.device,
                old.count + 1,
                old.nbytes + (row.nbytes or 0),
                old.unknown_sizes + (row.nbytes is None),
            )
        return found

    def summary(self) -> str:
        """Return one line: tensors and bytes per device (a tensor reachable twice counts twice)."""
        if not self.rows:
            return "No tensors found."
        parts = []
        for total in self.totals().values():
            size = format_bytes(total.nbytes)
            if total.unknown_sizes:
                size += f" + {total.unknown_sizes} of unknown size"
            if total.device.type == "meta":
                size += ", no data stored"
            noun = "tensor" if total.count == 1 else "tensors"
            parts.append(f"{total.device}: {total.count} {noun}, {size}")
        return "; ".join(parts)

    def notes(self) -> list[str]:
        """Return warnings worth reading under the table (plain tensor attributes of modules)."""
        if any(row.kind == "attribute" for row in self.rows):
            return [_ATTRIBUTE_NOTE]
        return []

    def __str__(self) -> str:
        if not self.rows:
            return self.summary()
        lines = [_COLUMNS, *(row.cells() for row in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(_COLUMNS))]
        text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                for line in lines]
        return "\n".join([*text, self.summary(), *self.notes()])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{escape(c)}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{escape(c)}</td>" for c in row.cells()) + "</tr>"
            for row in self.rows
        )
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if self.rows else ""
        notes = "".join(f"<p>{escape(note)}</p>" for note in self.notes())
        return f"{table}<p>{escape(self.summary())}</p>{notes}"


def _pinned(t: torch.Tensor) -> bool | None:
    """Return whether a host tensor is page-locked; None for other devices or when torch cannot say."""
    if t.device.type != "cpu":
        return None
    try:
        return bool(t.is_pinned())
    except _CANNOT_ASK:
        return None


def _row(name: str, kind: str, t: torch.Tensor) -> TensorRow:
    try:
        shape: tuple[int, ...] | None = tuple(t.shape)
    except RuntimeError:  # nested tensors have no single shape
        shape = None
    try:
        nbytes: int | None = t.nbytes
    except RuntimeError:  # sparse tensors: nbytes is undefined
        nbytes = None
    return TensorRow(name, kind, shape, t.dtype, t.device, _pinned(t), nbytes)


def _module_rows(module: nn.Module, prefix: str) -> Iterator[TensorRow]:
    for name, param in module.named_parameters():
        yield _row(prefix + name, "parameter", param)
    for name, buffer in module.named_buffers():
        yield _row(prefix + name, "buffer", buffer)
    for sub_name, sub in module.named_modules():
        for attr, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not attr.startswith("_"):
                yield _row(prefix + (f"{sub_name}.{attr}" if sub_name else attr), "attribute", value)


def _is_namespace(obj: Mapping) -> bool:
    return "__name__" in obj or "__builtins__" in obj


def _walk(obj: object, name: str, seen: set[int]) -> Iterator[TensorRow]:
    if isinstance(obj, torch.Tensor):
        yield _row(name or "tensor", "parameter" if isinstance(obj, nn.Parameter) else "tensor", obj)
        return
    if not isinstance(obj, (nn.Module, Mapping, list, tuple)) or id(obj) in seen:
        return
    seen = seen | {id(obj)}
    if isinstance(obj, nn.Module):
        yield from _module_rows(obj, f"{name}." if name else "")
    elif isinstance(obj, Mapping):
        namespace = not name and _is_namespace(obj)
        for key, value in obj.items():
            if namespace and (not isinstance(key, str) or key.startswith("_") or key in _IPYTHON_HISTORY):
                continue
            yield from _walk(value, f"{name}[{key!r}]" if name else str(key), seen)
    elif hasattr(obj, "_fields"):  # a namedtuple: name its items by field
        for field, value in zip(obj._fields, obj, strict=True):
            yield from _walk(value, f"{name}.{field}" if name else field, seen)
    else:
        for index, value in enumerate(obj):
            yield from _walk(value, f"{name}[{index}]", seen)


def tensor_table(obj: object) -> TensorTable:
    """Return a table of every tensor in `obj`: a namespace, a module, a tensor or nested containers.

    A namespace (a dict such as `globals()`) skips names starting with "_", IPython's `In`/`Out` history
    and everything that holds no tensor; a module found in it is listed as its parameters, buffers and
    plain tensor attributes (kind "attribute": `Module.to()` does not move those). Anything else that holds
    no tensor gives an empty table.
    """
    return TensorTable(tuple(_walk(obj, "", set())))
