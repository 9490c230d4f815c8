"""Issue 28 items 3 and 7: a grid's ``simulate: time:`` block (SLO columns, gates on them, Orca's rates), and its
simulations on several local cores (``--jobs``) or on Ray, with the same results."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from kvdash.errors import InputError
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid
from tests.cli_run import run

GRID = """\
title: time
models: [llama-3.1-8b]
workloads:
  chat: {length: 512}
defaults: {gpu: h100-80gb}
grid:
  kv_dtype: [bf16, fp8]
  block_size: [16, 32]
simulate:
  workload: sharegpt
  requests: 60
  time:
    slo: "ttft=2s,tpot=30ms"
    users: 16
    rates: "1:16:3"
    latency_bound: 0.05
    policies: [paged, max]
gates:
  - {name: "16 users at TPOT <= 50 ms", metric: time_tpot_p90_ms, max: 50}
  - {name: "SLO met by 16 users", metric: time_slo_users, min: 16}
"""


def _grid(tmp_path: Path, text: str = GRID) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def test_time_block_columns_and_gates_on_them(tmp_path):
    """The time block adds its columns (and no step-unit ones without policies:), and gates may name them."""
    spec = parse_grid(_grid(tmp_path))
    assert spec.simulate is not None and spec.simulate.policies == ()
    assert [g.metric for g in spec.gates] == ["time_tpot_p90_ms", "time_slo_users"]
    df = expand(spec).frame
    cols = [c for c in df.columns if c.startswith(("time_", "sim_"))]
    assert cols[:7] == ["time_gpu", "time_kv_requests", "time_not_timed", "time_slo_users", "time_slo_rate",
                        "time_slo_rate_met_up_to", "time_binds"]
    assert df.get_column("time_not_timed").null_count() == 4  # every point timed
    assert "time_paged_over_max" in cols and not any(c.startswith("sim_") for c in cols)
    assert df.get_column("time_gpu").to_list() == ["h100-80gb"] * 4
    # fp8 halves the bytes per token: twice the mean-length requests fit (within a block's rounding)
    kv = dict(zip(zip(df["kv_dtype"], df["block_size"], strict=True), df["time_kv_requests"], strict=True))
    assert abs(kv[("fp8", 16)] - 2 * kv[("bf16", 16)]) <= 2
    assert set(df.get_column("time_binds").to_list()) <= {"kv", "max_num_seqs", "compute", "none"}
    assert (df.get_column("time_tpot_p90_ms") > 0).all()
    # paged sustains at least Max's rate: the same scheduler, only the reservation differs
    assert (df.get_column("time_paged_over_max") >= 1).all()


def test_time_gate_fails_where_the_slo_is_missed(tmp_path, capsys):
    """A TPOT gate tighter than any point's p90 fails every point: --check exits 1."""
    text = GRID.replace("metric: time_tpot_p90_ms, max: 50", "metric: time_tpot_p90_ms, max: 0.5")
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--check", "--out", str(tmp_path / "out"), "-q",
                        "--jobs", "1"], capsys)
    assert code == 1 and "time_tpot_p90_ms" in err


@pytest.mark.parametrize("bad, where", [
    ('slo: "ttft=fast"', "simulate.time.slo"),
    ("policies: [paged, orca]", "simulate.time.policies"),
    ("latency_bound: 0", "simulate.time.latency_bound"),
    ("workloads: {nope: sharegpt}", "simulate.time.workloads"),
    ("workloads: {chat: lmsys}", "simulate.time.workloads"),
])
def test_time_block_bad_input_is_one_line(tmp_path, capsys, bad, where):
    key = bad.split(":")[0]
    lines = [line for line in GRID.splitlines() if not line.startswith(f"    {key}:")]  # the time block's own
    text = "\n".join(lines).replace("  time:\n", f"  time:\n    {bad}\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
    assert code == 2 and where in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_gate_on_a_time_column_needs_the_time_block(tmp_path, capsys):
    text = GRID.split("simulate:")[0] + "gates:\n  - {metric: time_slo_users, min: 1}\n"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
    assert code == 2 and "gates[0].metric" in err


def test_jobs_give_the_same_results_as_one_process(tmp_path):
    """Four points, each its own simulation: two worker processes give a frame equal to the serial one."""
    spec = parse_grid(_grid(tmp_path))
    serial = expand(spec, jobs=1).frame
    parallel = expand(spec, jobs=2).frame
    assert serial.equals(parallel)
    assert serial.height == 4


def test_step_simulations_in_parallel_are_the_same(tmp_path):
    """The step-unit simulate: block (paper-table1's shape) through two workers equals the serial run."""
    text = GRID.split("simulate:")[0] + ("simulate:\n  workload: alpaca\n  requests: 80\n  policies: [max, paged]\n"
                                          "  rates: \"0.5:2:3\"\n")
    spec = parse_grid(_grid(tmp_path, text))
    serial = expand(spec, jobs=1).frame
    assert serial.equals(expand(spec, jobs=2).frame)
    assert serial.get_column("sim_paged_capacity_rate").null_count() == 0


def test_jobs_option_checked(capsys, tmp_path):
    code, _, err = run(["sweep", str(_grid(tmp_path)), "--jobs", "-3", "--dry-run"], capsys)
    assert code == 2 and "--jobs" in err


def test_ray_tasks_match_serial(tmp_path):
    """Ray (an optional extra) on a one-machine cluster: the same frame as the serial run.  CI installs the extra
    (``.ci/run``: ``.[test,ray]``), so there the test runs; elsewhere it is skipped without Ray."""
    if os.environ.get("CI"):
        import ray
    else:
        ray = pytest.importorskip("ray")
    spec = parse_grid(_grid(tmp_path, GRID.replace("block_size: [16, 32]", "block_size: [16]")))
    serial = expand(spec, jobs=1).frame
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        got = expand(spec, use_ray=True).frame
    finally:
        ray.shutdown()
    assert serial.equals(got)


def test_run_tasks_without_ray_is_one_clear_error(monkeypatch):
    import builtins

    from kvdash.sweep import parallel

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(InputError, match=r"kvdash\[ray\]"):
        parallel.run_tasks(len, [{}], use_ray=True)


def test_frame_equality_is_not_trivially_true():
    """The determinism tests compare frames with DataFrame.equals, which does see one changed value."""
    a = pl.DataFrame({"x": [1.0, 2.0]})
    assert not a.equals(pl.DataFrame({"x": [1.0, 2.000001]}))


def test_default_jobs_are_the_idle_cores(monkeypatch):
    """4 cores at load 1.2: 3 workers; at load 15: 1 (none); never more than the cores."""
    from kvdash.sweep import parallel

    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    for load, want in ((1.2, 3), (15.0, 1), (0.0, 4)):
        monkeypatch.setattr(parallel.os, "getloadavg", lambda load=load: (load, load, load))
        assert parallel.default_jobs() == want
    assert parallel.check_jobs(0) == 4 and parallel.check_jobs(3) == 3


SMALL = """\
title: time checks
models: [llama-3.1-8b]
workloads:
  chat: {length: 2048, max_reserved: 8192}
defaults: {gpu: h100-80gb, tp: 1}
simulate:
  requests: 40
  time:
"""


def _checked(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, pl.DataFrame, Path]:
    """``kvdash sweep --check`` of a grid text: (exit code, stderr, results.csv, the output folder)."""
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "--check"], capsys)
    return code, err, pl.read_csv(out / "results.csv"), out

def test_users_above_requests_is_refused(tmp_path, capsys):
    """A closed loop of 50 users over 40 requests never runs more than 40 at once: refused, not shown as 50."""
    text = SMALL + "    users: 50\n"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
    assert code == 2 and "simulate.time.users" in err and "at most the requests simulated (40)" in err
    assert len(err.strip().splitlines()) == 1
    # per grid workload: its own requests: bound it
    text = SMALL + ("    users: 30\n    workloads:\n"
                    "      chat: {prompt: 'fixed:100', output: 'fixed:10', requests: 20}\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
    assert code == 2 and "(20 for workload chat)" in err


def test_time_requests_are_bounded_by_the_points_max_model_len(tmp_path, capsys):
    """The time simulation takes each point's max_model_len (the grid workload's max_reserved here, 8,192), not
    simulate's step-unit max_reserved (2,048 by default): a 7,936 + 256 = 8,192-token request is timed; one of
    8,193 is refused in one line naming the time workload."""
    text = SMALL + "    users: 4\n    workloads:\n      chat: {prompt: 'fixed:7936', output: 'fixed:256'}\n"
    df = expand(parse_grid(_grid(tmp_path, text))).frame
    assert df.get_column("time_gpu").to_list() == ["h100-80gb"]
    assert df.get_column("time_not_timed").to_list() == [None]
    assert df.get_column("time_tpot_p90_ms")[0] > 0
    code, _, err = run(["sweep", str(_grid(tmp_path, text.replace("fixed:256", "fixed:257"))), "--out",
                        str(tmp_path / "out"), "-q"], capsys)
    assert code == 2 and "simulate.time.workloads.chat" in err and "must fit the 8,192 tokens" in err
    assert "(40 of 40 requests longer than 8,192 tokens)" in err
    assert ".yaml:11:" in err  # the time workload's line (it named the file only)
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_gpu_without_time_figures_leaves_its_points_untimed_and_says_why(tmp_path, capsys):
    """L40S has no bandwidth/FLOP figures in the time model: its point is not timed (the reason in
    time_not_timed and the report), the others are; the grid is not refused."""
    text = SMALL.replace("defaults: {gpu: h100-80gb, tp: 1}", "defaults: {tp: 1}\ngrid:\n  gpu: [h100-80gb, l40s]") \
        + "    users: 5\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert code == 0, err
    df = pl.read_csv(out / "results.csv")
    why = dict(zip(df["gpu"], df["time_not_timed"], strict=True))
    assert why["h100-80gb"] is None and "no bandwidth and FLOP/s figures" in why["l40s"]
    md = (out / "report.md").read_text()
    assert "1 of 2 points not timed: 1 l40s: the time model has no bandwidth and FLOP/s figures" in md
    assert "a short run: 40 requests for 5 users" in md  # 40 < 10 x 5
    # the per-point table is in report.md too, named as the other tables name points
    assert "| 1 x h100-80gb | " in md and "TPOT p90 ms" in md


def test_slo_never_failed_is_shown_as_a_floor(tmp_path, capsys):
    """An SLO every simulated user meets (binds none) is reported as '>= N', not as a measured limit."""
    text = SMALL + "    slo: \"ttft=60s,tpot=1s\"\ngates:\n  - {name: many, metric: time_slo_users, min: 8}\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert code == 0, err
    df = pl.read_csv(out / "results.csv")
    assert df["time_binds"].to_list() == ["none"] and df["time_slo_users"].to_list() == [40]
    md = (out / "report.md").read_text()
    assert "≥ 40 (every user simulated met it)" in md
    # the gates table too: the point's value and the margin are floors (they were shown as plain 40 and 32)
    row = next(line for line in md.splitlines() if line.startswith("| many |"))
    assert row.endswith("| 1 x h100-80gb: ≥ 40 | 1 x h100-80gb: ≥ 40 | ≥ 32 |"), row


@pytest.mark.parametrize("bound, words", [
    (10, "above 0.2 (within the bound at every swept rate)"),  # 10 s a token: never reached at 0.1-0.2 requests/s
    (0.001, "below 0.1 (over the bound at the lowest rate)"),  # 1 ms a token: under one step's time
])
def test_a_rate_outside_the_sweep_says_which_side(tmp_path, capsys, bound, words):
    """A bound no swept rate reaches, or every one exceeds, leaves the rate column empty; the report says which."""
    text = SMALL + f"    rates: \"0.1:0.2:2\"\n    latency_bound: {bound}\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert code == 0, err
    df = pl.read_csv(out / "results.csv")
    assert df["time_paged_rate"].to_list() == [None]
    assert words in (out / "report.md").read_text()


def test_a_users_gate_above_the_requests_simulated_is_refused(tmp_path, capsys):
    """The SLO search stops at the requests simulated (40): a gate needing 256 users could never be shown to
    pass, so it is refused in one line instead of failing every point."""
    text = SMALL + "    slo: \"ttft=2s,tpot=50ms\"\ngates:\n  - {name: many, metric: time_slo_users, min: 256}\n"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
    assert code == 2 and "gates[0].min" in err and "at most the requests simulated (40)" in err


def test_a_rate_gate_passes_on_the_floor_where_no_limit_was_found(tmp_path, capsys, monkeypatch):
    """A generous SLO every Poisson rate tried meets leaves time_slo_rate empty; a min: gate on it is judged on
    time_slo_rate_met_up_to (every rate up to it met the SLO), and the report writes that floor as ">= X" (--check's
    failure line names it too).  Every run counts as steady here (in_flight 0: slo_search judges a rate over ten
    times the requests in flight, and a real engine's queue shows first)."""
    from kvdash.simulate import slo

    monkeypatch.setattr(slo, "in_flight", lambda res, rate: 0.0)
    text = SMALL + ("    slo: \"ttft=60s,tpot=1s\"\ngates:\n  - {name: rate, metric: time_slo_rate, min: 5}\n"
                    "  - {name: too fast, metric: time_slo_rate, min: 1000000000}\n")
    code, err, df, out = _checked(tmp_path, text, capsys)
    floor = df["time_slo_rate_met_up_to"][0]
    assert df["time_slo_rate"].to_list() == [None] and floor > 5
    # the first gate passes on the floor; the second cannot be shown to pass (a floor below it), so it fails
    assert code == 1 and "gate 'rate'" not in err and "gate 'too fast'" in err
    # the failure line gives the floor it was judged on, not an empty value (it said "time_slo_rate = None")
    assert (f"time_slo_rate empty, time_slo_rate_met_up_to = {floor} (no limit found below it), needs ≥ 1e+09"
            in err) and "= None" not in err
    md = (out / "report.md").read_text()
    assert f"| rate | time_slo_rate ≥ 5 | every point | 1 / 0 | 1 x h100-80gb: ≥ {floor:,.2f} |" in md


def test_points_differing_only_in_max_num_seqs_are_named_apart(tmp_path, capsys):
    """max_num_seqs swept: every table names it (the time table listed two identical labels before)."""
    text = SMALL.replace("defaults: {gpu: h100-80gb, tp: 1}", "defaults: {gpu: h100-80gb, tp: 1}\n"
                         "grid:\n  max_num_seqs: [8, 64]") + "    users: 4\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert code == 0, err
    md = (out / "report.md").read_text()
    assert "| 1 x h100-80gb, max_num_seqs 8 | " in md and "| 1 x h100-80gb, max_num_seqs 64 | " in md


def test_a_time_gate_without_a_time_block_says_where_time_columns_come_from(tmp_path, capsys):
    """A gate on a time_ column in a grid without simulate: time: is refused in one line that says where those
    columns come from (it said only 'expected a numeric result column')."""
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\ndefaults:\n  gpu: h100-80gb\ngates:\n"
                    "  - {name: fast, metric: time_tpot_p90_ms, max: 50}\n")
    code, _, err = run(["sweep", str(grid), "--dry-run"], capsys)
    assert code == 2 and "gates[0].metric" in err and "simulate: time: block" in err
    assert len(err.strip().splitlines()) == 1


def test_a_time_gate_shows_its_tightest_timed_point_beside_untimed_ones(tmp_path, capsys):
    """A gate on a time column over timed and untimed points (L40S has no time figures): the untimed point fails it
    without a value; the gates table's worst point is the timed one with the least slack, and the untimed are
    counted beside it (the worst was the untimed point, shown as '-', hiding the timed figure)."""
    text = SMALL.replace("defaults: {gpu: h100-80gb, tp: 1}", "defaults: {tp: 1}\ngrid:\n  gpu: [h100-80gb, l40s]") \
        + "    users: 4\ngates:\n  - {name: tpot, metric: time_tpot_p90_ms, max: 1000}\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    df = pl.read_csv(out / "results.csv")
    tpot = df.filter(pl.col("gpu") == "h100-80gb")["time_tpot_p90_ms"][0]
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| tpot |"))
    assert "| 1 / 1 |" in row and "(1 point without a value)" in row, row
    assert f"1 x h100-80gb: {tpot:.2f}"[:18] in row, row  # the worst: the timed point, its value shown
    # no margin: the unvalued point fails by an unknown amount (the timed point's slack would read as the gate's)
    assert row.rstrip().endswith("| - |"), row


def test_a_policy_rate_gate_reads_its_floor_where_every_swept_rate_held(tmp_path, capsys):
    """time_<policy>_rate is empty where the policy stays within the latency bound at every swept rate (its limit is
    above the sweep); a min: gate on it is judged on time_<policy>_rate_met_up_to, the highest swept rate, as
    time_slo_rate's is on its floor.  Before, the empty value failed the gate: the fastest GPUs failed, the
    slowest passed.  A policy named twice is refused in one line (it raised polars' duplicate-column error)."""
    text = SMALL.replace("requests: 40", "requests: 100") + (
        "    rates: \"1:20:3\"\n    latency_bound: 1.0\n"
        "gates:\n  - {name: rate, metric: time_paged_rate, min: 1}\n"
        "  - {name: huge, metric: time_paged_rate, min: 100}\n")
    code, err, df, out = _checked(tmp_path, text, capsys)
    assert df["time_paged_rate"].to_list() == [None] and df["time_paged_rate_met_up_to"].to_list() == [20.0]
    assert code == 1 and "gate 'rate'" not in err and "time_paged_rate_met_up_to = 20.0" in err and "gate 'huge'" in err
    md = (out / "report.md").read_text()
    assert "| rate | time_paged_rate ≥ 1 | every point | 1 / 0 |" in md
    dup = SMALL + "    rates: \"1:5:3\"\n    policies: [paged, paged]\n"
    code, _, err = run(["sweep", str(_grid(tmp_path, dup)), "--dry-run"], capsys)
    assert code == 2 and "simulate.time.policies[1]" in err and "each policy once" in err
    # refine:, latency_bound: and Orca's policies without a rates: sweep were accepted and did nothing
    for extra, where in (("refine: 3", "simulate.time.refine"), ("latency_bound: 0.2", "simulate.time.latency_bound"),
                         ("policies: [max]", "simulate.time.policies")):
        code, _, err = run(["sweep", str(_grid(tmp_path, SMALL + f"    users: 4\n    {extra}\n")), "--dry-run"], capsys)
        assert code == 2 and where in err and "rates:" in err, extra
    # a time workload with a prompt and no output names what is missing (it printed a Python dict)
    one = SMALL.replace("time:\n", "time:\n    users: 4\n    workloads:\n      chat: {prompt: \"fixed:10\"}\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, one)), "--dry-run"], capsys)
    assert code == 2 and "output missing" in err and "{'" not in err
    # the step-unit simulation's policies, twice: refused (a polars ShapeError)
    step = SMALL.replace("simulate:\n", "simulate:\n  policies: [paged, paged]\n  rates: \"0.1:0.2:2\"\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, step)), "--dry-run"], capsys)
    assert code == 2 and "simulate.policies[1]" in err and "each policy once" in err


def test_the_rates_chart_keeps_each_policy_colour_and_says_its_scale(tmp_path, capsys):
    """The rates chart gives a policy the same colour whichever order a grid lists the policies in (Max was
    red-orange in one shipped report and gold in another), names its log y axis, and a workload given both a
    preset and lengths is refused naming the keys (it printed a Python dict)."""
    from kvdash.report.timesection import COLOURS

    text = SMALL + "    rates: \"1:4:2\"\n    policies: [max, paged]\n"
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert code == 0, err
    chart = (out / "time-rates-1.svg").read_text()
    assert "(log scale)" in chart
    at = chart.index(">paged (vLLM)</text>")  # the legend's entry, its swatch just before it
    assert f'fill="{COLOURS[0]}"' in chart[max(0, at - 120):at]  # paged: the first colour, though listed second
    both = SMALL.replace("time:\n", "time:\n    users: 4\n    workloads:\n      chat: {preset: sharegpt, "
                                    "prompt: \"fixed:10\"}\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, both)), "--dry-run"], capsys)
    assert code == 2 and "a section with preset, prompt is not allowed" in err and "{'" not in err


def test_gates_skip_nan_and_the_paged_ratio_has_a_floor(tmp_path, capsys):
    """evaluate_gates: a NaN value is no point's best (NaN > -inf held in polars and NaN sorted first); a min: gate on
    time_paged_over_<policy> reads time_paged_over_<policy>_at_least where paged stays within the bound at every swept
    rate (paged's floor over the policy's rate), as time_<policy>_rate reads its floor."""
    from kvdash.sweep.gates import evaluate_gates, floor_column
    from kvdash.sweep.gridfile import Gate

    frame = pl.DataFrame({"id": ["a", "b", "c", "d"], "m": [float("nan"), 5.0, None, 3.0]})
    gate = Gate(name="g", metric="m", min=1.0, max=None, where={})
    r = evaluate_gates(type("S", (), {"gates": [gate]})(), frame, [])[0]
    assert r.best["id"] == "b" and r.worst["id"] == "d" and r.unvalued == 2 and r.margin is None
    assert floor_column(Gate(name="g", metric="time_paged_over_max", min=1.0, max=None, where={})) == \
        "time_paged_over_max_at_least"
    assert floor_column(Gate(name="g", metric="time_rates", min=1.0, max=None, where={})) is None
    # fixed 32 + 2,000 tokens in a 4 GiB pool: Max reserves max_reserved (8,192) each and breaks the bound at about
    # 0.56 requests/s; paged holds every swept rate up to 20, so its ratio is at least 20 / 0.5625 = 35.6
    text = SMALL.replace("requests: 40", "requests: 200").replace("defaults: {gpu: h100-80gb, tp: 1}",
                                                                  "defaults: {tp: 1, budget: 4GiB}") + (
        "    gpu: h100-80gb\n    rates: \"1:20:3\"\n    latency_bound: 0.1\n    policies: [paged, max]\n"
        "    workloads:\n      chat: {prompt: \"fixed:32\", output: \"fixed:2000\"}\n"
        "gates:\n  - {name: ratio, metric: time_paged_over_max, min: 2}\n")
    code, err, df, out = _checked(tmp_path, text, capsys)
    assert df["time_paged_rate"][0] is None and df["time_paged_rate_met_up_to"][0] == 20.0
    assert df["time_paged_over_max"][0] is None and 0.3 < df["time_max_rate"][0] < 2
    assert df["time_paged_over_max_at_least"][0] == pytest.approx(20.0 / df["time_max_rate"][0], rel=1e-5)
    assert code == 0, err  # the gate passes on the floor (it failed on the empty ratio)


def test_diff_shows_the_floor_a_gate_flipped_on(tmp_path, capsys):
    """kvdash diff: a gate judged on a floor (time_paged_rate empty, paged within the bound at every swept rate)
    shows the floor it was judged on as "≥ X" in the flips table (it showed "-")."""
    base = SMALL.replace("requests: 40", "requests: 100") + (
        "    rates: \"1:20:3\"\n    latency_bound: 1.0\ngates:\n  - {name: rate, metric: time_paged_rate, min: 30}\n")
    head = base.replace("min: 30}", "min: 10}")
    outs = []
    for name, text in (("base", base), ("head", head)):
        folder = tmp_path / name
        folder.mkdir()
        grid = _grid(folder, text)
        run(["sweep", str(grid), "--out", str(folder / "out"), "-q"], capsys)
        outs.append((grid, folder / "out" / "results.csv"))
    code, out, err = run(["diff", str(outs[0][1]), str(outs[1][1]), "--grid", str(outs[1][0]), "--base-grid",
                          str(outs[0][0])], capsys)
    assert code in (0, None), err
    flip = next(line for line in out.splitlines() if line.startswith("| rate |") and "**pass**" in line)
    assert "FAIL (≥ 20)" in flip and "**pass** (≥ 20)" in flip, flip


@pytest.mark.parametrize(("extra", "words"), [
    # 1 batched token beside max_num_seqs 1,024 ran as 1,024 (max(...)); simulate --time and vLLM refuse it
    ("    users: 8\n    max_batched_tokens: 1\n", "simulate.time.max_batched_tokens: 1 is not allowed; at least "
                                                   "max_num_seqs (1,024, vLLM 0.33's default on h100-80gb)"),
    # an empty workloads: left every point "not timed", exit 0
    ("    users: 8\n    workloads: {}\n", "simulate.time.workloads: {} is not allowed; expected at least one"),
    # the bound said 1,000,000 (the step-unit one), the real one is 20,000
    ("    users: 8\n    requests: 0\n", "simulate.time.requests: 0 is not allowed; expected an integer from 1 to "
                                        "20,000"),
    # a list was read as its Python text: unknown key "['ttft"
    ("    slo: [ttft=2s]\n", "expected one string of KEY=TIME pairs"),
    ("    users: 8\n    policies: [yes]\n", "simulate.time.policies[0]: yes is not allowed"),
])
def test_time_block_refusals_of_a_hostile_trial(tmp_path, capsys, extra, words):
    """A hostile trial of the time block (a helper): each is one line, exit 2, nothing written."""
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, SMALL + extra)), "--out", str(out)], capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_gate_and_simulate_refusals_of_a_hostile_trial(tmp_path, capsys):
    """A NaN gate bound compared false everywhere and passed every point; concurrency beside rate ran a closed
    loop with the rate dropped; a time_ gate on a latency column without users: names the columns there are."""
    base = SMALL + "    slo: ttft=2s\n"
    for text, words in (
            (base + "gates:\n  - {metric: time_slo_users, min: .nan}\n", "gates[0].min: nan is not allowed; "
                                                                         "expected a finite number"),
            (base.replace("  requests: 40\n", "  requests: 40\n  concurrency: 8\n  rate: 2\n"),
             "simulate.rate: 2 is not allowed; a closed loop of concurrency users has no arrival rate"),
            (base + "gates:\n  - {metric: time_tpot_p90_ms, max: 50}\n", "come with its users:")):
        code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--dry-run"], capsys)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_ctrl_c_stops_a_grid_between_its_timed_runs(tmp_path):
    """Ctrl-C during a grid's evaluation is noted and raised at a checkpoint (a KeyboardInterrupt inside polars
    panics its Rust side); the only checkpoint was after the whole grid, so gpt-oss-120b's SLO search (one point,
    about 40 s here) held a Ctrl-C to its end. Each timed run now checks (kvdash.interrupts.checkpoint): the run
    stops within seconds, one line, exit 130, no report.  (Since the event simulator runs windowed models that one
    point takes about 2 s, so the sweep had ended before the signal: the grid is now 18 points, about 30 s.)"""
    import signal
    import subprocess
    import time

    from tests.cli_run import KVDASH, started_with

    grid = _grid(tmp_path, "title: oss\nmodels: [gpt-oss-120b]\nworkloads:\n  chat: {length: 499, max_reserved: 4096}\n"
                           "grid:\n  gpu: [h100-80gb, h200, b200]\n  kv_dtype: [bf16, fp8]\n  tp: [1, 2, 4]\n"
                           "simulate:\n  workload: sharegpt\n  requests: 4000\n  time:\n"
                           "    slo: ttft=2s,tpot=50ms\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([*KVDASH, "sweep", str(grid), "--out", str(out), "-q", "-j", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=started_with)
    time.sleep(6)  # imported, and into the SLO search
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "kvdash: error: interrupted; the previous report is unchanged\n"
    assert time.monotonic() - sent < 25 and not out.exists()


def test_sigterm_stops_parallel_workers(tmp_path):
    """With --jobs 2 the parent waited in pool.map for every point (a SIGTERM is noted, not raised, while a grid is
    evaluated): it exited after the whole evaluation. It now waits on each result in turns of 0.2 s, raising a
    noted signal between them, and stops its workers rather than waiting for them: exit 143 within seconds."""
    import signal
    import subprocess
    import time

    from tests.cli_run import KVDASH, started_with

    grid = _grid(tmp_path, "title: sig\nmodels: [llama-3.1-8b]\nworkloads:\n  chat: {length: 499, max_reserved: 4096}\n"
                           "grid:\n  gpu: [h100-80gb, h200]\n  block_size: [16, 32]\n  kv_dtype: [bf16, fp8]\n"
                           "  gpu_util: [0.9, 0.8]\n"
                           "simulate:\n  workload: sharegpt\n  requests: 1000\n  time:\n    slo: ttft=2s,tpot=50ms\n"
                           "    requests: 4000\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([*KVDASH, "sweep", str(grid), "--out", str(out), "-q", "-j", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=started_with)
    time.sleep(6)  # imported, workers started
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err
    # 0.3 s measured; the parent that waited for its 16 points took 20 s and more after the signal
    assert time.monotonic() - sent < 5 and not out.exists()


def test_one_token_outputs_under_a_tpot_slo_name_the_grid_key(tmp_path, capsys):
    """slo_search refuses tpot over outputs of one token; in a grid the refusal said '--slo' (a CLI option) with
    no workload and no line: it names simulate.time.slo, its line and the workload."""
    text = SMALL.replace("  chat: {length: 2048, max_reserved: 8192}\n",
                         "  chat: {length: 2048, max_reserved: 8192}\n  cls: {length: 101, max_reserved: 4096}\n") + (
        "    slo: ttft=2s,tpot=50ms\n    workloads:\n      chat: sharegpt\n"
        "      cls: {prompt: 'fixed:100', output: 'fixed:1'}\n")
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and ":10:10: simulate.time.slo: 'ttft=2s,tpot=50ms' is not allowed" in err
    assert "workload cls's outputs are all 1 token" in err


def test_a_grid_rate_whose_arrivals_outrun_the_clock_is_refused(tmp_path, capsys):
    """A grid's time rates go through the same arrivals as simulate's --rate: at 1e-30 requests/s the point's
    normalized latency read 0.19 ms a token (the steps rounded away past 10^9 s of arrivals); it is one line, exit 2,
    and no report is written."""
    text = ("title: t\nmodels: [llama-3.1-8b]\nworkloads:\n  chat: {length: 499, max_reserved: 4096}\n"
            "grid:\n  gpu: [h100-80gb]\nsimulate:\n  workload: sharegpt\n  requests: 200\n"
            "  time: {rates: \"1e-30:1e-30:1\"}\n")
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(_grid(tmp_path, text)), "--out", str(out), "-q"], capsys)
    assert 2 == code and "--rate: '1e-30' is not allowed; at least 2e-07 requests/s for 200 requests" in err
    assert not out.exists()
