"""simulate, trace_stats and read_trace against the CLI and hand-computed references."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import tiercache
from conftest import make_msr, run_cli

# (Python options, the same configuration as CLI flags)
CONFIGS = [
    ({"cache_size": "256KiB"}, ["--cache-size", "256KiB"]),
    (
        {"cache_size": "10%", "eviction": "arc", "write_policy": "write-through"},
        ["--cache-size", "10%", "--eviction", "arc", "--write-policy", "write-through"],
    ),
    (
        {"cache_size": "64lines", "line_size": "8KiB", "assoc": "direct", "write_policy": "write-hdd-inv", "replay": "closed", "queue_depth": 4},
        ["--cache-size", "64lines", "--line-size", "8KiB", "--assoc", "direct", "--write-policy", "write-hdd-inv", "--replay", "closed", "--queue-depth", "4"],
    ),
    (
        {"cache_size": "5%", "admission": "nhit", "nhit_threshold": 2, "nhit_trigger": 0.5, "no_timing": True},
        ["--cache-size", "5%", "--admission", "nhit", "--nhit-threshold", "2", "--nhit-trigger", "0.5", "--no-timing"],
    ),
    (
        {"cache_size": "1MiB", "assoc": "8-way", "eviction": "s3fifo", "dirty_target": 0.5, "clean_rate": 1, "no_baseline": True},
        ["--cache-size", "1MiB", "--assoc", "8-way", "--eviction", "s3fifo", "--dirty-target", "0.5", "--clean-rate", "1", "--no-baseline"],
    ),
    (
        {"cache_size": "2%", "admission": "2lbs", "2lbs_window": 100, "timed_cleaning": "off", "clean_rate": 4, "no_timing": True},
        ["--cache-size", "2%", "--admission", "2lbs", "--2lbs-window", "100", "--timed-cleaning", "off", "--clean-rate", "4", "--no-timing"],
    ),
    (
        {"cache_size": "1MiB", "admission": "nhit", "nhit_trigger": "50%", "dirty_target": "5%", "no_timing": True},
        ["--cache-size", "1MiB", "--admission", "nhit", "--nhit-trigger", "50%", "--dirty-target", "5%", "--no-timing"],
    ),
]


def test_fractions_as_percentages_or_shares(msr_trace):
    """A share option means the same as `'N%'` and as the number N/100."""
    path, _ = msr_trace
    base = {"cache_size": "1MiB", "format": "msr", "admission": "nhit", "no_timing": True}
    pct = tiercache.simulate(str(path), nhit_trigger="50%", dirty_target="5%", **base)
    num = tiercache.simulate(str(path), nhit_trigger=0.5, dirty_target=0.05, **base)
    assert pct == num
    with pytest.raises(ValueError, match="dirty_target.*150% is not a share"):
        tiercache.simulate(str(path), dirty_target="150%", **base)


@pytest.mark.parametrize("options,flags", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_simulate_equals_cli_json(msr_trace, cli, options, flags):
    """Same configuration, same keys and identical numbers as `tiercache sim --json`."""
    path, _ = msr_trace
    expected = json.loads(run_cli(cli, "sim", "--trace", str(path), "--format", "msr", *flags, "--json").stdout)
    got = tiercache.simulate(str(path), format="msr", **options)
    assert set(got) == set(expected)
    assert got == expected


# Every SSD cache policy option, none at its default: as Python and as `format` flags.
ALL_POLICY = {
    "line_size": "8KiB", "sub_block": "4KiB", "assoc": "4-way", "eviction": "arc",
    "write_policy": "write-back", "no_write_allocate": True, "admission": "nhit",
    "seq_cutoff": "1MiB", "nhit_threshold": 2, "nhit_trigger": 0.5, "2lbs_levels": "frequency",
    "2lbs_window": 1000, "dirty_target": 0.3, "clean_rate": 3, "timed_cleaning": "off",
}


def _flags(options):
    out = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        else:
            out += [flag, str(v)]
    return out


def test_cache_config_is_the_formatted_config(cli, tmp_path):
    """One builder: `cache_config` gives what `tiercache format` records with the
    same options (read back by `sim --like`, which simulates exactly it)."""
    backing = tmp_path / "backing.img"
    backing.write_bytes(b"")
    os.truncate(backing, 64 << 20)
    cache = tmp_path / "cache.img"
    run_cli(cli, "format", "--cache", str(cache), "--backing", str(backing), "--size", "12MiB", *_flags(ALL_POLICY))
    trace = tmp_path / "t.csv"
    make_msr(trace, n=300)
    like = json.loads(run_cli(cli, "sim", "--trace", str(trace), "--like", str(cache), "--no-timing", "--json").stdout)
    cfg = tiercache.cache_config(like["cache_size_bytes"], **ALL_POLICY)
    assert cfg["cache_bytes"] == like["cache_size_bytes"]
    assert cfg["assoc"] == {"ways": 4} and cfg["eviction"] == "arc" and cfg["write_allocate"] is False
    assert cfg["admission"] == {
        "kind": "nhit", "seq_cutoff_bytes": 1 << 20, "nhit_threshold": 2, "nhit_trigger": 0.5,
        "twolbs_metadata": False, "twolbs_frequency": True, "twolbs_window": 1000,
    }
    assert cfg["cleaning"] == {"pressure_lines": 3, "timed": False} and cfg["dirty_target"] == 0.3
    got = tiercache.simulate(trace, cache_size=f"{like['cache_lines']}lines", no_timing=True, **ALL_POLICY)
    assert got == like


@pytest.mark.parametrize(
    "option,value,message",
    [
        ("eviction", "mru", "unknown eviction policy 'mru' (allowed: lru, fifo, arc, s3fifo)"),
        ("nhit_trigger", 1.5, "1.5 is not a share (allowed: a percentage from 0% to 100% such as 10%, or a share from 0.0 to 1.0 such as 0.1)"),
        ("timed_cleaning", "sometimes", "'sometimes' is not understood (allowed: on, off)"),
    ],
)
def test_cache_config_errors_are_the_cli_errors(cli, tmp_path, option, value, message):
    with pytest.raises(tiercache.OptionError) as e:
        tiercache.cache_config(64 << 20, **{option: value})
    assert str(e.value) == f"option {option}: {message}"
    r = subprocess.run(
        [cli, "format", "--cache", str(tmp_path / "c.img"), "--backing", str(tmp_path / "c.img"), "--size", "8MiB",
         "--" + option.replace("_", "-"), str(value)],
        capture_output=True, text=True,
    )
    # The argument parser names the flag as `'--nhit-trigger <NHIT_TRIGGER>': `.
    flag = f"--{option.replace('_', '-')}"
    assert r.returncode != 0 and message in r.stderr and flag in r.stderr.split(message)[0], r.stderr


def test_cli_flag_spellings_are_accepted(msr_trace):
    path, _ = msr_trace
    a = tiercache.simulate(path, format="msr", cache_size="64KiB", no_timing=True, twolbs_window=10, admission="2lbs")
    b = tiercache.simulate(path, **{"--format": "msr", "cache-size": "64KiB", "no-timing": True, "2lbs_window": 10, "admission": "2lbs"})
    assert a == b


def test_unknown_option_name_lists_allowed(msr_trace):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError) as e:
        tiercache.simulate(path, cache_size="1MiB", evictoin="arc")
    msg = str(e.value)
    assert "evictoin" in msg and "allowed" in msg and "eviction" in msg and "write_policy" in msg


@pytest.mark.parametrize(
    "option,value,allowed",
    [
        ("eviction", "lfu", "lru, fifo, arc, s3fifo"),
        ("replay", "sideways", "open, closed"),
        ("mode", "bogus", "cache, ssd"),
        ("2lbs_levels", "data", "metadata, frequency, both"),
        ("cache_size", "lots", "percentage"),
    ],
)
def test_unknown_option_value_names_option_and_allowed(msr_trace, option, value, allowed):
    path, _ = msr_trace
    opts = {"cache_size": "1MiB", option: value}
    with pytest.raises(ValueError) as e:
        tiercache.simulate(path, format="msr", **opts)
    assert isinstance(e.value, tiercache.OptionError)
    assert option in str(e.value) and allowed in str(e.value) and value in str(e.value)


def test_list_value_points_to_sweep(msr_trace):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError, match="eviction.*sweep"):
        tiercache.simulate(path, cache_size="1MiB", eviction="lru,arc")


def test_flag_needs_bool(msr_trace):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError, match="no_timing"):
        tiercache.simulate(path, cache_size="1MiB", no_timing="yes")


def test_bad_trace_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    make_msr(p, n=50, bad_line=17)
    with pytest.raises(tiercache.TraceError) as e:
        tiercache.simulate(p, format="msr", cache_size="1MiB")
    assert e.value.path == str(p)
    assert e.value.line == 17
    assert f"{p}:17" in str(e.value)
    with pytest.raises(tiercache.TraceError) as e2:
        list(tiercache.read_trace(p, format="msr"))
    assert e2.value.line == 17
    # skip_bad reads past it, as the CLI's --skip-bad does
    assert tiercache.trace_stats(p, format="msr", skip_bad=True)["requests"] == 49


def test_missing_trace():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tiercache.simulate("/nonexistent/trace.csv", cache_size="1MiB")


def test_gil_is_released(tmp_path):
    """The simulation reads its trace from a FIFO that the calling process's main
    thread writes while the simulation runs in another thread: this only
    completes if simulate lets go of the GIL (otherwise it deadlocks, and the
    subprocess is stopped by the timeout)."""
    script = textwrap.dedent(
        f"""
        import os, threading, tiercache
        fifo = {str(tmp_path / 'trace.fifo')!r}
        os.mkfifo(fifo)
        data = open({str(tmp_path / 'src.csv')!r}, 'rb').read()
        out = {{}}
        t = threading.Thread(target=lambda: out.update(tiercache.simulate(
            fifo, format='msr', cache_size='1MiB', replay='closed', no_baseline=True, no_timing=True)))
        t.start()
        with open(fifo, 'wb') as f:   # blocks until the simulator opens the FIFO
            f.write(data)
        t.join()
        print(out['requests'])
        """
    )
    make_msr(tmp_path / "src.csv", n=500)
    try:
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("simulate held the GIL: the main thread could not feed the trace")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "500"


def test_trace_stats_hand_computed(msr_trace):
    path, recs = msr_trace
    st = tiercache.trace_stats(path, line_size="4KiB", format="msr")
    blocks = set()
    for _, off, ln, _ in recs:
        blocks.update(range(off // 4096, (off + ln - 1) // 4096 + 1))
    assert st["requests"] == len(recs)
    assert st["reads"] == sum(1 for r in recs if r[3] == "read")
    assert st["bytes_written"] == sum(r[2] for r in recs if r[3] == "write")
    assert st["unique_blocks"] == len(blocks)
    assert st["footprint_bytes"] == len(blocks) * 4096
    assert st["duration_ns"] == recs[-1][0] - recs[0][0]


def test_trace_stats_equals_cli(msr_trace, cli):
    path, _ = msr_trace
    r = subprocess.run([cli, "trace", "stats", "--help"], capture_output=True, text=True)
    if "--json" not in r.stdout:
        pytest.skip("this CLI build has no `trace stats --json`")
    flag = "--line-size" if "--line-size" in r.stdout else None
    args = [cli, "trace", "stats", str(path), "--format", "msr", "--json"] + ([flag, "8KiB"] if flag else [])
    expected = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    got = tiercache.trace_stats(path, line_size="8KiB" if flag else "4KiB", format="msr")
    assert {k: got[k] for k in expected if k in got} == {k: v for k, v in expected.items() if k in got}


def test_read_trace_records(msr_trace):
    path, recs = msr_trace
    rows = list(tiercache.read_trace(path, format="msr"))
    assert [(t, o, ln, k) for t, o, ln, k, _ in rows] == recs
    df = tiercache.read_trace(path, as_frame=True, limit=100, format="msr")
    assert list(df.columns) == ["time_ns", "offset", "length", "kind", "class"]
    assert len(df) == 100
    assert df["offset"].tolist() == [r[1] for r in recs[:100]]


def test_option_defaults_are_the_cli_defaults():
    d = tiercache.option_defaults()
    assert d["line_size"] == "4KiB" and d["eviction"] == "lru" and d["write_policy"] == "write-back"
    assert d["cache_size"] is None


def test_signature_shows_typed_defaults():
    import inspect

    sig = inspect.signature(tiercache.simulate)
    defaults = tiercache.option_defaults()
    for name, p in sig.parameters.items():
        if p.kind is not p.KEYWORD_ONLY:
            continue
        cli_name = name.replace("twolbs_", "2lbs_")
        assert cli_name in defaults, name
        d = defaults[cli_name]
        if name == "queue_depth":  # 1, in closed loop only
            assert p.default is None
        elif d is None:
            assert p.default is None, name
        elif d in ("true", "false"):
            assert p.default is (d == "true"), name
        else:
            assert str(p.default) == d, name
        assert p.annotation != inspect.Parameter.empty, name


@pytest.mark.parametrize(
    "option, value, expect",
    [
        ("nhit_threshold", "3", "nhit_threshold: expected an integer"),
        ("clean_rate", 2.5, "clean_rate: expected an integer"),
        ("dirty_target", [0.2], "dirty_target: expected a share"),
        ("eviction", 3, "eviction: expected a string.*allowed: lru, fifo, arc, s3fifo"),
        ("write_policy", True, "write_policy.*allowed: write-back"),
        ("replay", 1, "replay.*allowed: open, closed"),
        ("skip_bad", 1, "skip_bad: expected True or False"),
    ],
)
def test_wrong_types_are_type_errors_naming_option(msr_trace, option, value, expect):
    path, _ = msr_trace
    with pytest.raises(TypeError, match=expect):
        tiercache.simulate(path, cache_size="1MiB", **{option: value})


def test_sweep_checks_types_before_running(msr_trace, cache_dir):
    path, _ = msr_trace
    with pytest.raises(TypeError, match="queue_depth"):
        tiercache.sweep(path, {"cache_size": ["1MiB"], "queue_depth": ["4"]}, cache_dir=cache_dir, progress=False)


def test_python_options_are_the_sim_commands_options(cli):
    """Every option of `tiercache sim` that configures a run is an option of
    `tiercache.simulate`, and Python has none the command lacks."""
    import re

    help_text = subprocess.run([cli, "sim", "--help"], capture_output=True, text=True, check=True).stdout
    longs = {m.replace("-", "_") for m in re.findall(r"^\s+(?:-\w, )?--([\w-]+)", help_text, re.M)}
    # Options about the command itself, not the configuration of a run:
    # where the trace and the output are, printing, parallelism, reading a
    # formatted device.
    command_only = {"trace", "json", "out", "jobs", "like", "verbose", "quiet", "help", "version"}
    assert set(tiercache._TYPES) == longs - command_only
