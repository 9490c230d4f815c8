"""The pull-request workflow behind ``action.yml``: regenerate the reports of the grids a pull request
changes, check their gates, and diff each against the base commit -- one Markdown body for the job
summary and for one sticky PR comment.

Two steps, so everything but GitHub's API runs (and is tested) locally:

* :func:`prepare` works on a git checkout only: ``git diff`` finds the changed grids, ``kvdash sweep
  --check`` regenerates each at HEAD (in ``reports/<grid>/``, the repository's convention), the base
  commit's grid is swept in a temporary ``git worktree``, and ``kvdash diff`` compares the two.
* :func:`post_comment` is the only call to GitHub: it finds the comment that carries
  :data:`MARKER` (a hidden HTML comment) and updates it, or creates it when there is none, so a pull
  request has one kvdash comment however many times the workflow runs.

The body stays under GitHub's 65,536-character limit: each grid's diff gets an equal share.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kvdash.errors import clip as shorten
from kvdash.markdown import md, md_code

MARKER = "<!-- kvdash-sweep-diff: one sticky comment, updated by the kvdash action -->"
GITHUB_LIMIT = 65_536
CHECK_LINES_SHOWN = 20  # failing points listed per grid; the job log has them all


@dataclass
class GridResult:
    path: str  # the grid file, relative to the repository
    status: str  # "changed", "added", "removed"
    sweep_code: int = 0  # kvdash sweep --check at HEAD: 0 gates pass, 1 a gate fails, 2 bad input
    check_lines: list[str] = field(default_factory=list)
    error: str = ""  # the one line kvdash printed when it refused the grid
    base_error: str = ""
    report_outdated: bool = False  # the regenerated report differs from the committed one
    diff: str = ""
    reads: list[str] = field(default_factory=list)  # files the grid references that changed (its YAML did not)


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stdout (stripped); a failure raises CalledProcessError."""
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def resolve_base(repo: Path, base: str) -> str:
    """The commit to compare with: the merge base of ``base`` and HEAD when the history has one (a
    shallow clone may not), else ``base`` itself; fetched from origin when it is not here."""
    try:
        git(repo, "cat-file", "-e", f"{base}^{{commit}}")
    except subprocess.CalledProcessError:
        git(repo, "fetch", "--no-tags", "--depth=1", "origin", base)
        base = "FETCH_HEAD"
    sha = git(repo, "rev-parse", f"{base}^{{commit}}")
    try:
        return git(repo, "merge-base", sha, "HEAD")
    except subprocess.CalledProcessError:
        return sha


def changed_grids(repo: Path, base_sha: str, patterns: list[str], every: bool = False) -> list[tuple[str, str]]:
    """(path, status) of every grid file matching ``patterns`` that differs between the base commit and
    HEAD (renames count as removed plus added), or whose referenced files do (:func:`changed_grid_reads`);
    with ``every``, also the grids whose file did not change (kvdash itself may have)."""
    return [(path, status) for path, status, _ in changed_grid_reads(repo, base_sha, patterns, every)]


def changed_grid_reads(repo: Path, base_sha: str, patterns: list[str],
                       every: bool = False) -> list[tuple[str, str, list[str]]]:
    """(path, status, changed files it reads): a grid whose YAML is the same on both sides is still "changed"
    when a file it references changed between the base commit and HEAD -- a model's ``config:`` (config.json),
    its ``safetensors_index:`` or the ``model.safetensors.index.json`` beside the config -- resolved relative
    to the grid file as the grid loader resolves them (:func:`kvdash.sweep.gridfile.referenced_files`)."""
    from kvdash.sweep.gridfile import referenced_files

    out = git(repo, "diff", "--name-status", "--no-renames", base_sha, "HEAD")
    found: dict[str, str] = {}
    touched: set[str] = set()
    for line in out.splitlines():
        status, _, path = line.partition("\t")
        touched.add(path)
        if any(fnmatch.fnmatch(path, p) for p in patterns):
            found[path] = {"A": "added", "D": "removed"}.get(status[:1], "changed")
    reads: dict[str, list[str]] = {}
    for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines():
        if path in found or not any(fnmatch.fnmatch(path, p) for p in patterns):
            continue
        try:  # the grid at HEAD (the same text at the base: its file did not change)
            text = git(repo, "show", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            continue
        files = [_in_repo(f) for f in referenced_files(Path(path), text)]
        reads[path] = sorted({f for f in files if f is not None and f in touched})
        if reads[path] or every:
            found[path] = "changed"  # present on both sides, file unchanged
    return [(path, status, reads.get(path, [])) for path, status in sorted(found.items())]


def _in_repo(path: Path) -> str | None:
    """``path`` (relative to the repository root, maybe with ``..``) as git names it; None outside the
    repository or absolute (git diff lists only files inside it)."""
    if path.is_absolute():
        return None
    norm = os.path.normpath(path.as_posix())
    return None if norm == ".." or norm.startswith("../") else norm


def _kvdash(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvdash.cli", *args], cwd=cwd, capture_output=True, text=True)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return shorten(lines[-1], 300) if lines else "no output"


def prepare(repo: Path, base: str, patterns: list[str], reports: str = "reports",
            work: Path | None = None, every: bool = False) -> tuple[list[GridResult], str]:
    """Regenerate, check and diff every changed grid; return the results and the base commit."""
    base_sha = resolve_base(repo, base)
    results = []
    work = Path(tempfile.mkdtemp(prefix="kvdash-pr-")) if work is None else work
    worktree = work / "base"
    git(repo, "worktree", "add", "--detach", "--force", str(worktree), base_sha)
    try:
        for path, status, reads in changed_grid_reads(repo, base_sha, patterns, every):
            r = GridResult(path, status, reads=reads)
            results.append(r)
            stem = Path(path).stem
            head_out = repo / reports / stem
            base_out = work / "base-reports" / stem
            if status != "removed":
                proc = _kvdash("sweep", path, "--out", str(head_out), "--check", "--quiet", cwd=repo)
                r.sweep_code = proc.returncode
                if proc.returncode == 1:
                    r.check_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
                elif proc.returncode != 0:
                    r.error = _last_line(proc.stderr)
                    continue
                rel = str(Path(reports) / stem)
                tracked = git(repo, "ls-files", "--", rel)
                r.report_outdated = bool(tracked) and bool(git(repo, "status", "--porcelain", "--", rel))
            if status != "changed":
                continue
            proc = _kvdash("sweep", path, "--out", str(base_out), "--quiet", cwd=worktree)
            if proc.returncode != 0:
                r.base_error = _last_line(proc.stderr)
                continue
            diff = _kvdash("diff", str(base_out), str(head_out), "--grid", str(repo / path),
                           "--base-grid", str(worktree / path), "--title", path,
                           "--max-chars", str(_share(len(results))), cwd=repo)
            if diff.returncode != 0:
                r.error = _last_line(diff.stderr)
            else:
                r.diff = diff.stdout
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=repo, capture_output=True)
    return results, base_sha


def _share(n: int) -> int:
    """Characters one grid's diff may take when ``n`` grids share a comment (room kept for the rest)."""
    return max(2_000, (GITHUB_LIMIT - 4_000) // max(n, 1))


def comment_body(results: list[GridResult], base_sha: str, changed_limit: int = 40) -> str:
    """The Markdown of the sticky comment (and the job summary): a verdict line, then one section per
    grid (gates, refused grids, the diff), under GitHub's comment limit."""
    failed = [r for r in results if r.sweep_code == 1]
    refused = [r for r in results if r.error or r.base_error]
    lines = [MARKER, "## kvdash: sweep reports of this pull request", ""]
    if not results:
        lines.append("No grid file changed against the base commit " + md_code(base_sha[:12]) + ".")
        return "\n".join(lines) + "\n"
    verdict = ("**a gate fails**" if failed else "all gates pass") + (", a grid was refused" if refused else "")
    lines += [f"{len(results)} grid file(s) changed against the base commit {md_code(base_sha[:12])}: {verdict}.",
              ""]
    share = _share(len(results))
    for r in results[:changed_limit]:
        section = [f"### {md(r.path, 120)} ({r.status})", ""]
        if r.error:
            section += [f"kvdash refused this grid: {md(r.error, 300)}", ""]
        if r.base_error:
            section += [f"The base commit's version could not be swept, so there is no diff: {md(r.base_error, 300)}",
                        ""]
        if r.status == "removed":
            section += ["The grid file was removed.", ""]
        if r.reads:
            section += ["The grid file is unchanged; re-swept because a file it reads changed: "
                        + ", ".join(md_code(f) for f in r.reads) + ".", ""]
        if r.sweep_code == 1:
            section += [f"**Gates: {len(r.check_lines):,} failing point(s)** (`kvdash sweep --check`):", ""]
            section += [f"- {line}" for line in r.check_lines[:CHECK_LINES_SHOWN]]
            if len(r.check_lines) > CHECK_LINES_SHOWN:
                section.append(f"- ... {len(r.check_lines) - CHECK_LINES_SHOWN:,} more in the job log")
            section.append("")
        elif r.status != "removed" and not r.error:
            section += ["Gates: all pass (`kvdash sweep --check`).", ""]
        if r.status == "added" and not r.error:
            section += ["A new grid: no base to compare with.", ""]
        if r.report_outdated:
            section += [f"The committed report in {md_code('reports/' + Path(r.path).stem)} differs from the "
                        "regenerated one: regenerate and commit it.", ""]
        if r.diff:  # without its own heading: this section names the grid
            diff = r.diff.split("\n", 2)[2] if r.diff.startswith("## kvdash diff") else r.diff
            section += [diff.replace("\n### ", "\n#### ")]
        text = "\n".join(section)
        if len(text) > share:  # check lines and notes are bounded; a cut here is a last resort
            text = text[:share - 100].rsplit("\n", 1)[0] + "\n\n*(section cut to fit the comment)*\n"
        lines.append(text)
    if len(results) > changed_limit:
        lines.append(f"*{len(results) - changed_limit:,} more changed grids are not shown; see the job log.*")
    lines += ["", "<sub>Points are matched by their swept dimensions; BASE is the base commit's grid swept "
              "with the same kvdash. Updated on every push.</sub>"]
    body = "\n".join(lines).rstrip("\n") + "\n"
    assert len(body) < GITHUB_LIMIT, len(body)
    return body


def post_comment(body: str, repo: str, pr: int, token: str, api: str = "https://api.github.com") -> str:
    """Update the pull request's comment that carries :data:`MARKER`, or create it; return "updated"
    or "created".  The only function that talks to GitHub."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "kvdash-action"}

    def call(method: str, url: str, payload: dict[str, str] | None = None) -> object:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the GitHub API URL
            return json.loads(resp.read().decode() or "null")

    existing = None
    page = 1
    while existing is None:
        batch = call("GET", f"{api}/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}")
        if not isinstance(batch, list) or not batch:
            break
        existing = next((c for c in batch if isinstance(c, dict) and MARKER in str(c.get("body", ""))), None)
        page += 1
    if existing is not None:
        call("PATCH", f"{api}/repos/{repo}/issues/comments/{existing['id']}", {"body": body})
        return "updated"
    call("POST", f"{api}/repos/{repo}/issues/{pr}/comments", {"body": body})
    return "created"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kvdash.action", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="regenerate, check and diff the changed grids (no network)")
    p.add_argument("--base", required=True, help="base commit or ref")
    p.add_argument("--grids", default="sweeps/*.yaml", help="glob(s) of grid files, separated by spaces")
    p.add_argument("--reports", default="reports", help="folder of the reports (one sub-folder per grid)")
    p.add_argument("--all-grids", action="store_true",
                   help="every grid matching --grids, not only those whose file changed")
    p.add_argument("--out", required=True, type=Path, help="folder for comment.md and result.json")
    p.add_argument("--repo", default=".", type=Path, help="the git checkout (default: here)")
    p.add_argument("--summary", type=Path, help="append the body here (GITHUB_STEP_SUMMARY)")
    p.add_argument("--github-output", type=Path, help="write step outputs here (GITHUB_OUTPUT)")
    c = sub.add_parser("comment", help="create or update the sticky PR comment (GitHub API)")
    c.add_argument("--body", required=True, type=Path)
    c.add_argument("--repo", required=True, help="owner/name")
    c.add_argument("--pr", required=True, type=int)
    args = parser.parse_args(argv)

    if args.cmd == "prepare":
        repo = args.repo.resolve()
        if not args.base.strip():
            print("kvdash: error: --base: empty; run on pull_request events or give the action a base: input",
                  file=sys.stderr)
            return 2
        try:
            results, base_sha = prepare(repo, args.base, args.grids.split(), args.reports, every=args.all_grids)
        except subprocess.CalledProcessError as exc:
            print(f"kvdash: error: {shorten(' '.join(exc.cmd), 120)} failed: {_last_line(exc.stderr or '')}",
                  file=sys.stderr)
            return 2
        body = comment_body(results, base_sha)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "comment.md").write_text(body, encoding="utf-8")
        failed = any(r.sweep_code == 1 for r in results)
        refused = any(r.error for r in results)
        (args.out / "result.json").write_text(json.dumps({
            "base": base_sha, "gates_failed": failed, "refused": refused,
            "grids": [{"path": r.path, "status": r.status, "sweep_code": r.sweep_code} for r in results]},
            indent=2) + "\n", encoding="utf-8")
        for line in (ln for r in results for ln in r.check_lines):
            print(line, file=sys.stderr)  # every failing point in the job log
        if args.summary:
            with args.summary.open("a", encoding="utf-8") as f:
                f.write(body.replace(MARKER + "\n", ""))
        if args.github_output:
            with args.github_output.open("a", encoding="utf-8") as f:
                f.write(f"gates-failed={'true' if failed else 'false'}\n")
                f.write(f"refused={'true' if refused else 'false'}\n")
                f.write(f"changed-grids={' '.join(r.path for r in results)}\n")
                f.write(f"comment={args.out / 'comment.md'}\n")
        print(f"{len(results)} changed grid(s); gates {'FAIL' if failed else 'pass'}; body {len(body):,} characters")
        return 0
    token = os.environ.get("GITHUB_TOKEN", "")
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com")
    try:
        how = post_comment(args.body.read_text(encoding="utf-8"), args.repo, args.pr, token, api)
    except urllib.error.HTTPError as exc:
        # a pull request from a fork gets a read-only token: say so, do not fail the job for it
        print(f"::warning::kvdash could not post the PR comment (HTTP {exc.code}); the job summary has it")
        return 0
    print(f"kvdash PR comment {how}")
    return 0
