"""Hostile input and the filesystem (issue 9): each case the issue lists, by name.

Rules guarded here (docs/safety.md):
* ``--out`` replaces only a folder kvdash wrote (its ``kvdash-manifest.json`` lists every file in it), or
  an empty or missing folder; anything else is one line, exit 2, naming the path and ``--force``;
* a killed run leaves the previous report intact and its leftover is removed by the next run;
* Ctrl-C is one line, exit 130, and the previous report is unchanged;
* FIFOs, devices and folders are refused at once, files over their cap are refused;
* YAML bombs, cycles, deep nesting, NUL bytes, huge integers: one line, exit 2, in bounded time/memory;
* every integer has a documented range (kvdash.core.limits).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.hostile import billion_laughs  # the one alias bomb, timed by that benchmark
from kvdash.cli import main
from kvdash.core import limits
from kvdash.report import outdir
from tests.cli_run import start_big_sweep

REPO = Path(__file__).resolve().parents[1]
EXERCISE = REPO / "sweeps" / "exercise.yaml"
KVDASH = [sys.executable, "-c", "from kvdash.cli import main; main()"]


def run(args, capsys):
    """``kvdash ARGS`` in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def one_line_error(code, err, *words):
    assert 2 == code, err
    lines = err.strip().splitlines()
    assert 1 == len(lines) and lines[0].startswith("kvdash: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return lines[0]


def spawn(args, timeout=60, memory_bytes=3 * 2**30, **kw):
    """``kvdash ARGS`` in a child with an address-space limit (a runaway allocation fails, not the machine)."""

    def limit():  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([*KVDASH, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit, **kw)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --- 1. --out never deletes what kvdash did not write ------------------------------------------

class TestOutFolder:
    def test_victim_folder_is_refused_and_kept(self, tmp_path, capsys):
        """`mkdir -p victim/src && echo x > victim/src/a.txt && kvdash sweep ... --out victim` deleted victim/src."""
        victim = tmp_path / "victim"
        (victim / "src").mkdir(parents=True)
        (victim / "src" / "a.txt").write_text("x")
        code, _, err = run(["sweep", EXERCISE, "--out", victim], capsys)
        one_line_error(code, err, str(victim), "--force", "src")
        assert "x" == (victim / "src" / "a.txt").read_text() and ["src"] == os.listdir(victim)

    @pytest.mark.parametrize("where", [".", "sweeps"])
    def test_dot_and_sweeps_are_refused(self, where, capsys, monkeypatch):
        """`--out .` or `--out sweeps` would have wiped that folder; now refused before any work."""
        monkeypatch.chdir(REPO)
        before = sorted(os.listdir(REPO / where))
        code, _, err = run(["sweep", EXERCISE, "--out", where], capsys)
        one_line_error(code, err, "--force", "kvdash-manifest.json")
        assert before == sorted(os.listdir(REPO / where))

    def test_a_file_is_refused_even_with_force(self, tmp_path, capsys):
        """`--out notes.txt` turned a file into a folder (the file survived only as a hidden .old)."""
        notes = tmp_path / "notes.txt"
        notes.write_text("mine")
        for extra in ([], ["--force"]):
            code, _, err = run(["sweep", EXERCISE, "--out", notes, *extra], capsys)
            one_line_error(code, err, str(notes), "never replaces a file")
            assert "mine" == notes.read_text() and ["notes.txt"] == os.listdir(tmp_path)

    def test_a_link_is_refused(self, tmp_path, capsys):
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        code, _, err = run(["sweep", EXERCISE, "--out", tmp_path / "link"], capsys)
        one_line_error(code, err, "symbolic link")

    def test_missing_empty_and_own_folders_are_written(self, tmp_path, capsys):
        """A missing folder, an empty one, and one kvdash wrote (manifest) are written without --force."""
        (tmp_path / "empty").mkdir()
        for name in ("missing", "empty", "missing"):  # the third run replaces the first run's report
            code, _, err = run(["sweep", EXERCISE, "--out", tmp_path / name, "-q"], capsys)
            assert 0 == code, err
        manifest = json.loads((tmp_path / "missing" / outdir.MANIFEST).read_text())
        assert sorted(manifest["files"]) == sorted(set(os.listdir(tmp_path / "missing")) - {outdir.MANIFEST})
        assert set(manifest) == {"kvdash", "files"}  # no time, no path: committed reports stay byte-identical
        assert sorted(os.listdir(tmp_path)) == ["empty", "missing"]  # no work folder left behind

    def test_a_file_added_to_a_report_folder_makes_it_not_ours(self, tmp_path, capsys):
        out = tmp_path / "r"
        assert 0 == run(["sweep", EXERCISE, "--out", out, "-q"], capsys)[0]
        (out / "my-notes.md").write_text("keep")
        code, _, err = run(["sweep", EXERCISE, "--out", out], capsys)
        one_line_error(code, err, "my-notes.md", "kvdash did not write", "--force")

    def test_force_replaces_only_the_reports_files(self, tmp_path, capsys):
        """--force writes the report's files into the folder and removes only files of the old manifest."""
        out = tmp_path / "victim"
        (out / "src").mkdir(parents=True)
        (out / "src" / "a.txt").write_text("x")
        (out / "keep.txt").write_text("k")
        (out / outdir.MANIFEST).write_text(outdir.manifest_text(["old-chart.svg"]))
        (out / "old-chart.svg").write_text("<svg/>")  # listed in the old manifest: kvdash's own
        code, _, err = run(["sweep", EXERCISE, "--out", out, "--force", "-q"], capsys)
        assert 0 == code, err
        assert "x" == (out / "src" / "a.txt").read_text() and "k" == (out / "keep.txt").read_text()
        assert not (out / "old-chart.svg").exists() and (out / "report.md").is_file()
        listed = json.loads((out / outdir.MANIFEST).read_text())["files"]
        assert "keep.txt" not in listed and "src" not in listed and "report.md" in listed

    def test_exchange_swaps_two_folders_in_one_step(self, tmp_path):
        """renameat2(RENAME_EXCHANGE) on Linux: both names exist before, during and after."""
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir()
        b.mkdir()
        (a / "new").write_text("1")
        (b / "old").write_text("2")
        if not outdir.exchange(a, b):
            pytest.fail("renameat2(RENAME_EXCHANGE) is unavailable here; the fallback is two renames")
        assert ["old"] == os.listdir(a) and ["new"] == os.listdir(b)

    def test_fallback_without_exchange_replaces_the_report(self, tmp_path, capsys, monkeypatch):
        """Where renameat2 is missing (or the file system refuses it) two renames replace the report."""
        out = tmp_path / "r"
        assert 0 == run(["sweep", EXERCISE, "--out", out, "-q"], capsys)[0]
        (out / "report.md").write_text("old")
        monkeypatch.setattr(outdir, "exchange", lambda a, b: False)
        assert 0 == run(["sweep", EXERCISE, "--out", out, "-q"], capsys)[0]
        assert "old" != (out / "report.md").read_text() and ["r"] == os.listdir(tmp_path)

    def test_leftovers_of_dead_runs_are_removed_live_ones_kept(self, tmp_path):
        """Only marked work folders (kvdash-work.json with the PID and token of the name) of ended processes
        are removed; look-alikes without the marker stay, legacy names included (issue 25)."""
        out = tmp_path / "r"
        dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True).stdout.strip())
        stale = outdir.work_root(outdir.work_folder(out))
        live = outdir.work_root(outdir.work_folder(out))
        dead_name = stale.with_name(stale.name.replace(f"-{os.getpid()}-", f"-{dead}-"))
        os.rename(stale, dead_name)
        marker = json.loads((dead_name / outdir.WORK_MARKER).read_text())
        (dead_name / outdir.WORK_MARKER).write_text(json.dumps({**marker, "pid": dead}))
        (dead_name / "report" / "results.csv").write_text("id\n")
        legacy = tmp_path / ".r.tmp-abcd1234"  # kvdash 0.1's mkdtemp name, report files only: no marker
        legacy.mkdir()
        (legacy / "results.csv").write_text("id\n")
        removed = outdir.clean_leftovers(out)
        assert [dead_name] == removed
        assert live.is_dir() and legacy.is_dir() and not dead_name.exists()


class TestKilledAndInterrupted:
    """A real SIGKILL and a real SIGINT sent to a running sweep (a 100,000-point grid takes seconds)."""

    @staticmethod
    def start(tmp_path, out):
        return start_big_sweep(tmp_path, out)  # tests/cli_run.py, shared with tests/test_hostile.py

    def previous(self, tmp_path, capsys):
        out = tmp_path / "r"
        assert 0 == run(["sweep", EXERCISE, "--out", out, "-q"], capsys)[0]
        return out, snapshot(out)

    def test_sigkill_keeps_the_previous_report_and_the_next_run_cleans_up(self, tmp_path, capsys):
        out, before = self.previous(tmp_path, capsys)
        proc, work = self.start(tmp_path, out)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert before == snapshot(out)  # the complete previous report, byte for byte
        assert work.is_dir()  # what a killed run leaves ...
        assert 0 == run(["sweep", EXERCISE, "--out", out, "-q"], capsys)[0]
        assert not work.exists()  # ... the next run removes
        assert ["r"] == [p.name for p in tmp_path.iterdir() if p.name != "big.yaml"]

    def test_ctrl_c_is_one_line_exit_130_and_the_report_unchanged(self, tmp_path, capsys):
        out, before = self.previous(tmp_path, capsys)
        proc, work = self.start(tmp_path, out)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert 130 == proc.returncode
        assert "kvdash: error: interrupted; the previous report is unchanged\n" == err
        assert before == snapshot(out) and not work.exists()


# --- 2. bounded reads: FIFOs, devices, folders, sizes ------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


DEVICE_CASES = {
    "calc --config /dev/zero": ["calc", "--config", "{dev}"],
    "sweep /dev/zero": ["sweep", "{dev}"],
    "live --replay /dev/zero": ["live", "--replay", "{dev}", "--once"],
    "simulate --trace /dev/zero": ["simulate", "--trace", "{dev}"],
    "calc --safetensors-index /dev/zero": ["calc", "--safetensors-index", "{dev}"],
}


@pytest.mark.parametrize("args", DEVICE_CASES.values(), ids=DEVICE_CASES.keys())
@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom", "fifo", "folder"])
def test_devices_fifos_and_folders_are_refused_at_once(args, dev, tmp_path):
    """`kvdash calc --config /dev/zero` grew to 23 GB; a FIFO blocked forever.  Now: one line, at once."""
    if dev == "fifo":
        dev = str(tmp_path / "pipe")
        os.mkfifo(dev)
    elif dev == "folder":
        dev = str(tmp_path)
    started = time.monotonic()
    proc = spawn([a.format(dev=dev) for a in args], timeout=30)
    line = one_line_error(proc.returncode, proc.stderr)
    assert ("a device" in line or "FIFO" in line or "a folder" in line), line
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_grid_config_pointing_at_a_device_or_fifo(target, tmp_path):
    """A grid `config:` pointing at /dev/zero or a FIFO."""
    if target == "fifo":
        target = str(tmp_path / "pipe")
        os.mkfifo(target)
    grid = tmp_path / "g.yaml"
    grid.write_text(f"models:\n  - {{config: {target}}}\n")
    proc = spawn(["sweep", grid, "--dry-run"], timeout=30)
    one_line_error(proc.returncode, proc.stderr, "models[0]", "expected a regular file")


def test_config_over_16_mib_is_refused(tmp_path, capsys):
    big = tmp_path / "config.json"
    with big.open("wb") as fh:
        fh.truncate(16 * 2**20 + 1)  # sparse: 16 MiB + 1 byte
    code, _, err = run(["calc", "--config", big], capsys)
    one_line_error(code, err, "16,777,217 bytes, over the 16 MiB limit")


def test_trace_cap_is_raised_by_flag(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt,output\n" + "100,50\n" * 200_000)  # 1,400,014 bytes
    code, _, err = run(["simulate", "--trace", trace, "--requests", "50", "--max-file-size", "1MiB"], capsys)
    one_line_error(code, err, "1,400,014 bytes, over the 1 MiB limit; raise it with --max-file-size")
    code, _, err = run(["simulate", "--trace", trace, "--requests", "50", "--max-file-size", "2MiB", "--json"],
                       capsys)
    assert 0 == code, err


def test_large_trace_is_read_only_as_far_as_requests_needs(tmp_path):
    """A 100 MB trace took 33 s with --requests 100.  A 40 MB one now answers in seconds: reading stops
    after the 100th request (the simulation takes lengths in order)."""
    trace = tmp_path / "t.csv"
    with trace.open("w") as fh:
        fh.write("prompt,output\n")
        fh.write("300,120\n" * 5_000_000)
    started = time.monotonic()
    proc = spawn(["simulate", "--trace", trace, "--requests", "100", "--json"], timeout=60)
    assert 0 == proc.returncode, proc.stderr
    assert time.monotonic() - started < 15


def test_a_line_longer_than_1_mib_is_refused(tmp_path, capsys):
    replay = tmp_path / "r.jsonl"
    replay.write_text("x" * (2**20 + 10))
    code, _, err = run(["live", "--replay", replay, "--once"], capsys)
    one_line_error(code, err, "line 1", "at most 1 MiB")


# --- YAML bombs and hostile grids ---------------------------------------------------------------

GRID_CASES = {
    # name: (text, words of the one-line error)
    "alias bomb (billion laughs)": (billion_laughs(), ["after expanding aliases", "at most 200,000"]),
    "recursive alias a: &a [*a]": ("a: &a [*a]\n", ["*a", "cycle"]),
    "deep nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["nesting"]),
    "deep nested mappings": ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "x: 1\n",
                             ["at most 64 levels of nesting"]),
    "NUL byte": ("title: a\x00b\n", ["NUL character at line 1"]),
    "5,000-digit integer in a dimension": ("grid:\n  block_size: [" + "9" * 5000 + "]\n",
                                           ["an integer of 5,000 digits", "at most 40 digits"]),
    "max_model_len: [9223372036854775808]": ("grid:\n  max_model_len: [9223372036854775808]\n",
                                             ["grid.max_model_len[0]", "from 1 to 67,108,864"]),
    "budget of 2^61 bytes": ("grid:\n  budget: [2305843009213693952]\n", ["at most 2^60 bytes"]),
    "duplicate key": ("grid:\n  tp: [1]\n  tp: [2]\n", ["each key may appear once"]),
    "layers 10^9 in a grid model": ("models:\n  - {layers: 1000000000, kv_heads: 8, head_dim: 128}\n",
                                    ["layers", "from 1 to 1,024"]),
    "invalid UTF-8": ("title: \udcff\n", ["not UTF-8"]),
    "newline in a key": ('grid:\n  "a\\nb": [1]\n', ["grid.a\\nb", "unknown dimension"]),
    "record separator in a key (a line break for splitlines)": ('workloads:\n  "\\x1e": []\n', ["workloads.\\x1e"]),
    "empty exclude rule": ("exclude:\n  - {}\n", ["exclude[0]", "at least one dimension"]),
    "empty zip group": ("zip:\n  - {}\n", ["zip[0]", "at least one dimension"]),
    "exclude removes every point": ("exclude:\n  - {block_size: [auto]}\n", ["the exclude rules remove every point"]),
    "10,001 models": ("models:\n" + "".join(f"  - m{i}\n" for i in range(10_001)), ["at most 10,000 models"]),
}


@pytest.mark.parametrize("text,words", GRID_CASES.values(), ids=GRID_CASES.keys())
def test_hostile_grid_is_one_line(text, words, tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_bytes(text.encode("utf-8", "surrogateescape"))
    started = time.monotonic()
    code, _, err = run(["sweep", grid, "--dry-run"], capsys)
    one_line_error(code, err, *words)
    assert time.monotonic() - started < 10


def test_alias_bomb_bounded_in_a_child(tmp_path):
    """Before: over 60 s and past 6.4 GB.  Now refused within 20 s under a 1.5 GiB address-space limit."""
    grid = tmp_path / "bomb.yaml"
    grid.write_text(billion_laughs())
    started = time.monotonic()
    proc = spawn(["sweep", grid, "--check"], timeout=60, memory_bytes=3 * 2**29)
    one_line_error(proc.returncode, proc.stderr, "after expanding aliases")
    assert time.monotonic() - started < 20


def test_100000_explicit_models_refused_before_expansion(tmp_path):
    """A dry run of 100,000 explicit models took 38 s and 1.1 GB; it is refused by the value budget
    (each model is 4 values: 400,000 > 200,000) before any model is built."""
    grid = tmp_path / "many.yaml"
    grid.write_text("models:\n" + "".join(f"  - {{name: m{i}, layers: 32, kv_heads: 8, head_dim: 128}}\n"
                                          for i in range(100_000)))
    started = time.monotonic()
    proc = spawn(["sweep", grid, "--dry-run"], timeout=60, memory_bytes=3 * 2**29)
    one_line_error(proc.returncode, proc.stderr, "at most 200,000 values")
    assert time.monotonic() - started < 20


def test_aliases_within_budget_still_work(tmp_path, capsys):
    """Anchors and aliases stay usable for what grids need (shared settings)."""
    grid = tmp_path / "g.yaml"
    grid.write_text("grid:\n  block_size: &sizes [16, 32]\nexclude:\n  - {block_size: *sizes, tp: [8]}\n"
                    "defaults:\n  budget: 12GiB\n")
    code, out, err = run(["sweep", grid, "--dry-run"], capsys)
    assert 0 == code and "2 points before exclusions" in out, err


# --- 3. bounded work: documented ranges ---------------------------------------------------------

CALC_CASES = {
    "calc --gpu ''": (["--gpu", ""], ["--gpu", "expected one of"]),
    "--budget with 400 zeros before TiB": (["--budget", "1" + "0" * 400 + "TiB"], ["--budget", "(406 characters)"]),
    "5,000-digit --budget": (["--budget", "9" * 5000], ["--budget", "(5,002 characters)", "2^60"]),
    "--budget over 2^60": (["--budget", "1025PiB".replace("PiB", "TiB") + "0"], ["--budget"]),
    "--layers 10^9": (["--layers", "1000000000", "--kv-heads", "8", "--head-dim", "128"],
                      ["--layers", "from 1 to 1,024"]),
    "--layers 2^63": (["--layers", "9223372036854775808", "--kv-heads", "8", "--head-dim", "128"],
                      ["--layers", "from 1 to 1,024"]),
    "--kv-heads 257": (["--layers", "8", "--kv-heads", "257", "--head-dim", "128"], ["--kv-heads", "1 to 256"]),
    "--block-size 2^70": (["--block-size", str(2**70)], ["--block-size", "1 to 65,536"]),
    "--tp 2^63": (["--tp", str(2**63)], ["--tp", "1 to 1,024"]),
    "--used 2^40": (["--used", str(2**40), "--max-reserved", str(2**41)], ["from 1 to 67,108,864"]),
    "--target 2^40": (["--target", str(2**40)], ["--target", "4,294,967,296"]),
    "5,000-digit --group": (["--group", "9" * 5000], ["--group", "(5,002 characters)"]),
}


@pytest.mark.parametrize("args,words", CALC_CASES.values(), ids=CALC_CASES.keys())
def test_calc_out_of_range_is_one_line(args, words, capsys):
    started = time.monotonic()
    code, _, err = run(["calc", *args], capsys)
    line = one_line_error(code, err, *words)
    assert len(line) < 400  # the value is shortened (~80 characters and its length)
    assert time.monotonic() - started < 5


def test_ranges_keep_every_product_inside_int64():
    """The bound that makes the ranges safe for polars' Int64 columns: the largest bytes per token
    (layers x kv_heads x (head_dim + head_dim_v) x 4 bytes, plus fp32 K and V scales per head) times
    the longest length, and a whole group of 8 such lengths, stay below 2^63."""
    per_token = limits.MAX_LAYERS * limits.MAX_KV_HEADS * (2 * limits.MAX_HEAD_DIM * 4 + 2 * 4)
    assert per_token * limits.MAX_TOKENS * 8 < 2**63
    assert limits.MAX_BYTES == 2**60


def test_largest_accepted_model_answers_fast(capsys):
    """The top of every range is accepted and answers quickly (a list of 1,024 layers, not 10^9)."""
    started = time.monotonic()
    code, out, err = run(["calc", "--json", "--layers", "1024", "--kv-heads", "256", "--head-dim", "4096",
                          "--max-context", str(limits.MAX_TOKENS), "--budget", str(2**60)], capsys)
    assert 0 == code, err
    # 1,024 layers x 256 heads x (4,096 + 4,096) x 2 bytes (bf16) = 2^10 x 2^8 x 2^13 x 2 = 2^32
    assert 2**32 == json.loads(out)["bytes_per_token"]
    assert time.monotonic() - started < 5


# --- the other tracebacks of the issue ----------------------------------------------------------

REPLAY_CASES = {"[1]": "[1]", "42": "42", "NaN in used_bytes":
                '{"time": 1, "gpus": [{"index": 0, "name": "g", "used_bytes": NaN, "total_bytes": 80}]}'}


@pytest.mark.parametrize("line", REPLAY_CASES.values(), ids=REPLAY_CASES.keys())
def test_replay_line_of_the_wrong_shape(line, tmp_path, capsys):
    replay = tmp_path / "r.jsonl"
    replay.write_text(line + "\n")
    code, _, err = run(["live", "--replay", replay, "--once"], capsys)
    one_line_error(code, err, "line 1, ")


def test_engine_url_with_a_broken_ipv6_host(capsys):
    """`--engine 'http://[::1'` with --once raised ValueError; then the reading carried the error (exit 0);
    since issue 25 the option itself is refused: one line, exit 2."""
    code, out, err = run(["live", "--demo", "--engine", "http://[::1", "--json"], capsys)
    one_line_error(code, err, "--engine", "Invalid IPv6 URL")


def test_5000_digit_trace_line(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("9" * 5000 + ",10\n")
    code, _, err = run(["simulate", "--trace", trace], capsys)
    one_line_error(code, err, "--trace")


def test_error_lines_shorten_long_values(capsys):
    code, _, err = run(["calc", "--kv-dtype", "x" * 10_000], capsys)
    line = one_line_error(code, err, "(10,002 characters)")
    assert len(line) < 600


def test_planning_with_a_shared_prefix_never_divides_by_zero(capsys):
    """Found by the fuzzer: --target with --prefix probed lengths shorter than the prefix (0 bytes each,
    ZeroDivisionError).  The search starts at the prefix.  Since issue 23 the plan counts the shared prefix:
    52 // 16 = 3 whole prefix blocks are stored once, so in the tutorial's 2,457 blocks a request of L tokens
    owns cdiv(L, 16) - 3 and floor(2,454 / (cdiv(L, 16) - 3)) >= 1,048 needs cdiv(L, 16) - 3 <= 2, L <= 80:
    the longest uniform length is 80 (without sharing at 60 tokens only 614 fit)."""
    code, out, err = run(["calc", "--json", "--target", "1048", "--prefix", "52"], capsys)
    assert 0 == code, err
    assert 80 == json.loads(out)["planning"]["longest_uniform_tokens"]


SIMULATE_CASES = {
    "--requests 10^11 (numpy tried 745 GiB)": (["--requests", str(10**11)], ["--requests", "1 to 1,000,000"]),
    "--rate nan": (["--rate", "nan"], ["--rate", "positive number"]),
    "--rate inf": (["--rate", "inf"], ["--rate", "positive number"]),
    "--concurrency 10^11": (["--concurrency", str(10**11)], ["--concurrency", "1 to 1,000,000"]),
    "--seed 10^22": (["--seed", str(10**22)], ["--seed", "0 to 2^63 - 1"]),
    "--trace-every -5": (["--trace-every", "-5"], ["--trace-every"]),
}


@pytest.mark.parametrize("args,words", SIMULATE_CASES.values(), ids=SIMULATE_CASES.keys())
def test_simulate_out_of_range_is_one_line(args, words, capsys):
    code, _, err = run(["simulate", *args], capsys)
    one_line_error(code, err, *words)


def test_grid_simulate_rate_nan_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("simulate:\n  rate: .nan\n")
    code, _, err = run(["sweep", grid, "--dry-run"], capsys)
    one_line_error(code, err, "simulate.rate", "above 0")


def test_record_refuses_a_fifo(tmp_path, capsys):
    """`kvdash record --out PIPE` would block opening a FIFO for writing; it is refused at once."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    code, _, err = run(["record", "--demo", "--out", pipe, "--count", "1"], capsys)
    one_line_error(code, err, "--out", "regular file")


def test_metrics_sum_that_overflows_is_missing():
    """Found by the 9,200-case fuzz run: two samples of 1e308 summed with math.fsum raised OverflowError.
    A sum that is not finite is shown as missing, like a NaN sample."""
    from kvdash.sources.engine import parse_prometheus, reading_from_samples

    samples = parse_prometheus("vllm:kv_cache_usage_perc 1e308\nvllm:kv_cache_usage_perc 1e308\n"
                               "vllm:num_requests_running NaN\n")
    reading = reading_from_samples("http://x/metrics", samples)
    assert (None, None, "") == (reading.kv_usage, reading.running, reading.error)


class TestDeferredInterrupt:
    """While a grid is evaluated and its report built, Ctrl-C is raised between steps, never inside polars
    (a KeyboardInterrupt inside a polars call that runs Python code makes polars' Rust side panic and print a
    Rust panic message: seen on the Ctrl-C test above once the claims were judged in a thread)."""

    @pytest.fixture(autouse=True)
    def interactive_sigint(self):
        """Ctrl-C as an interactive Python has it (this suite may run under ``nohup`` or a background ``&``,
        which start it ignoring SIGINT; kvdash leaves an ignored signal ignored)."""
        before = signal.signal(signal.SIGINT, signal.default_int_handler)
        yield
        signal.signal(signal.SIGINT, before)

    def test_first_ctrl_c_waits_for_the_checkpoint(self):
        from kvdash.report.outdir import deferred_interrupt

        reached = []
        with pytest.raises(KeyboardInterrupt), deferred_interrupt() as checkpoint:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler has run: only noted
            reached.append("after the signal")
            checkpoint()
            reached.append("after the checkpoint")
        assert ["after the signal"] == reached

    def test_second_ctrl_c_raises_at_once(self):
        from kvdash.report.outdir import deferred_interrupt

        reached = []
        with pytest.raises(KeyboardInterrupt), deferred_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("first noted")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("second did not raise")
        assert ["first noted"] == reached

    def test_handler_restored(self):
        from kvdash.report.outdir import deferred_interrupt

        before = signal.getsignal(signal.SIGINT)
        with deferred_interrupt() as checkpoint:
            checkpoint()  # nothing pending: returns
        assert before is signal.getsignal(signal.SIGINT)


def test_an_ignored_signal_stays_ignored():
    """Rule (outdir._signals): a sweep's handlers leave alone what the process was started ignoring (nohup:
    SIGHUP), inside the grid (deferred_interrupt), at the end (terminate_like_interrupt) and after."""
    from kvdash.report.outdir import deferred_interrupt, terminate_like_interrupt

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with terminate_like_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # not ignored: handled
        with deferred_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
