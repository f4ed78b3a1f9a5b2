"""tiercache: the hybrid SSD/HDD cache simulator as a Python library.

The simulator is the same Rust code as the ``tiercache`` command:

- :func:`simulate` runs one configuration and returns the dict that
  ``tiercache sim --json`` prints (same keys, same numbers);
- :func:`sweep` runs the cross product of traces and option values on local
  processes or Ray tasks, caching every run in Parquet (see :mod:`tiercache.sweeps`);
- :func:`trace_stats` and :func:`read_trace` inspect traces;
- :mod:`tiercache.plot` draws sweep results, :mod:`tiercache.specs` holds the
  papers' experiments as named sweeps.

Options are spelled as the CLI flags with ``_`` for ``-``
(``cache_size="10GiB"``, ``eviction="arc"``, ``write_policy="write-through"``,
``no_timing=True``); ``2lbs_levels``/``2lbs_window`` may also be written
``twolbs_levels``/``twolbs_window``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

from . import _native
from ._native import OptionError, TraceError

__version__: str = _native.__version__

__all__ = [
    "simulate",
    "sweep",
    "trace_stats",
    "read_trace",
    "option_defaults",
    "plot",
    "OptionError",
    "TraceError",
    "__version__",
]

#: Read options shared by every function that opens a trace.
_READ_OPTIONS = ("format", "block_size", "volume", "skip_bad")


def _plain(v: Any) -> Any:
    """Paths as strings and numpy scalars as Python numbers."""
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if hasattr(v, "item") and not isinstance(v, (str, bytes, bool, int, float)):
        return v.item()
    return v


def _clean(options: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in options.items()}


def option_defaults() -> dict[str, str | None]:
    """Every option :func:`simulate` accepts, with the CLI's default (None: no default)."""
    return dict(_native.option_defaults())


def simulate(trace: str | os.PathLike, **options: Any) -> dict[str, Any]:
    """Replay ``trace`` through one cache configuration.

    Returns the object ``tiercache sim --trace TRACE ... --json`` prints,
    as a dict with exactly its keys (``hit_ratio``, ``mean_response_us``,
    ``baseline``, ``trace``, ...). The GIL is released during the replay, so
    threads can run simulations in parallel.

    Every ``mode`` of ``tiercache sim`` is available: ``cache`` (the default)
    runs in this process; the others (``ssd``, ``ssc``, ``ssc-v``, ``tier``,
    ``tica``, ``ucache``, ``srac``) run the ``tiercache`` command (see
    :mod:`tiercache._modes`).

    Raises :class:`OptionError` (a ValueError) naming the option and its
    allowed values for an unknown option or value, TypeError for a value of
    the wrong type, :class:`TraceError` (a ValueError with ``path`` and
    ``line`` attributes) for a malformed trace line, FileNotFoundError for a
    missing trace.
    """
    return json.loads(_simulate_json(os.fspath(trace), _clean(options)))


def _simulate_json(trace: str, options: dict[str, Any]) -> str:
    from . import _modes

    mode = _modes.check_mode(options.get("mode", "cache"))
    if mode == "cache":
        return _native.simulate_json(trace, options)
    return _modes.simulate_json(trace, options)


def trace_stats(trace: str | os.PathLike, line_size: str | int = "4KiB", **read_options: Any) -> dict[str, Any]:
    """Summary of a trace (``tiercache trace stats``): request mix, bytes,
    footprint at ``line_size``, size histogram, sequentiality, duration.

    ``read_options``: ``format``, ``block_size``, ``volume``, ``skip_bad``.
    """
    _check_read_options(read_options)
    ls = f"{line_size}B" if isinstance(line_size, int) else str(line_size)
    return json.loads(_native.trace_stats_json(os.fspath(trace), _clean(read_options), ls))


def _check_read_options(opts: dict[str, Any]) -> None:
    for k in opts:
        if _native.canonical_option(k) not in _READ_OPTIONS:
            raise OptionError(f"unknown option '{k}' for reading a trace (allowed: {', '.join(_READ_OPTIONS)})")


#: Columns of :func:`read_trace` requests.
REQUEST_FIELDS = ("time_ns", "offset", "length", "kind", "class")


def _requests(trace: str | os.PathLike, read_options: dict[str, Any], batch: int = 65536) -> Iterator[tuple]:
    it = _native.open_trace(os.fspath(trace), _clean(read_options))
    while True:
        rows = it.next_batch(batch)
        if not rows:
            return
        yield from rows


def read_trace(
    trace: str | os.PathLike,
    *,
    as_frame: bool | None = None,
    limit: int | None = None,
    **read_options: Any,
):
    """The requests of a trace, normalised to bytes and nanoseconds.

    With ``as_frame=False`` an iterator of tuples
    ``(time_ns, offset, length, kind, class)`` (kind: read, write, trim,
    flush; class: data, metadata, journal or None). With ``as_frame=True`` a
    pandas DataFrame with those columns (for small traces; ``limit`` caps the
    number of rows). The default is a DataFrame when ``limit`` is given,
    an iterator otherwise.

    ``read_options``: ``format``, ``block_size``, ``volume``, ``skip_bad``.
    A malformed line raises :class:`TraceError` naming the file and line.
    """
    _check_read_options(read_options)
    if as_frame is None:
        as_frame = limit is not None
    rows: Iterator[tuple] = _requests(trace, read_options)
    if limit is not None:
        import itertools

        rows = itertools.islice(rows, limit)
    if not as_frame:
        return rows
    import pandas as pd

    return pd.DataFrame.from_records(list(rows), columns=list(REQUEST_FIELDS))


from .sweeps import sweep  # noqa: E402  (cheap: pandas and Ray load on first use)
from . import plot  # noqa: E402  (cheap: matplotlib loads on first use)
