"""``kvdash sweep``, ``kvdash diff`` and ``kvdash claims``."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvdash.errors import InputError, Interrupted, interrupted_text, signal_code

if TYPE_CHECKING:
    import threading

Opt = typer.Option


def sweep(
    ctx: typer.Context,
    grid: Annotated[Path, typer.Argument(metavar="GRID", help="The grid file (YAML).")],
    out: Annotated[Optional[Path], Opt(help="Output folder (default: reports/<grid name>/).")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the point count and the first points; write nothing.")] = False,
    check: Annotated[bool, Opt("--check", help="Exit 1 when a gate of the grid fails, listing each failing point.")] = False,
    csv: Annotated[bool, Opt("--csv", help="Write results.csv (the default up to 100,000 points).")] = False,
    parquet: Annotated[bool, Opt("--parquet", help="Write results.parquet (the default above 100,000 points).")] = False,
    max_points: Annotated[int, Opt(help="Refuse grids larger than this.")] = 2_000_000,
    quiet: Annotated[bool, Opt("--quiet", "-q", help="No progress and no summary.")] = False,
    force: Annotated[bool, Opt("--force", help="Write into an --out folder kvdash did not write: replace only the "
                                               "report's files, leave every other file alone.")] = False,
    jobs: Annotated[int, Opt("--jobs", "-j", help="Worker processes for the grid's simulations (simulate:): 0 = "
                                                  "the idle cores (cores less the load average); 1 = none. Results "
                                                  "are the same either way.")] = 0,
    use_ray: Annotated[bool, Opt("--ray", help="Run the grid's simulations as Ray tasks (the cluster RAY_ADDRESS "
                                               "names, else a local one); needs pip install 'kvdash[ray]'.")] = False,
) -> None:
    """Run a grid of configurations and write results.csv, report.md, report.html and SVG charts."""
    from kvdash.core.limits import MAX_POINTS_CEILING, check_int
    from kvdash.sweep.gridfile import parse_grid

    check_int("--max-points", max_points, 1, MAX_POINTS_CEILING)
    from kvdash.sweep.parallel import check_jobs

    workers = check_jobs(jobs)
    spec = parse_grid(grid)
    if dry_run:
        from kvdash.commands.common import refuse_unread

        refuse_unread(ctx, ("out", "check", "csv", "parquet", "quiet", "force", "jobs", "use_ray"),
                      "not read with --dry-run (it prints the point count and the first points, writing "
                      "nothing; a simulate: block runs in this process): drop one or the other")
        _dry_run(spec, max_points)
        return
    target = out or Path("reports") / grid.stem
    from kvdash.report.outdir import plan, terminate_like_interrupt

    before = plan(target, force)  # refuse a folder kvdash may not replace before any work
    try:
        with terminate_like_interrupt():
            frame, written = _run(spec, target, max_points, csv, parquet, quiet, force, workers, use_ray)
    except KeyboardInterrupt as exc:  # signals are held back while the report is swapped in: nothing changed
        how = interrupted_text(exc)
        raise Interrupted(f"{how}; the previous report is unchanged", signal_code(exc)) from None
    except OSError as exc:  # a full or read-only disk: name the folder the user gave, not the hidden work path
        raise InputError("--out", str(target), f"the report cannot be written there ({exc.strerror or exc}); "
                         "nothing was changed") from None
    removed = sorted(set(before.old_files) - {f.name for f in written})
    if removed:  # e.g. results.parquet of a run with --parquet: say so, never drop it silently
        print(f"kvdash: note: removed {', '.join(removed)} from {target}/, written by an earlier run with other "
              "options (--csv/--parquet choose the results files; give them again to keep those files)",
              file=sys.stderr)
    if check:
        failures = _gates(spec, frame)
        if failures:
            if not quiet:  # stdout: stderr holds one line per failing point (the pull-request Action counts them)
                print(f"gates failed ({_reserve(spec, frame)}):", flush=True)
            for line in failures:
                print(line, file=sys.stderr)
            raise typer.Exit(1)
        if not quiet:
            import textwrap

            from kvdash.render.table import terminal_width

            n = len(spec.gates)
            # within the terminal: the reserve's basis made it 87 characters (a helper's README audit)
            print(textwrap.fill(("gates: none in this grid" if not n else "gates: the 1 gate passed" if n == 1 else
                                 f"gates: all {n} passed") + f" ({_reserve(spec, frame)})", width=terminal_width(),
                                subsequent_indent="  ", break_long_words=False, break_on_hyphens=False))


def _run(spec, target: Path, max_points: int, csv: bool, parquet: bool, quiet: bool,  # type: ignore[no-untyped-def]
         force: bool, jobs: int = 1, use_ray: bool = False):
    from kvdash.sweep.evaluate import expand

    show = sys.stderr.isatty() and not quiet  # rich (0.15 s to import) only for a person watching
    if show:
        from rich.console import Console

        err = Console(stderr=True)
    from kvdash.report.outdir import deferred_interrupt

    warm = _warm_up() if spec.size() >= WARM_UP_POINTS else None
    with err.status("evaluating the grid", spinner="dots") if show else _null(), deferred_interrupt() as checkpoint:
        expanded = expand(spec, max_points, jobs=jobs, use_ray=use_ray)
        checkpoint()  # Ctrl-C during evaluation: raised here, not inside polars
    if warm is not None:
        warm.join()
    from kvdash.report.build import results_formats, write_report

    formats = results_formats(expanded.frame.height, csv=csv, parquet=parquet)
    answer: dict = {}  # type: ignore[type-arg]

    if show:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("writing reports", total=5)

            def step(msg: str) -> None:
                progress.update(task, advance=1, description=f"writing {msg}")

            files = write_report(spec, expanded, target, formats, progress=step, force=force, answer=answer)
    else:
        files = write_report(spec, expanded, target, formats, force=force, answer=answer)
    if not quiet:
        from kvdash.render.table import terminal_width, wrap
        from kvdash.report.build import answer_lines

        points = expanded.frame.height
        lines = [f"{points:,} point{'' if points == 1 else 's'} ({_reserve(spec, expanded.frame)}) -> {target}/ "
                 f"({', '.join(f.name for f in files)})", *answer_lines(answer),
                 f"Report: {target / 'report.md'} (and report.html beside it)"]
        width = terminal_width()
        for line in lines:  # wrapped at the terminal's width, paths kept whole; an item's later lines under its text
            if line.startswith("- "):
                print("\n".join(("  " if i else "- ") + part
                                for i, part in enumerate(wrap(line[2:], max(width - 2, 20), cut=False))))
            else:
                print("\n".join(wrap(line, width, cut=False)))
    return expanded.frame, files


def _reserve(spec, frame) -> str:  # type: ignore[no-untyped-def]
    """The reserve basis of the grid's budgets, in a few words (the report's first line in short)."""
    from kvdash.report.sections import reserve_line

    return reserve_line(spec, frame, frame.height > 0 and frame.get_column("gpu").null_count() < frame.height,
                        short=True)


WARM_UP_POINTS = 100_000  # from here on evaluation takes long enough (0.05 s and up) to hide the warm-up


def _warm_up() -> "threading.Thread":
    """Start loading the report's templates while polars evaluates the grid (see report.render.warm_up).  A
    failure here is left to the real use, which reports it properly."""
    import threading

    def run() -> None:
        try:
            from kvdash.report.render import warm_up

            warm_up()
        except Exception:  # noqa: BLE001,S110  (rendering raises the same error where it is handled)
            pass

    thread = threading.Thread(target=run, name="kvdash-warm-up", daemon=True)
    thread.start()
    return thread


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _dry_run(spec, max_points: int) -> None:  # type: ignore[no-untyped-def]
    import textwrap

    from kvdash.render.table import terminal_width
    from kvdash.sweep.evaluate import expand

    width = terminal_width()  # every line within the terminal (a point's line was about 135 characters)
    print(textwrap.fill(f"{spec.size():,} points before exclusions "
                        f"({' x '.join(str(len(next(iter(f.values())))) for f in spec.factors)} over "
                        f"{', '.join('+'.join(f) for f in spec.factors)})", width=width, subsequent_indent="  ",
                        break_long_words=False, break_on_hyphens=False))
    if spec.size() > max_points:
        raise InputError(str(spec.path), f"{spec.size():,} points", f"the limit is {max_points:,}; raise it with --max-points")
    frame = expand(spec, max_points).frame
    print(f"{frame.height:,} points after exclusions; the first {min(10, frame.height)}:")
    cols = ["id", "model", "workload", "kv_dtype", "block_size", "tp", "pp", "gpu", "budget_bytes"]
    for row in frame.select(cols).head(10).iter_rows(named=True):  # a point's fields wrapped, the rest indented
        print(textwrap.fill("  ".join(f"{k}={v}" for k, v in row.items() if v is not None), width=width,
                            initial_indent="  ", subsequent_indent="    ", break_long_words=False,
                            break_on_hyphens=False))


def _gates(spec, frame) -> list[str]:  # type: ignore[no-untyped-def]
    from kvdash.report.labels import Labels
    from kvdash.sweep.gates import failure_lines

    return failure_lines(spec, frame, Labels(spec, frame))


def diff(
    base: Annotated[Path, typer.Argument(metavar="BASE", help="Base results.csv or report folder.")],
    head: Annotated[Path, typer.Argument(metavar="HEAD", help="Head results.csv or report folder.")],
    grid: Annotated[Optional[Path], Opt(help="The head grid file: its gates are compared (and serve the base too "
                                             "unless --base-grid is given), and settings results.csv lacks. "
                                             "Default: none (no gates compared).")] = None,
    base_grid: Annotated[Optional[Path], Opt(help="The base grid file (e.g. from git show BASE:sweeps/x.yaml). "
                                                  "Default: --grid.")] = None,
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
    from kvdash.render.table import Table, print_tables

    # ids and claimed ranges are copied by users: never cut; the prose wraps (fits 80 columns)
    table = Table(title="Claims registry (kvdash/data/claims.yaml)")
    table.add_column("id", wrap=False)
    table.add_column("claim (kind; metric; claimed)")
    table.add_column("source and conditions")
    for c in items:
        table.add_row(c.id, f"{c.claim} ({c.kind}; metric {c.metric or '-'}; claimed {c.claimed_text()})",
                      f"{c.source}. Measured under: {c.conditions}" + (f" Settled by: {c.settle}" if c.settle else ""))
    print_tables([table])
