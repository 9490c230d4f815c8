"""``kvdash sweep``, ``kvdash diff`` and ``kvdash claims``."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash.errors import InputError

Opt = typer.Option


def sweep(
    grid: Annotated[Path, typer.Argument(help="The grid file (YAML).")],
    out: Annotated[Optional[Path], Opt(help="Output folder (default: reports/<grid name>/).")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the point count and the first points; write nothing.")] = False,
    check: Annotated[bool, Opt("--check", help="Exit 1 when a gate of the grid fails, listing each failing point.")] = False,
    parquet: Annotated[bool, Opt("--parquet", help="Also write results.parquet.")] = False,
    max_points: Annotated[int, Opt(help="Refuse grids larger than this.")] = 2_000_000,
    quiet: Annotated[bool, Opt("--quiet", "-q", help="No progress and no summary.")] = False,
) -> None:
    """Run a grid of configurations and write results.csv, report.md, report.html and SVG charts."""
    from kvdash.sweep.evaluate import expand
    from kvdash.sweep.gridfile import parse_grid

    spec = parse_grid(grid)
    if max_points <= 0:
        raise InputError("--max-points", max_points, "expected a positive integer")
    if dry_run:
        _dry_run(spec, max_points)
        return
    from rich.console import Console

    err = Console(stderr=True)
    show = err.is_terminal and not quiet
    with err.status("evaluating the grid", spinner="dots") if show else _null():
        expanded = expand(spec, max_points)
    target = out or Path("reports") / grid.stem
    from kvdash.report.build import write_report

    if show:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("writing reports", total=5)

            def step(msg: str) -> None:
                progress.update(task, advance=1, description=f"writing {msg}")

            files = write_report(spec, expanded, target, parquet=parquet, progress=step)
    else:
        files = write_report(spec, expanded, target, parquet=parquet)
    if not quiet:
        print(f"{expanded.frame.height:,} points -> {target}/ ({', '.join(f.name for f in files)})")
    if check:
        failures = _gates(spec, expanded.frame)
        if failures:
            for line in failures:
                print(line, file=sys.stderr)
            raise typer.Exit(1)
        if not quiet:
            print(f"gates: all {len(spec.gates)} passed" if spec.gates else "gates: none in this grid")


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _dry_run(spec, max_points: int) -> None:  # type: ignore[no-untyped-def]
    from kvdash.sweep.evaluate import expand

    print(f"{spec.size():,} points before exclusions ({' x '.join(str(len(next(iter(f.values())))) for f in spec.factors)}"
          f" over {', '.join('+'.join(f) for f in spec.factors)})")
    if spec.size() > max_points:
        raise InputError(str(spec.path), f"{spec.size():,} points", f"the limit is {max_points:,}; raise it with --max-points")
    frame = expand(spec, max_points).frame
    print(f"{frame.height:,} points after exclusions; the first {min(10, frame.height)}:")
    cols = ["id", "model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "budget_bytes"]
    for row in frame.select(cols).head(10).iter_rows(named=True):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items() if v is not None))


def _gates(spec, frame) -> list[str]:  # type: ignore[no-untyped-def]
    from kvdash.report.gates import check_lines

    return check_lines(spec.gates, frame)


def diff(
    base: Annotated[Path, typer.Argument(help="Base results.csv or report folder.")],
    head: Annotated[Path, typer.Argument(help="Head results.csv or report folder.")],
    grid: Annotated[Optional[Path], Opt(help="The head grid file: its gates are compared (and serve the base too "
                                             "unless --base-grid is given), and settings results.csv lacks.")] = None,
    base_grid: Annotated[Optional[Path], Opt(help="The base grid file (e.g. from git show BASE:sweeps/x.yaml).")] = None,
    limit: Annotated[int, Opt(help="At most this many rows in each table.")] = 200,
    max_chars: Annotated[int, Opt(help="The text stays below this many characters (GitHub's comment limit).")] = 65_535,
    title: Annotated[Optional[str], Opt(help="Name in the heading (default: the head folder's name).")] = None,
) -> None:
    """Markdown diff of two sweeps, points matched by their swept dimensions (fits a GitHub comment)."""
    from kvdash.report.diff import diff_results

    print(diff_results(base, head, limit=limit, base_grid=base_grid, head_grid=grid, max_chars=max_chars,
                       title=title), end="")


def claims(as_json: Annotated[bool, Opt("--json", help="Print JSON.")] = False) -> None:
    """List the claims registry: each claim, its source, conditions, metric and claimed range."""
    from kvdash.sweep.claims import load_claims

    items = load_claims()
    if as_json:
        import json
        from dataclasses import asdict

        print(json.dumps([asdict(c) for c in items], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Claims registry (kvdash/data/claims.yaml)", show_lines=True)
    for col in ("id", "claim", "kind", "metric", "claimed", "source and conditions"):
        table.add_column(col)
    for c in items:
        table.add_row(c.id, c.claim, c.kind, c.metric or "-", c.claimed_text(),
                      f"{c.source}. Measured under: {c.conditions}" + (f" Settled by: {c.settle}" if c.settle else ""))
    Console().print(table)
