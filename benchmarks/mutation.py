"""Mutation testing of kvdash's rules: does a wrong rule make a test fail, and which one?

A small AST driver (no dependency; mutmut's per-mutant start-up is too slow on two cores and it
cannot map a file to the tests that cover it).  For each target file it enumerates every site of
these operators:

=============  ===========================================
``arith``      ``+`` <-> ``-``, ``*`` <-> ``//``
``compare``    ``<`` <-> ``<=``, ``>`` <-> ``>=``
``const``      an integer constant ``c`` -> ``c + 1`` and ``c - 1`` (not bools, not in docstrings)
``minmax``     ``min`` <-> ``max`` and ``imin`` <-> ``imax``
=============  ===========================================

Each mutant is the file with exactly one site changed; it is written into a private copy of the
repository and the tests that cover that file run there (``pytest -x``, the golden-report test left
out unless ``--with-golden``, so a kill means a *named* test caught the rule).  A mutant survives
when those tests pass.  Mutants known to be equivalent (no input can tell them apart) are listed
once, with the reason, in ``benchmarks/mutation_equivalent.txt`` and excluded from the score.

Usage::

    python benchmarks/mutation.py                               # every target, every mutant
    python benchmarks/mutation.py kvdash/core/formulas.py -j 2  # one file, two workers
    python benchmarks/mutation.py --list kvdash/core/point.py   # show the mutants, run nothing

It writes ``benchmarks/results/mutation.md`` (scores and surviving mutants) unless ``--out`` says
otherwise.  Not part of CI: a full run takes tens of minutes.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EQUIVALENT = REPO / "benchmarks" / "mutation_equivalent.txt"

# The tests that cover each target (doctests of the target run too).
CORE_TESTS = ["tests/test_architectures.py", "tests/test_properties.py", "tests/test_published.py",
              "tests/test_cli.py", "tests/test_rules.py"]
SIMULATE_TESTS = ["tests/test_simulate_rules.py"]
REPORT_TESTS = ["tests/test_report_decision.py", "tests/test_report_fast_paths.py", "tests/test_sweep.py"]
TARGETS: dict[str, list[str]] = {
    "kvdash/core/formulas.py": CORE_TESTS,
    "kvdash/core/point.py": CORE_TESTS + ["tests/test_sweep.py"],
    # the hand-worked calc rules first (lean, under a second): with the pre-pass most mutants stop there
    # (issue 26 moved core/calc.py's rules: the composition to kvdash/answer/, vLLM's to kvdash/engines/)
    "kvdash/answer/calc.py": ["tests/test_calc_rules.py", *CORE_TESTS],
    "kvdash/answer/budget.py": ["tests/test_calc_rules.py", *CORE_TESTS],
    # the rest of core/calc.py's composition (issue 26): the assumptions' wording and the input record
    "kvdash/answer/text.py": ["tests/test_answer_text.py", "tests/test_calc_rules.py", "tests/test_answer_first.py",
                              "tests/test_kv_dtype_auto.py", *CORE_TESTS],
    "kvdash/answer/inputs.py": ["tests/test_calc_rules.py", *CORE_TESTS],
    "kvdash/core/pool.py": ["tests/test_calc_rules.py", *CORE_TESTS],
    # with the checkpoint-format and CUDA-graph rules' own tests (the time model's, issue 28)
    "kvdash/engines/vllm.py": ["tests/test_calc_rules.py", "tests/test_engines.py", "tests/test_vllm_rules.py",
                               *CORE_TESTS, "tests/test_kv_dtype_auto.py", "tests/test_time.py"],
    "kvdash/engines/vllm_view.py": ["tests/test_calc_rules.py", "tests/test_engines.py", "tests/test_answer_first.py",
                                    *CORE_TESTS],
    "kvdash/core/model.py": CORE_TESTS,
    "kvdash/core/dtypes.py": CORE_TESTS,
    # the hand-worked verdict rules first (about 3 s): with -x most mutants stop there
    "kvdash/sweep/claims.py": ["tests/test_claims_rules.py", "tests/test_sweep.py", "tests/test_report_decision.py"],
    # the simulator: the fast hand-worked file (about 2 s), not tests/test_simulate.py (paper-sized runs, CLI)
    "kvdash/simulate/engine.py": SIMULATE_TESTS,
    "kvdash/simulate/workload.py": SIMULATE_TESTS,  # split out of engine.py (issue 26), with the allocators
    "kvdash/simulate/allocators.py": SIMULATE_TESTS,  # and the reference simulator
    "kvdash/simulate/reference.py": SIMULATE_TESTS,
    "kvdash/simulate/rules.py": SIMULATE_TESTS,
    # the report (split by what it does, issue 26): the fast paths against their plain definitions, then the
    # report's sentences and tables worked by hand (minutes per mutant: a sample with --limit on two cores)
    "kvdash/report/picks.py": ["tests/test_report_fast_paths.py", "tests/test_report_decision.py"],
    "kvdash/report/labels.py": REPORT_TESTS,
    "kvdash/report/analysis.py": REPORT_TESTS,
    "kvdash/report/sections.py": REPORT_TESTS,
    "kvdash/report/charts.py": REPORT_TESTS,
    "kvdash/report/render.py": REPORT_TESTS,
    "kvdash/report/build.py": REPORT_TESTS,
    "kvdash/simulate/capacity.py": SIMULATE_TESTS,
    # the time model (issue 28): the step model's terms and the SLO search, against the time tests worked by hand
    "kvdash/core/steptime.py": ["tests/test_time.py", "tests/test_steptime_fit.py", "tests/test_kv_dtype_auto.py",
                                "tests/test_prefill_saved.py"],
    # the SLO search's rules on a scripted engine first (under a second), then the real simulator's
    "kvdash/simulate/slo.py": ["tests/test_slo_rules.py", "tests/test_time.py", "tests/test_sweep_time.py"],
}
GOLDEN = "tests/test_reports_current.py"
# Test files that need none of the pytest plugins (hypothesis, textual snapshots, syrupy, asyncio): when a
# target's tests are all here, the plugins are not loaded (pytest starts in 0.5 s instead of 2 s).
LEAN = {"tests/test_simulate_rules.py", "tests/test_claims_rules.py", "tests/test_calc_rules.py",
        "tests/test_engines.py", "tests/test_slo_rules.py"}
NO_PLUGINS = ["-p", "no:hypothesispytest", "-p", "no:textual-snapshot", "-p", "no:syrupy", "-p", "no:asyncio",
              "-W", "ignore::pytest.PytestConfigWarning"]  # the asyncio_* ini keys are unknown without it
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult}
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
SWAP_NAME = {"min": "max", "max": "min", "imin": "imax", "imax": "imin"}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//",
          ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository
    index: int  # the n-th mutation of the file, in walk order
    line: int
    col: int  # the node's start column
    end: int  # and end column: nested operations (2 * a * b) start at the same column
    change: str  # e.g. "+ -> -", "16 -> 17", "min -> max"

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.col}-{self.end}: {self.change}"


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, object]]:
    """(node, kind, replacement) for every mutation of the tree, in a fixed order."""
    skip = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in SWAP_BIN:
            yield node, "arith", SWAP_BIN[type(node.op)]
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAP_CMP:
                    yield node, "compare", (i, SWAP_CMP[type(op)])
        elif (isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in skip):
            yield node, "const", node.value + 1
            yield node, "const", node.value - 1
        elif isinstance(node, ast.Name) and node.id in SWAP_NAME and isinstance(node.ctx, ast.Load):
            yield node, "minmax", SWAP_NAME[node.id]
        elif isinstance(node, ast.Attribute) and node.attr in SWAP_NAME and isinstance(node.ctx, ast.Load):
            yield node, "minmax", SWAP_NAME[node.attr]


def _in_annotation_or_main(tree: ast.AST) -> set[int]:
    """Nodes under type annotations (mutating them changes nothing at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        for ann in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if ann is not None:
                out.update(id(n) for n in ast.walk(ann))
    return out


# The target files as they were when the run started: every mutant is made from (and every copy restored
# to) this text, so that editing the working tree during a long run cannot shift the mutants' sites.
SNAPSHOT: dict[str, str] = {}


def source(path: str) -> str:
    if path not in SNAPSHOT:
        SNAPSHOT[path] = (REPO / path).read_text()
    return SNAPSHOT[path]


def enumerate_mutants(path: str) -> list[Mutant]:
    tree = ast.parse(source(path))
    ignore = _in_annotation_or_main(tree)
    out = []
    for i, (node, kind, new) in enumerate(s for s in _sites(tree) if id(s[0]) not in ignore):
        if kind == "arith":
            change = f"{SYMBOL[type(node.op)]} -> {SYMBOL[new]}"  # type: ignore[attr-defined,index]
        elif kind == "compare":
            j, op = new  # type: ignore[misc]
            change = f"{SYMBOL[type(node.ops[j])]} -> {SYMBOL[op]}"  # type: ignore[attr-defined]
            if len(node.ops) > 1:  # type: ignore[attr-defined]
                change += f" (comparison {j + 1} of {len(node.ops)})"  # type: ignore[attr-defined]
        elif kind == "const":
            change = f"{node.value} -> {new}"  # type: ignore[attr-defined]
        else:
            change = f"{getattr(node, 'id', getattr(node, 'attr', '?'))} -> {new}"
        out.append(Mutant(path, i, node.lineno, node.col_offset, node.end_col_offset, change))  # type: ignore[attr-defined]
    return sorted(out, key=lambda m: (m.line, m.col, m.index))


def mutated_source(m: Mutant) -> str:
    tree = ast.parse(source(m.path))
    ignore = _in_annotation_or_main(tree)
    sites = [s for s in _sites(tree) if id(s[0]) not in ignore]
    node, kind, new = sites[m.index]
    if kind == "arith":
        node.op = new()  # type: ignore[attr-defined,operator]
    elif kind == "compare":
        j, op = new  # type: ignore[misc]
        node.ops[j] = op()  # type: ignore[attr-defined]
    elif kind == "const":
        node.value = new  # type: ignore[attr-defined]
    elif isinstance(node, ast.Name):
        node.id = new  # type: ignore[assignment]
    else:
        node.attr = new  # type: ignore[attr-defined]
    return ast.unparse(tree)


def load_equivalent() -> dict[str, str]:
    """``path:line:start-end: change`` -> reason, from the hand-kept list."""
    out = {}
    if EQUIVALENT.exists():
        for raw in EQUIVALENT.read_text().splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                key, _, reason = line.partition(" | ")
                out[key.strip()] = reason.strip()
    return out


def make_copy(root: Path) -> Path:
    dest = root / "repo"
    for name in ("kvdash", "tests", "templates", "sweeps", "reports", "benchmarks", "conformance", "examples"):  # data
        if (REPO / name).exists():
            shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    for path, text in SNAPSHOT.items():  # the targets as enumerated, even if edited since
        (dest / path).write_text(text)
    return dest


def run_tests(copy: Path, tests: list[str], target: str, timeout: float) -> tuple[str, float]:
    """'killed', 'survived' or 'timeout' (a mutant that loops is caught: it counts as killed)."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    existing = [t for t in tests if (copy / t).exists()]
    base = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header",
            "-o", "addopts=--doctest-modules"]
    t0 = time.perf_counter()
    # a lean first test file (hand-worked rules, no plugins) runs alone first: most mutants die there in a
    # second; the rest (and the survivors' verdict) come from the whole list
    lead = [t for i, t in enumerate(existing) if all(u in LEAN for u in existing[:i + 1])]  # the leading lean files
    passes = [[*NO_PLUGINS, target, *lead]] if lead and len(lead) < len(existing) else []
    passes.append([*(NO_PLUGINS if set(existing) <= LEAN else []), target, *existing])
    for extra in passes:
        try:
            proc = subprocess.run(base + extra, cwd=copy, env=env, capture_output=True,
                                  timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            return "timeout", time.perf_counter() - t0
        if proc.returncode != 0:
            return "killed", time.perf_counter() - t0
    return "survived", time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="target files (default: all of TARGETS)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--with-golden", action="store_true", help="also run the byte-identical report test")
    ap.add_argument("--limit", type=int, default=0, help="only the first N mutants of each file (a sample)")
    ap.add_argument("--only", type=Path, help="a file of mutant keys (as --list prints them, one a line): run "
                    "only those, e.g. the survivors of a full run after new tests")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "mutation.md")
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds a mutant's tests may run before it counts as "
                    "looping (killed); default: 5 x the unmutated run, at least 30.  Keep it well above a survivor's "
                    "run under -j, or a slow survivor counts as killed")
    args = ap.parse_args(argv)
    if args.timeout < 0:
        ap.error(f"--timeout {args.timeout:g}: expected seconds above 0 (or 0: 5 x the unmutated run)")
    files = args.files or list(TARGETS)
    for f in files:
        if f not in TARGETS:
            ap.error(f"{f}: not a mutation target; expected one of {', '.join(TARGETS)}")
    equivalent = load_equivalent()
    mutants = {f: enumerate_mutants(f) for f in files}
    for f, ms in mutants.items():  # an entry keyed to a line that has moved would count its mutant as a survivor
        keys = {m.key for m in ms}
        stale = [k for k in equivalent if k.startswith(f + ":") and k not in keys]
        if stale:
            print(f"warning: {len(stale)} entries of {EQUIVALENT.name} match no mutant of {f} (lines moved? "
                  f"re-key them): {', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}", file=sys.stderr)
    if args.limit:
        mutants = {f: ms[: args.limit] for f, ms in mutants.items()}
    if args.only:
        keep = {line.split("   [")[0].strip().removeprefix("- `").split("`")[0]
                for line in args.only.read_text().splitlines() if line.strip()}
        mutants = {f: [m for m in ms if m.key in keep] for f, ms in mutants.items()}
    if args.list:
        for ms in mutants.values():
            for m in ms:
                print(m.key + ("   [equivalent]" if m.key in equivalent else ""))
        return 0

    with tempfile.TemporaryDirectory(prefix="kvdash-mut-") as tmp:
        copies = [make_copy(Path(tmp) / f"w{i}") for i in range(max(1, args.jobs))]
        free = list(copies)
        results: dict[Mutant, str] = {}
        lines = [f"# Mutation testing ({time.strftime('%Y-%m-%d')})", "",
                 "`python benchmarks/mutation.py" + (" " + " ".join(files) if args.files else "")
                 + (f" --limit {args.limit}" if args.limit else "") + (f" --only {args.only.name}" if args.only else "")
                 + (f" --timeout {args.timeout:g}" if args.timeout else "")
                 + "`", "",
                 "| file | mutants | equivalent | killed | survived | score |", "|---|---:|---:|---:|---:|---:|"]
        survivors: list[str] = []
        for f, ms in mutants.items():
            tests = TARGETS[f] + ([GOLDEN] if args.with_golden else [])
            base, dt = run_tests(copies[0], tests, f, timeout=600)
            if base != "survived":
                print(f"{f}: the unmutated tests fail; fix them first", file=sys.stderr)
                return 1
            if args.timeout and args.timeout < 2 * dt:  # a survivor's run would end as a "timeout", counted killed
                print(f"{f}: --timeout {args.timeout:g} s is under twice the unmutated run ({dt:.0f} s): a surviving "
                      "mutant could count as killed", file=sys.stderr)
                return 2
            timeout = args.timeout or max(30.0, 5 * dt)
            todo = [m for m in ms if m.key not in equivalent]

            def one(m: Mutant, timeout: float = timeout, tests: list[str] = tests) -> tuple[Mutant, str]:
                copy = free.pop()
                try:
                    (copy / m.path).write_text(mutated_source(m))
                    outcome, _ = run_tests(copy, tests, m.path, timeout)
                finally:
                    (copy / m.path).write_text(source(m.path))
                    free.append(copy)
                return m, outcome

            with ThreadPoolExecutor(len(copies)) as pool:
                for m, outcome in pool.map(one, todo):
                    results[m] = outcome
                    print(f"{outcome:8s} {m.key}", flush=True)
            killed = sum(results[m] != "survived" for m in todo)
            n_eq = len(ms) - len(todo)
            score = 100 * killed / len(todo) if todo else 100.0
            lines.append(f"| `{f}` | {len(ms)} | {n_eq} | {killed} | {len(todo) - killed} | {score:.1f} % |")
            src = source(f).splitlines()
            survivors += [f"- `{m.key}`: `{src[m.line - 1].strip()}`" for m in todo if results[m] == "survived"]
        lines += ["", "## Surviving mutants", ""] + (survivors or ["none"])
        lines += ["", "## Equivalent mutants (excluded)", ""]
        # in the list's own order, so that a "the same" entry follows the reason it refers to
        lines += [f"- `{k}`: {v}" for k, v in equivalent.items() if any(k.startswith(f + ":") for f in files)]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines[:6 + len(mutants)]))
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
