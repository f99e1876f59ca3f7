"""The course's one unit convention, and the only place that formats bytes and bandwidth.

- Sizes (bytes of a tensor, a buffer, memory) are binary: KiB = 2**10, MiB = 2**20, GiB = 2**30 bytes.
- Bandwidth is decimal, as PCIe and GPU datasheets quote it: GB/s = 10**9 bytes per second.

So "256 MiB" is a size and "12.4 GB/s" a rate; a size is never labelled KB, MB or GB.
"""

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
GB = 10**9  # for bandwidth only: GB/s = GB bytes per second

_SIZE_UNITS = (("KiB", KiB), ("MiB", MiB), ("GiB", GiB), ("TiB", TiB))


def format_bytes(nbytes: int) -> str:
    """Return a byte count in binary units: '1023 B', '4 KiB', '1.5 MiB', '2 GiB' (whole multiples lose '.0').
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float):
        raise TypeError(f"a byte count must be a number, got {type(nbytes).__name__} {nbytes!r}")
    if nbytes < 0:
        return "-" + format_bytes(-nbytes)
    if nbytes < KiB:
        return f"{nbytes:.0f} B"
    # the first unit in which the value, as printed, stays below 1024 (1048575 bytes is "1.0 MiB", not "1024.0
    # KiB")
    unit, scale = next(((u, s) for u, s in _SIZE_UNITS if round(nbytes / s, 1) < 1024), _SIZE_UNITS[-1])
    if nbytes % scale == 0:
        return f"{nbytes // scale:.0f} {unit}"
    return f"{nbytes / scale:.1f} {unit}"


def format_bandwidth(bytes_per_second: float, digits: int = 1) -> str:
    """Return a rate in GB/s (10**9 bytes per second), e.g. 12.4e9 -> '12.4 GB/s'."""
    return f"{bytes_per_second / GB:.{digits}f} GB/s"
