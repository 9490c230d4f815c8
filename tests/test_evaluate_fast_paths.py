"""The evaluator's fast paths (issue 12, item 7) give exactly what the plain definitions give: point keys summed
over the factors' product (no per-dimension columns), exclude rules applied to that product, ids, request
figures computed once per (shape, workload), requests per node from a multiplier and a divisor."""

from __future__ import annotations

import hashlib
import itertools
from functools import reduce
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdash.answer.budget import BudgetSpec
from kvdash.answer.calc import CalcInput, calculate
from kvdash.sweep.evaluate import CAPS_DIMS, DEFAULTS, _cross_sum, expand
from kvdash.sweep.gridfile import DIMENSIONS, parse_grid

M61 = 2**61 - 1


def grid(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.data())
def test_cross_sum_is_the_cross_join_order(sizes, data):
    """The points are polars' cross join of the factors' code tables in written order (left rows outer): the
    key of point j, summed over the factors' shares, equals the key summed over that join's row j, and an
    exclude condition (and-ed over the factors) lines up the same way."""
    weights = [data.draw(st.integers(0, 1_000)) for _ in sizes]
    masks = [data.draw(st.lists(st.booleans(), min_size=n, max_size=n)) for n in sizes]
    codes = [pl.DataFrame({f"c{i}": pl.Series(range(n), dtype=pl.UInt32)}) for i, n in enumerate(sizes)]
    joined = reduce(lambda a, b: a.join(b, how="cross", maintain_order="left_right"), codes).rows()
    want = [(sum(c * w for c, w in zip(row, weights, strict=True)), all(m[c] for c, m in zip(row, masks, strict=True)))
            for row in joined]
    tables = [pl.DataFrame({"key": pl.Series([i * w for i in range(n)], dtype=pl.UInt64),
                            "hit": pl.Series(m, dtype=pl.Boolean)})
              for n, w, m in zip(sizes, weights, masks, strict=True)]
    assert _cross_sum(tables, ["key"], ["hit"]).rows() == want


def _h(text: str, digits: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:digits], 16)


def _term(d: str, v: Any) -> int:
    """One dimension's share of an id; the engine-cap dimensions (issue 23) add 0 at their default, and a null
    max_batched_tokens hashes as 8,192, its default before it followed the GPU, so older ids stay."""
    if d in CAPS_DIMS and v == DEFAULTS[d] and type(v) is type(DEFAULTS[d]):
        return 0
    if d == "max_batched_tokens" and v is None:
        v = 8192
    return _h(f"{d}={v!r}", 8) * (_h(f"dimension:{d}", 7) | 1) % M61


def _reference_points(spec: Any) -> list[tuple[dict[str, Any], str]]:
    """Every point in written order (zip groups as one factor, exclude rules dropping points), with its id
    computed in plain Python: the sum over every dimension of sha256 term x (odd dimension multiplier), mod
    2^61 - 1, in 16 hex digits."""
    values: dict[str, list[Any]] = {}
    for factor in spec.factors:
        values.update(factor)
    given = set(values)
    for dim in DIMENSIONS:
        if dim not in values:
            values[dim] = [DEFAULTS[dim]]
    # issue 23: the default reserve is auto, but a grid of declared budgets only takes 0 (nothing to subtract;
    # its points keep the ids they had)
    if "reserve" not in given and all(v is None for d in ("gpu", "gpu_memory") for v in values[d]):
        values["reserve"] = [0]
    factors = [[{d: vals[i] for d, vals in factor.items()} for i in range(len(next(iter(factor.values()))))]
               for factor in spec.factors]
    out = []
    for combo in itertools.product(*factors):
        point = {d: vals[0] for d, vals in values.items()}
        for part in combo:
            point.update(part)
        if any(all(point[d] in excluded for d, excluded in rule.items()) for rule in spec.excludes):
            continue
        total = sum(_term(d, point[d]) for d in DIMENSIONS) % M61
        out.append((point, f"{total:016x}"))
    return out


EXCLUDES = """
models: [llama-3.1-8b, qwen3-32b, gpt-oss-20b]
workloads:
  a: {length: 100, max_reserved: 4096}
  g: {group: [200, 825, 1525], max_reserved: 2048}
grid:
  kv_dtype: [bf16, fp8]
  block_size: [16, 64, auto]
  max_model_len: [4096, 8192]
zip:
  - {tp: [1, 2, 4], budget: [1GiB, 12GiB, 77777777777]}
exclude:
  - {model: gpt-oss-20b, kv_dtype: fp8}
  - {tp: 2, block_size: 64}            # a zip member with a grid key
  - {kv_dtype: bf16, pp: 1, workload: g}  # pp has one value (the default), which the rule names: it applies
  - {kv_dtype: fp8, pp: 2}             # pp 2 is no value of the grid: the rule removes nothing
"""


def test_exclude_rules_and_ids_equal_plain_enumeration(tmp_path):
    """Exclude rules over grid keys, zip members, workloads and a one-valued dimension remove exactly the points
    a plain enumeration removes, the rest stay in written order, and each id is the plain Python hash: 3 models
    x 2 workloads x 2 dtypes x 3 block sizes x 2 lengths x 3 zipped (tp, budget) = 216 points, less gpt-oss fp8
    (36), tp 2 with block 64 (24, of which 4 already gone), bf16 groups (54, of which 6 already gone): 216 - 36
    - 20 - 48 = 112."""
    spec = parse_grid(grid(tmp_path, EXCLUDES))
    frame = expand(spec).frame
    reference = _reference_points(spec)
    assert frame.height == len(reference) == 112
    for row, (point, ident) in zip(frame.iter_rows(named=True), reference, strict=True):
        assert row["id"] == ident
        assert (row["model"], row["workload"], row["kv_dtype"], row["tp"], row["budget_bytes"]) == (
            point["model"], point["workload"], point["kv_dtype"], point["tp"], point["budget"])
        assert row["max_model_len"] == point["max_model_len"]


ENGINE = """
models: [gpt-oss-20b, llama-3.1-8b]
workloads:
  a: {length: 1000, max_reserved: 4096}
  g: {group: [200, 825, 1525], max_reserved: 2048}
grid:
  block_size: [16, 32]
  max_model_len: [2048, 8192]
  max_batched_tokens: [512, 2048, 8192]
  budget: [12GiB]
"""


def test_request_figures_once_per_shape_and_workload(tmp_path):
    """The request figures are computed once per (shape, workload) and only vLLM's start-up figures per
    (max_model_len, max_batched_tokens): every point still equals `kvdash calc` for its own pair.  gpt-oss-20b's
    sliding layers (window 128) make max_batched_tokens count: min(W - 1 + T, L) blocks per request."""
    spec = parse_grid(grid(tmp_path, ENGINE))
    frame = expand(spec).frame
    assert frame.height == 2 * 2 * 2 * 2 * 3 == 48
    seen = set()
    for row in frame.iter_rows(named=True):
        w = spec.workloads[row["workload"]]
        r = calculate(CalcInput(arch=spec.models[row["model"]].arch, block_size=row["block_size"],
                                used=w.lengths[0], max_reserved=w.max_reserved,
                                group=w.lengths if len(w.lengths) > 1 else None,
                                budget=BudgetSpec(bytes=row["budget_bytes"]), max_model_len=row["max_model_len"],
                                max_batched_tokens=row["max_batched_tokens"]))
        assert r["vllm_view"]["gpu_kv_cache_tokens"] == row["vllm_kv_cache_tokens"]
        assert r["vllm_view"]["max_concurrency"] == pytest.approx(row["vllm_max_concurrency"], rel=1e-15)
        assert r["whole_pool_blocks"] == row["whole_pool_blocks"]
        if "group" in r:
            assert (r["group"]["useful_slots"], r["group"]["complete_groups"]) == (row["useful_slots"],
                                                                                 row["complete_groups"])
        else:
            assert r["capacity"]["paged_requests"] == row["paged_requests"]
        seen.add((row["model"], row["max_model_len"], row["max_batched_tokens"], row["vllm_kv_cache_tokens"]))
    # the sliding window model's start-up figure moves with max_batched_tokens at a fixed max_model_len
    oss = {(mml, t): tokens for m, mml, t, tokens in seen if m == "gpt-oss-20b"}
    assert len({oss[(8192, t)] for t in (512, 2048, 8192)}) > 1


PER_NODE = """
models: [llama-3.1-70b]
workloads:
  a: {length: 1000, max_reserved: 4096}
grid:
  tp: [1, 2, 16]
  pp: [1, 2]
  budget: [40GiB]
"""


def test_requests_per_node_multiplier_and_divisor(tmp_path):
    """Requests an 8-GPU node serves: a replica of g <= 8 GPUs fits 8 // g times (g = 1 -> x 8, 2 -> x 4,
    4 -> x 2); a replica over several nodes shares its requests among its ceil(g / 8) nodes, floored
    (g = 16 -> // 2, 32 -> // 4)."""
    frame = expand(parse_grid(grid(tmp_path, PER_NODE))).frame
    factor = {1: (8, 1), 2: (4, 1), 4: (2, 1), 16: (1, 2), 32: (1, 4)}
    assert sorted(frame.get_column("gpus").to_list()) == [1, 2, 2, 4, 16, 32]
    for row in frame.iter_rows(named=True):
        mult, div = factor[row["gpus"]]
        assert row["paged_requests_per_node"] == row["paged_requests"] * mult // div
        assert row["paged_requests_per_gpu"] == row["paged_requests"] / row["gpus"]


def test_single_point_grid_with_exclude_rules(tmp_path):
    """A grid of one point (no dimension with two values): a rule naming its values removes it (one clear error,
    as any grid the rules empty), a rule naming another value keeps it.  A rule matches a dimension's value as
    the grid has it: block_size left out is 'auto' (the engine's choice, kvdash/defaults.py), not the 16 it
    resolves to for Llama."""
    from kvdash.errors import InputError

    base = "models: [llama-3.1-8b]\nworkloads:\n  a: {length: 100, max_reserved: 4096}\n"
    with pytest.raises(InputError, match="the exclude rules remove every point"):
        expand(parse_grid(grid(tmp_path, base + "exclude:\n  - {block_size: [auto]}\n", "a.yaml")))
    kept = expand(parse_grid(grid(tmp_path, base + "exclude:\n  - {block_size: [32]}\n", "b.yaml"))).frame
    assert kept.height == 1 and kept.get_column("block_size").to_list() == [16]
    kept = expand(parse_grid(grid(tmp_path, base + "exclude:\n  - {block_size: [16]}\n", "c.yaml"))).frame
    assert kept.height == 1 and kept.get_column("block_size").to_list() == [16]
