"""kvdash diff: points matched by swept dimensions, the header of grid changes, gate flips first,
before -> after with deltas, bounded size and bounded work on hostile results files."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kvdash.cli import main
from kvdash.errors import InputError
from kvdash.report.build import write_report
from kvdash.report.diff import GITHUB_LIMIT, diff_results
from kvdash.sweep.evaluate import expand
from kvdash.sweep.gridfile import parse_grid
from tests.test_markdown import assert_tables_keep_columns

REPO = Path(__file__).resolve().parents[1]

# tutorial-gqa-80l (327,680 B/token at bf16) on an explicit 12 GiB budget: 39,321 slots, 2,457 blocks
# of 16; 825 tokens take 52 blocks -> 47 paged requests.  At 10 GiB: 2,048 blocks -> 39.
GRID = """
title: t
models: [tutorial-gqa-80l, gpt-oss-20b]
workloads:
  chat: {length: 825, max_reserved: 2048}
defaults:
  budget: BUDGET
grid:
  kv_dtype: [bf16, fp8]
gates:
  - {name: chat 40, metric: paged_requests, min: 40}
"""


def sweep(tmp_path: Path, name: str, text: str) -> tuple[Path, Path]:
    grid = tmp_path / f"{name}.yaml"
    grid.write_text(text)
    spec = parse_grid(grid)
    write_report(spec, expand(spec), tmp_path / name)
    return grid, tmp_path / name


def run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_changed_default_matches_points(tmp_path):
    """Editing one default (gpu_util 0.9 -> 0.92 on planning.yaml) changes every point: 1,056 changed,
    none added or removed, and the header names the default (issue 12's example: ids used to give
    "1,056 added, 1,056 removed")."""
    text = (REPO / "sweeps" / "planning.yaml").read_text()
    base = parse_grid(REPO / "sweeps" / "planning.yaml")
    head_grid = tmp_path / "planning.yaml"
    head_grid.write_text(text.replace('gpu_util: "0.9"', 'gpu_util: "0.92"'))
    head = parse_grid(head_grid)
    expand(base).frame.write_csv(tmp_path / "b.csv")
    expand(head).frame.write_csv(tmp_path / "h.csv")
    out = diff_results(tmp_path / "b.csv", tmp_path / "h.csv", head_grid=head_grid,
                       base_grid=REPO / "sweeps" / "planning.yaml")
    assert "matched by model, workload, GPU, TP, KV dtype, block: **1,056 changed, 0 added, 0 removed**" in out
    assert "| GPU util | every point | 0.9 | 0.92 |" in out
    # row labels name their columns and include the GPU
    assert "| model | workload | GPU | TP | KV dtype | block | paged requests |" in out
    assert len(out) < GITHUB_LIMIT


def test_gate_flip_first_with_before_after(tmp_path, capsys):
    """Budget 12 -> 10 GiB: the bf16 tutorial point goes 47 -> 39 paged requests (-8, -17.0 %) and its
    40-request gate flips pass -> FAIL; the flip is listed before the changed points.  The budget, in each row's
    label (the points are matched by model and dtype), reads before -> after (a helper's trial: HEAD's alone)."""
    bg, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    hg, h = sweep(tmp_path, "h", GRID.replace("BUDGET", "10GiB"))
    code, out, _ = run(["diff", str(b), str(h), "--grid", str(hg), "--base-grid", str(bg)], capsys)
    assert 0 == code
    assert "| budget (KV bytes/rank) | every point | 12,884,901,888 B (12.00 GiB) | 10,737,418,240 B (10.00 GiB) |" \
        in out
    flip = "| chat 40 | tutorial-gqa-80l | bf16 | 12.00 -> 10.00 | pass (47) | **FAIL** (39) |"
    change = "| tutorial-gqa-80l | bf16 | 12.00 -> 10.00 | 47 -> 39 (-8, -17.0 %) |"
    assert flip in out and change in out and out.index(flip) < out.index(change)
    assert out.index("### Gates") < out.index("### Changed points")


def test_integer_id_on_one_side(tmp_path, capsys):
    """An id column of integers on one side (a SchemaError before): files are read as text, points
    matched by dimensions, so the diff is 0 changed."""
    _, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    df = pl.read_csv(b / "results.csv")
    df.with_columns(pl.int_range(0, df.height).alias("id")).write_csv(tmp_path / "int.csv")
    code, out, err = run(["diff", str(b), str(tmp_path / "int.csv")], capsys)
    assert (0, "") == (code, err) and "**0 changed, 0 added, 0 removed**, 4 unchanged" in out


def test_duplicate_points_refused_bounded(tmp_path, capsys):
    """20,000 rows with the same dimension values per side (a 4 GB cartesian join before): one line,
    exit 2, within seconds and without growing the process by more than 500 MB."""
    _, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    row = pl.read_csv(b / "results.csv", infer_schema=False).head(1)
    pl.concat([row] * 20_000).write_csv(tmp_path / "dup.csv")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    code, out, err = run(["diff", str(tmp_path / "dup.csv"), str(tmp_path / "dup.csv")], capsys)
    assert time.perf_counter() - start < 10
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 500e6
    assert 2 == code and "" == out and 1 == len(err.strip().splitlines())
    assert "BASE" in err and "20,000 rows share their dimension values" in err


def test_long_names_stay_under_limit(tmp_path):
    """A 20,000-character model name on every row (a long name gave 200 KB of output before): the diff
    stays under 65,536 characters, says rows were left out, and repeats at most 60 characters of the
    name per cell."""
    _, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    df = pl.read_csv(b / "results.csv", infer_schema=False)
    many = pl.concat([df.with_columns(pl.lit(str(i)).alias("block_size")) for i in range(300)])
    many.write_csv(tmp_path / "base.csv")
    long = "m" * 20_000
    many.with_columns(pl.col("model") + long, pl.lit("1").alias("paged_requests")) \
        .write_csv(tmp_path / "head.csv")
    out = diff_results(tmp_path / "base.csv", tmp_path / "head.csv", limit=100_000)
    assert GITHUB_LIMIT - 5_000 < len(out) < GITHUB_LIMIT and "to stay under 65,536 characters" in out
    assert "**0 changed, 1,200 added, 1,200 removed**" in out
    assert "m" * 61 not in out


@pytest.mark.parametrize("limit", [2_000, 10_000, GITHUB_LIMIT - 1])
def test_max_chars_respected(tmp_path, limit):
    """--max-chars bounds the text whatever it holds (the action shares 65,536 between grids)."""
    spec = parse_grid(REPO / "sweeps" / "planning.yaml")
    frame = expand(spec).frame
    frame.write_csv(tmp_path / "a.csv")
    frame.with_columns(pl.col("paged_requests") + 1).write_csv(tmp_path / "b.csv")
    assert len(diff_results(tmp_path / "a.csv", tmp_path / "b.csv", max_chars=limit)) < limit


def test_fifo_refused_at_once(tmp_path, capsys):
    """A FIFO in place of results.csv is refused with one line (it would block forever when read)."""
    fifo = tmp_path / "results.csv"
    os.mkfifo(fifo)
    code, _, err = run(["diff", str(fifo), str(fifo)], capsys)
    assert 2 == code and "BASE" in err and 1 == len(err.strip().splitlines())


def test_error_lines_shorten_values():
    """An error line repeats at most 80 characters of a bad value and says how long it was."""
    text = str(InputError("--gpu", "x" * 10_000, "expected a GPU preset"))
    assert len(text) < 200 and "(10,002 characters)" in text  # repr adds two quotes


HOSTILE_TEXT = st.sampled_from(["a", "b", "@x", "a|b", "</details>", "![i](http://e.x/i.png)", "x\ny", "", "7"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(HOSTILE_TEXT, HOSTILE_TEXT, st.sampled_from(["16", "32", "x", ""]),
                          st.one_of(st.integers(-5, 10**6).map(str), HOSTILE_TEXT)), min_size=0, max_size=12),
       st.lists(st.tuples(HOSTILE_TEXT, HOSTILE_TEXT, st.sampled_from(["16", "32", "x", ""]),
                          st.one_of(st.integers(-5, 10**6).map(str), HOSTILE_TEXT)), min_size=0, max_size=12),
       st.integers(2_000, 6_000))
def test_any_results_pair_gives_bounded_markdown_or_one_error(tmp_path_factory, base, head, max_chars):
    """Property: for any two small results files (hostile names, duplicates, non-numbers, empty), diff
    returns text under max_chars whose tables keep their columns, or an InputError (exit 2)."""
    d = tmp_path_factory.mktemp("prop")
    for name, rows in (("b.csv", base), ("h.csv", head)):
        pl.DataFrame({"id": [str(i) for i in range(len(rows))], "model": [r[0] for r in rows],
                      "workload": [r[1] for r in rows], "block_size": [r[2] for r in rows],
                      "paged_requests": [r[3] for r in rows]},
                     schema={c: pl.Utf8 for c in ("id", "model", "workload", "block_size", "paged_requests")}) \
            .write_csv(d / name)
    try:
        out = diff_results(d / "b.csv", d / "h.csv", max_chars=max_chars)
    except InputError as exc:
        assert "\n" not in str(exc)
        event("refused")
        return
    event("diff written")
    assert len(out) < max_chars
    assert_tables_keep_columns(out)


def test_a_small_max_chars_keeps_what_fits_and_names_its_limit(tmp_path, capsys):
    """A helper's trial: --max-chars 2000 printed 837 characters, left out the 2-row grid table and every changed row,
    and each note said '65,536 characters'.  The reserves kept for later tables now shrink with the limit, and a
    note names the limit in force."""
    bg, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    hg, h = sweep(tmp_path, "h", GRID.replace("BUDGET", "10GiB"))
    code, out, _ = run(["diff", str(b), str(h), "--max-chars", "2000"], capsys)
    assert 0 == code and len(out) < 2000 and "**What changed in the grid**" in out
    assert "| budget (KV bytes/rank) | every point |" in out and "GitHub's comment limit" not in out
    assert "12.00 -> 10.00" in out  # at least one changed point shown
    code, out, _ = run(["diff", str(b), str(h), "--max-chars", "2000", "--limit", "200"], capsys)
    assert all("2,000 characters (--max-chars)" in line for line in out.splitlines() if "to stay under" in line)


def test_a_side_without_a_dimension_column_is_named(tmp_path, capsys):
    """A helper's trial: HEAD's results.csv without its block_size column was blamed on BASE ('16 rows share their
    dimension values'); the side lacking the column is named."""
    _, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    pl.read_csv(b / "results.csv", infer_schema=False).drop("kv_dtype").write_csv(tmp_path / "head.csv")
    code, _, err = run(["diff", str(b), str(tmp_path / "head.csv")], capsys)
    assert 2 == code and err.startswith(f"kvdash: error: HEAD: '{tmp_path / 'head.csv'}' is not allowed; has no "
                                        "kv_dtype column")


def test_two_values_side_by_side_have_as_many_decimals(tmp_path, capsys):
    """A helper's trial: vLLM's max concurrency read '19.1875' beside '16' (16.0 printed as a whole number); the two
    values of a column shown side by side now carry as many decimals each (16.0000)."""
    _, b = sweep(tmp_path, "b", GRID.replace("BUDGET", "12GiB"))
    _, h = sweep(tmp_path, "h", GRID.replace("BUDGET", "10GiB"))
    code, out, _ = run(["diff", str(b), str(h)], capsys)
    line = next(x for x in out.splitlines() if "| tutorial-gqa-80l | bf16 |" in x and "vllm_max_concurrency" in x)
    assert 0 == code and line.endswith("| vllm_max_concurrency | 19.1953 | 16.0000 |")
