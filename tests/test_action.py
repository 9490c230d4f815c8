"""The GitHub Action's script (kvdash/action/pr.py), run locally on a temporary git repository with a
base and a head commit; the comment body is compared with a golden file.  GitHub's API is the one
part left out of the repository test; post_comment is checked against a loopback HTTP server that
answers like the issues-comments API.

Regenerate the golden file after an intended change with KVDASH_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from kvdash.action.pr import GITHUB_LIMIT, MARKER, main, post_comment
from tests.test_markdown import assert_tables_keep_columns

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "pr_comment.golden.md"

# tutorial-gqa-80l at bf16 takes 327,680 B/token: 12 GiB hold 39,321 token slots = 2,457 blocks of 16;
# an 825-token chat takes ceil(825/16) = 52 blocks, so 2,457 // 52 = 47 requests (the tutorial's figure).
# At 10 GiB: 32,768 slots = 2,048 blocks -> 2,048 // 52 = 39 requests, below the gate's 40: the bf16
# chat point flips from pass to FAIL, fp8 (twice the slots: 78) still passes.
DEMO = """
title: demo
models: [tutorial-gqa-80l]
workloads:
  chat: {length: 825, max_reserved: 2048}
  rag: {length: 4096, max_reserved: 8192}
defaults:
  budget: BUDGET
grid:
  kv_dtype: [bf16, fp8]
gates:
  - {name: "chat holds 40 @team", metric: paged_requests, min: 40, where: {workload: chat}}
"""
SAME = "title: same\nmodels: [tutorial-gqa-80l]\ngrid:\n  block_size: [16, 32]\n"
NEW = "title: new\nmodels: [gpt-oss-20b]\ngrid:\n  kv_dtype: [bf16]\n"


def sh(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: demo.yaml at 12 GiB with its committed report, same.yaml; head (branch pr): demo at 10 GiB
    (report not regenerated), new.yaml added, a README edit."""
    r = tmp_path / "repo"
    (r / "sweeps").mkdir(parents=True)
    sh(r, "init", "-q", "-b", "main")
    (r / "sweeps" / "demo.yaml").write_text(DEMO.replace("BUDGET", "12GiB"))
    (r / "sweeps" / "same.yaml").write_text(SAME)
    (r / "README.md").write_text("x\n")
    subprocess.run([str(REPO / ".venv" / "bin" / "kvdash") if (REPO / ".venv" / "bin" / "kvdash").exists()
                    else "kvdash", "sweep", "sweeps/demo.yaml", "--out", "reports/demo", "-q"], cwd=r, check=True)
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "base")
    sh(r, "checkout", "-q", "-b", "pr")
    (r / "sweeps" / "demo.yaml").write_text(DEMO.replace("BUDGET", "10GiB"))
    (r / "sweeps" / "new.yaml").write_text(NEW)
    (r / "README.md").write_text("y\n")
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "head")
    return r


def test_prepare_matches_golden(repo: Path, tmp_path: Path, capsys) -> None:
    """The comment for a PR that lowers demo's budget and adds a grid: demo's gate flips pass -> FAIL for
    bf16 chat (47 -> 39 requests, worked above), the header names budget 12 GiB -> 10 GiB, the new grid
    has no diff, same.yaml is not touched, the committed demo report is flagged as out of date."""
    out = tmp_path / "out"
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs.txt"
    assert 0 == main(["prepare", "--repo", str(repo), "--base", "main", "--out", str(out),
                      "--summary", str(summary), "--github-output", str(outputs)])
    base_sha = sh(repo, "rev-parse", "main")
    body = (out / "comment.md").read_text()
    normal = body.replace(base_sha[:12], "BASESHA")
    if os.environ.get("KVDASH_UPDATE_GOLDEN"):
        GOLDEN.write_text(normal)
    assert GOLDEN.read_text() == normal
    assert body.startswith(MARKER) and len(body) < GITHUB_LIMIT
    assert_tables_keep_columns(body)
    assert summary.read_text() == body.replace(MARKER + "\n", "")
    assert "gates-failed=true\n" in outputs.read_text()
    assert "changed-grids=sweeps/demo.yaml sweeps/new.yaml\n" in outputs.read_text()
    result = json.loads((out / "result.json").read_text())
    assert result["gates_failed"] and result["base"] == base_sha
    # regenerated at HEAD: demo (changed) and new (added); same.yaml untouched
    assert (repo / "reports" / "new" / "report.md").is_file() and not (repo / "reports" / "same").exists()
    assert "10.00 GiB" in (repo / "reports" / "demo" / "report.md").read_text()
    assert "gate 'chat holds 40 @&#8203;team' failed at" in capsys.readouterr().err
    assert "worktree" not in sh(repo, "worktree", "list").split("\n", 1)[-1]  # the base worktree is gone


def test_no_changed_grid(repo: Path, tmp_path: Path) -> None:
    """Comparing HEAD with itself: one line saying no grid changed, gates not failed."""
    out = tmp_path / "out"
    assert 0 == main(["prepare", "--repo", str(repo), "--base", "HEAD", "--out", str(out),
                      "--github-output", str(tmp_path / "o.txt")])
    assert "No grid file changed against the base commit" in (out / "comment.md").read_text()
    assert "gates-failed=false" in (tmp_path / "o.txt").read_text()


def test_all_grids(repo: Path, tmp_path: Path) -> None:
    """--all-grids also sweeps and diffs a grid whose file did not change: same.yaml, 0 changed points
    (kvdash and its inputs are the same on both sides)."""
    out = tmp_path / "out"
    assert 0 == main(["prepare", "--repo", str(repo), "--base", "main", "--out", str(out), "--all-grids",
                      "--github-output", str(tmp_path / "o.txt")])
    assert "changed-grids=sweeps/demo.yaml sweeps/new.yaml sweeps/same.yaml\n" in (tmp_path / "o.txt").read_text()
    body = (out / "comment.md").read_text()
    same = body[body.index("### sweeps/same.yaml"):]
    assert "**0 changed, 0 added, 0 removed**, 2 unchanged" in same


@pytest.mark.parametrize("base", ["", "no-such-ref"])
def test_bad_base_one_line(repo: Path, tmp_path: Path, base: str, capsys) -> None:
    """An empty base (a push event) or one that cannot be found: one line on stderr, exit 2."""
    assert 2 == main(["prepare", "--repo", str(repo), "--base", base, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert 1 == len(err.strip().splitlines()) and err.startswith("kvdash: error:")


class FakeGitHub(BaseHTTPRequestHandler):
    """GET/POST /repos/o/r/issues/1/comments and PATCH /repos/o/r/issues/comments/ID, in memory."""

    comments: list[dict[str, object]] = []
    calls: list[str] = []

    def _send(self, code: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, str]:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_GET(self) -> None:  # noqa: N802
        self.calls.append(f"GET {self.path}")
        assert self.headers["Authorization"] == "Bearer tok"
        page = int(re.search(r"[?&]page=(\d+)", self.path).group(1))  # type: ignore[union-attr]
        self._send(200, self.comments[(page - 1) * 100:page * 100])

    def do_POST(self) -> None:  # noqa: N802
        self.calls.append(f"POST {self.path}")
        self.comments.append({"id": 1000 + len(self.comments), "body": self._body()["body"]})
        self._send(201, self.comments[-1])

    def do_PATCH(self) -> None:  # noqa: N802
        self.calls.append(f"PATCH {self.path}")
        cid = int(self.path.rsplit("/", 1)[1])
        for c in self.comments:
            if c["id"] == cid:
                c["body"] = self._body()["body"]
        self._send(200, {})

    def log_message(self, *args: object) -> None:
        pass


def test_sticky_comment_is_updated_not_duplicated() -> None:
    """First run creates the comment; later runs find it by the marker (past a first page of 100 other
    comments) and update it: one kvdash comment however often the workflow runs."""
    FakeGitHub.comments = [{"id": i, "body": f"review {i}"} for i in range(150)]
    FakeGitHub.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}"
        assert "created" == post_comment(MARKER + "\nfirst", "o/r", 1, "tok", api)
        assert "updated" == post_comment(MARKER + "\nsecond", "o/r", 1, "tok", api)
        assert "updated" == post_comment(MARKER + "\nthird", "o/r", 1, "tok", api)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    ours = [c for c in FakeGitHub.comments if MARKER in str(c["body"])]
    assert [MARKER + "\nthird"] == [c["body"] for c in ours] and 151 == len(FakeGitHub.comments)
    assert ["POST /repos/o/r/issues/1/comments", "PATCH /repos/o/r/issues/comments/1150"] == \
        [c for c in FakeGitHub.calls if not c.startswith("GET")][:2]


def test_action_yml_runs_the_script() -> None:
    """action.yml is a composite action whose steps call `python -m kvdash.action prepare` and
    `comment`, and passes inputs through env (never pasted into a script)."""
    spec = yaml.safe_load((REPO / "action.yml").read_text())
    assert "composite" == spec["runs"]["using"]
    runs = " ".join(s.get("run", "") for s in spec["runs"]["steps"])
    assert "python -m kvdash.action prepare" in runs and "python -m kvdash.action comment" in runs
    assert "${{" not in runs


# A config.json by hand: 2 (K and V) x 32 layers x KV_HEADS heads x 128 dims x 2 bytes (bf16) per token.
# 8 KV heads: 131,072 B/token; 1 GiB = 1,073,741,824 B holds 8,192 tokens = 512 blocks of 16; a
# 1,024-token chat takes 64 blocks, so 512 // 64 = 8 requests.  4 KV heads: 65,536 B/token, 16,384
# tokens = 1,024 blocks -> 16 requests.
CONFIG = """{"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32,
 "num_key_value_heads": KV_HEADS, "head_dim": 128, "hidden_size": 4096, "max_position_embeddings": 131072}
"""
READS = """
title: reads a config
models:
  - {name: tiny, config: ../models/tiny/config.json}
workloads:
  chat: {used: 1024, max_reserved: 2048}
defaults:
  budget: 1GiB
"""
INDEX = '{"metadata": {"total_size": 16000000000}, "weight_map": {}}\n'


@pytest.fixture
def config_repo(tmp_path: Path) -> Path:
    """main: sweeps/reads.yaml reads models/tiny/config.json (8 KV heads), sweeps/big.yaml reads
    models/big/config.json, sweeps/same.yaml reads no file; head (branch pr): only the config.json goes
    to 4 KV heads and a model.safetensors.index.json appears beside models/big/config.json.  No grid
    file changes."""
    r = tmp_path / "repo"
    for d in ("sweeps", "models/tiny", "models/big"):
        (r / d).mkdir(parents=True)
    sh(r, "init", "-q", "-b", "main")
    (r / "models" / "tiny" / "config.json").write_text(CONFIG.replace("KV_HEADS", "8"))
    (r / "models" / "big" / "config.json").write_text(CONFIG.replace("KV_HEADS", "8"))
    (r / "sweeps" / "reads.yaml").write_text(READS)
    (r / "sweeps" / "big.yaml").write_text(READS.replace("tiny", "big"))
    (r / "sweeps" / "same.yaml").write_text(SAME)
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "base")
    sh(r, "checkout", "-q", "-b", "pr")
    (r / "models" / "tiny" / "config.json").write_text(CONFIG.replace("KV_HEADS", "4"))
    (r / "models" / "big" / "model.safetensors.index.json").write_text(INDEX)
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "head: only files the grids read")
    return r


def test_a_changed_config_re_sweeps_the_grids_that_read_it(config_repo: Path, tmp_path: Path) -> None:
    """Only models/tiny/config.json changes (8 -> 4 KV heads): reads.yaml, which names it relative to the
    grid file (../models/tiny/config.json), is re-swept and diffed: paged requests 8 -> 16 (worked above).
    big.yaml is re-swept because a model.safetensors.index.json now sits beside its config (the loader
    reads it for the weights); same.yaml (a preset) is left alone."""
    out = tmp_path / "out"
    assert 0 == main(["prepare", "--repo", str(config_repo), "--base", "main", "--out", str(out),
                      "--github-output", str(tmp_path / "o.txt")])
    assert "changed-grids=sweeps/big.yaml sweeps/reads.yaml\n" in (tmp_path / "o.txt").read_text()
    body = (out / "comment.md").read_text()
    reads = body[body.index("### sweeps/reads.yaml"):]
    assert "re-swept because a file it reads changed: `models/tiny/config.json`." in reads
    assert "**1 changed, 0 added, 0 removed**" in reads
    assert "| 8 -> 16 (+8, +100.0 %) |" in reads and "| bytes_per_token | 131,072 | 65,536 |" in reads
    big = body[body.index("### sweeps/big.yaml"):body.index("### sweeps/reads.yaml")]
    assert "re-swept because a file it reads changed: `models/big/model.safetensors.index.json`." in big
    assert "sweeps/same.yaml" not in body
    assert (config_repo / "reports" / "reads" / "report.md").is_file()
    assert not (config_repo / "reports" / "same").exists()
    assert_tables_keep_columns(body)


def test_referenced_files_resolve_like_the_loader(tmp_path: Path) -> None:
    """config: and safetensors_index: are taken relative to the grid file's folder (as parse_grid takes
    them); without an index, the one beside the config; presets read nothing; bad YAML references nothing."""
    from kvdash.sweep.gridfile import referenced_files

    grid = Path("sweeps/g.yaml")
    text = ("models:\n  - llama-3.1-8b\n  - {config: ../m/a/config.json}\n"
            "  - {config: b/config.json, safetensors_index: ../idx/b.json}\n")
    assert [Path("sweeps/../m/a/config.json"), Path("sweeps/../m/a/model.safetensors.index.json"),
            Path("sweeps/b/config.json"), Path("sweeps/../idx/b.json")] == referenced_files(grid, text)
    assert [] == referenced_files(grid, "models: [: bad")
    assert [] == referenced_files(grid, "title: no models\n")
