"""``kvdash diff``: what changed between two sweeps, as Markdown for a pull-request comment."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kvdash.errors import InputError

GITHUB_LIMIT = 65_536
KEY_METRICS = ("bytes_per_token", "kv_token_slots", "whole_pool_blocks", "contiguous_requests", "paged_requests",
               "request_capacity_ratio", "paged_waste_percent", "vllm_kv_cache_tokens")
LABEL = ("model", "workload", "kv_dtype", "block_size", "tp")


def _load(path: Path, field: str) -> pl.DataFrame:
    csv = path / "results.csv" if path.is_dir() else path
    if not csv.is_file():
        raise InputError(field, str(path), "expected a results.csv or a report folder holding one")
    from kvdash import safeio

    safeio.check_regular(csv, field, safeio.TABLE_CAP)  # a regular file of at most 4 GiB, never a FIFO
    try:
        df = pl.read_csv(csv, infer_schema_length=None)
    except Exception as exc:  # polars raises several error types for malformed files
        raise InputError(field, str(csv), f"not a readable CSV ({type(exc).__name__})") from exc
    if "id" not in df.columns:
        raise InputError(field, str(csv), "a kvdash results.csv has an id column")
    return df


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4f}".rstrip("0").rstrip(".")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _label(row: dict[str, object]) -> str:
    return " ".join(str(row.get(k)) for k in LABEL if row.get(k) is not None)


def diff_results(base_path: Path, head_path: Path, limit: int = 200) -> str:
    base, head = _load(base_path, "BASE"), _load(head_path, "HEAD")
    base_ids, head_ids = set(base.get_column("id").to_list()), set(head.get_column("id").to_list())
    added = head.filter(pl.col("id").is_in(sorted(head_ids - base_ids)))
    removed = base.filter(pl.col("id").is_in(sorted(base_ids - head_ids)))
    common = [c for c in head.columns if c in base.columns and c != "id"]
    joined = base.select(["id", *common]).join(head.select(["id", *common]), on="id", how="inner", suffix="__head")
    changes: list[tuple[str, str, list[tuple[str, object, object]]]] = []
    for row in joined.sort("id").iter_rows(named=True):
        diffs = [(c, row[c], row[f"{c}__head"]) for c in common if row[c] != row[f"{c}__head"]]
        if diffs:
            changes.append((row["id"], _label(row), diffs))
    lines = ["## kvdash sweep diff", "",
             f"{head.height:,} points in HEAD, {base.height:,} in BASE: **{added.height:,} added, "
             f"{removed.height:,} removed, {len(changes):,} changed**, "
             f"{joined.height - len(changes):,} unchanged.", ""]
    if changes:
        lines += ["| point | metric | BASE | HEAD | HEAD / BASE |", "|---|---|---:|---:|---:|"]
        shown = 0
        for pid, label, diffs in changes:
            for col, old, new in diffs:
                if col not in KEY_METRICS:
                    continue
                ratio = f"{new / old:.3f}x" if isinstance(old, int | float) and isinstance(new, int | float) and old \
                    else "-"
                lines.append(f"| `{pid}` {label} | {col} | {_fmt(old)} | {_fmt(new)} | {ratio} |")
            shown += 1
            if shown >= min(limit, 20):
                break
        lines.append("")
        lines += ["<details><summary>Every changed value</summary>", "", "| point | column | BASE | HEAD |",
                  "|---|---|---:|---:|"]
        for pid, label, diffs in changes[:limit]:
            for col, old, new in diffs:
                lines.append(f"| `{pid}` {label} | {col} | {_fmt(old)} | {_fmt(new)} |")
        if len(changes) > limit:
            lines.append(f"| ... | {len(changes) - limit:,} more changed points | | |")
        lines += ["", "</details>", ""]
    for title, frame in (("Added points", added), ("Removed points", removed)):
        if frame.height:
            lines += [f"<details><summary>{title} ({frame.height:,})</summary>", "",
                      "| point | paged | contiguous |", "|---|---:|---:|"]
            for row in frame.head(limit).iter_rows(named=True):
                lines.append(f"| `{row['id']}` {_label(row)} | {_fmt(row.get('paged_requests'))} | "
                             f"{_fmt(row.get('contiguous_requests'))} |")
            if frame.height > limit:
                lines.append(f"| ... {frame.height - limit:,} more | | |")
            lines += ["", "</details>", ""]
    text = "\n".join(lines) + "\n"
    while len(text) > GITHUB_LIMIT and limit > 1:  # keep within GitHub's comment limit
        limit //= 2
        return diff_results(base_path, head_path, limit=limit)
    return text
