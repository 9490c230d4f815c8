"""Exactness is never traded for speed: every value of every result column, its type, the column order and the
row order of two grids that between them set every dimension (explicit and derived budgets, zip, exclude,
block_size auto, pp, max_model_len, prefix, final lengths, groups, both utilization policies, reserve auto) equal
the pinned results in tests/data/results_golden/*.parquet, written by the evaluator before the speed changes of
issue 12's last round (one gather per lookup table instead of one per column).  The results files a sweep writes
(Parquet and CSV) hold the same values.

One column was re-pinned since, by a rule applied to the pinned values themselves: ``fits`` of explicit.parquet
(which gives max_model_len) is false where vLLM 0.33 would refuse to start, ``vllm_max_concurrency <= 1``
(the pool's whole blocks no more than one request takes; tests/test_vllm_start_check.py): 1,648 points."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kvdash.report.build import write_csv, write_report
from kvdash.sweep.columns import RESULT_COLUMNS
from kvdash.sweep.evaluate import DENSE_LIMIT, expand
from kvdash.sweep.gridfile import parse_grid

GOLDEN = Path(__file__).parent / "data" / "results_golden"
GRIDS = ("explicit", "derived")


@pytest.fixture(scope="module", params=GRIDS)
def golden(request: pytest.FixtureRequest) -> tuple[str, pl.DataFrame, pl.DataFrame]:
    spec = parse_grid(GOLDEN / f"{request.param}.yaml")
    return request.param, expand(spec).frame, pl.read_parquet(GOLDEN / f"{request.param}.parquet")


def test_frame_equals_pinned_values(golden: tuple[str, pl.DataFrame, pl.DataFrame]) -> None:
    name, frame, pinned = golden
    assert frame.columns == [c for c, _, _ in RESULT_COLUMNS]
    assert frame.schema == pinned.schema, name
    assert frame.height == pinned.height == {"explicit": 13_728, "derived": 3_456}[name]
    assert frame.equals(pinned), name  # nulls equal nulls; every float bit-for-bit


def test_sparse_path_equals_dense_path(golden: tuple[str, pl.DataFrame, pl.DataFrame],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Key spaces above DENSE_LIMIT are joined instead of gathered: the same values either way."""
    import kvdash.sweep.evaluate as evaluate

    name, frame, _ = golden
    monkeypatch.setattr(evaluate, "DENSE_LIMIT", 0)
    assert DENSE_LIMIT > 0
    joined = expand(parse_grid(GOLDEN / f"{name}.yaml")).frame
    assert joined.equals(frame), name


def test_hand_worked_point() -> None:
    """The pinned file itself is right where worked by hand: Llama 3.1 8B, bf16: 32 layers x 8 KV heads x 128 x 2
    (K and V) x 2 bytes = 131,072 bytes per token; at tp 1 the zip gives a 1 GiB budget: 2^30 / 2^17 = 8,192
    token slots."""
    frame = pl.read_parquet(GOLDEN / "explicit.parquet")
    row = frame.filter((pl.col("model") == "llama-3.1-8b") & (pl.col("kv_dtype") == "bf16") & (pl.col("tp") == 1)
                       & (pl.col("kv_scales") == "tensor")).row(0, named=True)
    assert (row["bytes_per_token"], row["budget_bytes"], row["kv_token_slots"]) == (131_072, 2**30, 8_192)


def test_written_results_hold_the_values(golden: tuple[str, pl.DataFrame, pl.DataFrame], tmp_path: Path) -> None:
    name, frame, pinned = golden
    spec = parse_grid(GOLDEN / f"{name}.yaml")
    write_report(spec, expand(spec), tmp_path / "out", formats=("csv", "parquet"))
    assert pl.read_parquet(tmp_path / "out" / "results.parquet").equals(pinned)
    write_csv(pinned, tmp_path / "pinned.csv")
    assert (tmp_path / "out" / "results.csv").read_bytes() == (tmp_path / "pinned.csv").read_bytes()
