"""tiercache: the hybrid SSD/HDD cache simulator as a Python library.

The simulator is the same Rust code as the ``tiercache`` command:

- :func:`simulate` runs one configuration and returns the dict that
  ``tiercache sim --json`` prints (same keys, same numbers);
- :func:`sweep` runs the cross product of traces and option values on local
  threads or Ray tasks, caching every run in Parquet (see :mod:`tiercache.sweeps`);
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
    "mrc",
    "sweep",
    "trace_stats",
    "read_trace",
    "option_defaults",
    "MODES",
    "plot",
    "OptionError",
    "OptionTypeError",
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


class OptionTypeError(OptionError, TypeError):
    """An option value of the wrong type: both a TypeError and an
    :class:`OptionError` (ValueError); the message names the option, the
    expected type and the allowed values."""


#: Every ``mode`` of ``tiercache sim``, all available to :func:`simulate`.
MODES: tuple[str, ...] = tuple(_native.MODES)

#: Every design by its one name (``format --design``, ``stats``, ``sim --design``).
DESIGNS: tuple[str, ...] = tuple(_native.DESIGNS)

#: Allowed values of the options that take a name, for error messages.
ALLOWED: dict[str, str] = {
    "mode": ", ".join(MODES),
    "design": ", ".join(DESIGNS),
    "assoc": "direct, N-way (e.g. 8-way), full",
    "eviction": "lru, fifo, arc, s3fifo",
    "write_policy": "write-back, write-through, write-hdd-upd, write-hdd-inv, read-only",
    "admission": "always, seq-cutoff, nhit, 2lbs",
    "2lbs_levels": "metadata, frequency, both (comma-separated)",
    "replay": "open, closed",
    "timed_cleaning": "on, off",
    "tier_policy": "oodt, frequency, hystor, raf (comma-separated)",
    "capacity": "sum, slow",
    "plan_clock": "wall, requests",
    "tica_policy": "ef, wed, adaptive",
    "ftl": "hybrid, page, page-log, log (log: --mode ssc only)",
    "victim": "cost-benefit, greedy",
    "compress": "off, lz4, zstd, zstd:LEVEL (LEVEL 1-22; mode='ssc', ftl='log' only)",
    "format": "msr, arc-lis, disksim, blkparse, fiu, tencent, systor, cloudphysics, vscsi, blockid, native",
}

_SIZE = "a SIZE such as '64MiB', a number of lines such as '1000lines', or a percentage such as '10%' (a bare number is refused: it would mean bytes in one place and lines in another)"
_BYTES = "a size in bytes such as '4KiB' or 4096"
#: Type of every option: (accepted Python types, what to write in an error).
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "mode": ((str,), "a string"),
    "design": ((str,), "a string"),
    "cache_size": ((str,), _SIZE),
    "fast_tier_size": ((str,), _SIZE),
    "dram_size": ((str,), _SIZE),
    "line_size": ((str, int), _BYTES),
    "sub_block": ((str, int), _BYTES),
    "tier_block": ((str, int), _BYTES),
    "tier_volume_size": ((str, int), _BYTES),
    "capacity": ((str,), "a string"),
    "plan_clock": ((str,), "a string"),
    "plan_every": ((int,), "an integer"),
    "moves_per_round": ((int,), "an integer"),
    "seq_cutoff": ((str, int), _BYTES),
    "block_size": ((str, int), _BYTES),
    "assoc": ((str,), "a string"),
    "eviction": ((str,), "a string"),
    "write_policy": ((str,), "a string"),
    "admission": ((str,), "a string"),
    "2lbs_levels": ((str,), "a string"),
    "replay": ((str,), "a string"),
    "tier_policy": ((str,), "a string"),
    "tica_policy": ((str,), "a string"),
    "ftl": ((str,), "a string"),
    "victim": ((str,), "a string"),
    "compress": ((str,), "a string"),
    "compressibility": ((str,), "a model file path or a distribution such as '1:0.2,2:0.5,8:0.3'"),
    "compress_us": ((int, float), "a number"),
    "decompress_us": ((int, float), "a number"),
    "segment_size": ((str, int), _BYTES),
    "format": ((str,), "a string"),
    "volume": ((str, int), "a string"),
    "profile": ((str,), "a path"),
    "nhit_threshold": ((int,), "an integer"),
    "2lbs_window": ((int,), "an integer"),
    "clean_rate": ((int,), "an integer"),
    "timed_cleaning": ((str,), "a string"),
    "queue_depth": ((int,), "an integer"),
    "nhit_trigger": ((int, float, str), "a share such as 0.8 or a percentage such as '80%'"),
    "dirty_target": ((int, float, str), "a share such as 0.2 or a percentage such as '20%'"),
    "no_write_allocate": ((bool,), "True or False"),
    "no_timing": ((bool,), "True or False"),
    "no_baseline": ((bool,), "True or False"),
    "skip_bad": ((bool,), "True or False"),
}


def _check_types(options: dict[str, Any]) -> None:
    """TypeError (:class:`OptionTypeError`) for a value of the wrong type."""
    for k, v in options.items():
        if v is None:
            continue
        name = _native.canonical_option(k)
        if name not in _TYPES:
            continue  # unknown names are refused by the simulator with the list of options
        types, what = _TYPES[name]
        wrong = isinstance(v, bool) and bool not in types or not isinstance(v, types)
        if wrong:
            allowed = f" (allowed: {ALLOWED[name]})" if name in ALLOWED else ""
            raise OptionTypeError(f"option {name}: expected {what}, got {type(v).__name__} {v!r}{allowed}")


def simulate(
    trace: str | os.PathLike,
    *,
    design: str | None = None,
    mode: str = "cache",
    cache_size: str | None = None,
    line_size: str | int = "4KiB",
    sub_block: str | int | None = None,
    assoc: str = "full",
    eviction: str = "lru",
    write_policy: str = "write-back",
    no_write_allocate: bool = False,
    admission: str = "always",
    seq_cutoff: str | int = "4MiB",
    nhit_threshold: int = 3,
    nhit_trigger: float | str = 0.8,
    twolbs_levels: str = "metadata,frequency",
    twolbs_window: int = 0,
    dirty_target: float | str = 0.2,
    clean_rate: int = 2,
    timed_cleaning: str = "on",
    no_timing: bool = False,
    replay: str | None = None,
    queue_depth: int | None = None,
    profile: str | os.PathLike | None = None,
    no_baseline: bool = False,
    format: str | None = None,
    block_size: str | int = "512B",
    volume: str | None = None,
    skip_bad: bool = False,
    tier_policy: str = "oodt",
    fast_tier_size: str | int | None = None,
    tier_block: str | int = "4KiB",
    capacity: str = "sum",
    plan_every: int = 1000,
    moves_per_round: int | None = None,
    plan_clock: str = "wall",
    tier_volume_size: str | int | None = None,
    tica_policy: str = "adaptive",
    dram_size: str | int | None = None,
    ftl: str = "hybrid",
    segment_size: str | int = "1MiB",
    victim: str = "cost-benefit",
    **options: Any,
) -> dict[str, Any]:
    """Replay ``trace`` through one cache configuration.

    Returns the object ``tiercache sim --trace TRACE ... --json`` prints,
    as a dict with exactly its keys (``hit_ratio``, ``mean_response_us``,
    ``baseline``, ``trace``, ...; docs/results.md lists them). The GIL is
    released during the replay, so threads can run simulations in parallel.

    Every ``mode`` of ``tiercache sim`` runs in this process, by the same
    code as the command: ``cache`` (the default), ``ssd``, ``ssc``,
    ``ssc-v``, ``tier``, ``tica``, ``ucache`` and ``srac`` (:data:`MODES`).
    ``design`` picks a design by the name ``format --design`` and ``stats``
    use (:data:`DESIGNS`: ``azor``, ``flashtier``, ``oodt``, ``tica``), as
    ``sim --design`` does; it sets ``mode`` (and ``ftl``), so give one or
    the other.

    The keyword defaults are the CLI's; ``replay=None`` picks open-loop replay
    when the trace has timestamps, ``queue_depth=None`` is 1 in closed loop.
    ``options`` takes the other spellings of the same options (``"line-size"``,
    ``"2lbs_window"``).

    Raises :class:`OptionError` (a ValueError) naming the option and its
    allowed values for an unknown option or value, :class:`OptionTypeError`
    (a TypeError and an OptionError) for a value of the wrong type,
    :class:`TraceError` (a ValueError with ``path`` and ``line`` attributes)
    for a malformed trace line, FileNotFoundError for a missing trace.
    """
    given = dict(locals())
    del given["trace"], given["options"]
    # Only what differs from the defaults is passed on, as on the command line.
    chosen = {
        k: v for k, v in given.items() if not (type(v) is type(_SIMULATE_DEFAULTS[k]) and v == _SIMULATE_DEFAULTS[k])
    }
    chosen.update(options)
    return json.loads(_simulate_json(os.fspath(trace), _clean(chosen)))


def _simulate_json(trace: str, options: dict[str, Any]) -> str:
    _check_types(options)
    return _native.simulate_json(trace, options)


def mrc(
    trace: str | os.PathLike,
    *,
    policy: str = "lru",
    method: str | None = None,
    rate: float | str | None = None,
    sample_size: int | None = None,
    sizes: str | int | list[str | int] = "auto",
    line_size: str | int = "4KiB",
    format: str | None = None,
    block_size: str | int = "512B",
    volume: str | None = None,
    skip_bad: bool = False,
    jobs: int | None = None,
):
    """The miss-ratio curve of ``trace``: ``tiercache mrc --json`` as a pandas
    DataFrame, one row per cache size (``cache_lines``, ``hit_ratio``,
    ``read_hit_ratio``, ``write_hit_ratio``, ``working_set_lines``, ``policy``,
    ``method`` ...). ``method`` is ``exact`` (LRU, equal to :func:`simulate`
    with ``no_timing=True`` when every write covers whole lines), ``shards``
    (LRU, sampled at ``rate`` or of at most ``sample_size`` lines) or
    ``minisim`` (any ``policy``, caches scaled by ``rate``). ``sizes`` takes
    sizes as the CLI does (``"64MiB"``, ``"1000lines"``, ``"10%"``, ``auto``);
    an integer is a number of lines."""
    import pandas as pd

    def size(v: str | int) -> str:
        return f"{v}lines" if isinstance(v, int) and not isinstance(v, bool) else str(_plain(v))

    if isinstance(sizes, (list, tuple)):
        sizes = ",".join(size(v) for v in sizes)
    else:
        sizes = size(sizes)
    flags = ["--policy", str(policy), "--sizes", sizes, "--line-size", str(_plain(line_size)),
             "--block-size", str(_plain(block_size))]
    for name, v in (("method", method), ("rate", rate), ("sample-size", sample_size),
                    ("format", format), ("volume", volume), ("jobs", jobs)):
        if v is not None:
            flags += [f"--{name}", str(_plain(v))]
    if skip_bad:
        flags.append("--skip-bad")
    rows = json.loads(_native.mrc_json(os.fspath(trace), flags))
    return pd.DataFrame.from_records(rows)


def cache_config(cache_bytes: int, **options: Any) -> dict[str, Any]:
    """The SSD cache configuration these `simulate` options give for a cache of
    `cache_bytes` (the builder `tiercache sim` and `tiercache format` share):
    equal to `config` in `tiercache stats --json` of a cache formatted with
    the same options. Raises OptionError naming a bad option."""
    _check_types(options)
    return json.loads(_native.cache_config_json(int(cache_bytes), _clean(options)))


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


import inspect as _inspect  # noqa: E402

#: Keyword defaults of :func:`simulate` (the CLI's).
_SIMULATE_DEFAULTS: dict[str, Any] = {
    n: p.default for n, p in _inspect.signature(simulate).parameters.items() if p.kind is p.KEYWORD_ONLY
}

from .sweeps import sweep  # noqa: E402  (cheap: pandas and Ray load on first use)
from . import plot  # noqa: E402  (the figures are drawn by the native module)
