"""Issue 17's input checks, on the command line: one line naming the option, exit code 2; and the one group-size
limit (8 lengths, :func:`kvdash.core.point.group_size_problem`) enforced for calc, sweep grids and live alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdash.errors import InputError
from kvdash.sweep.gridfile import parse_grid
from tests.cli_run import run

NINE = ",".join(["100"] * 9)


@pytest.mark.parametrize(("args", "field", "allowed"), [
    (["--tp", "0"], "--tp", "expected an integer from 1 to 1,024"),  # was a ZeroDivisionError under a mutant
    (["--pp", "0"], "--pp", "expected an integer from 1 to 1,024"),
    (["--gpu", "h100-80gb", "--reserve", "-1"], "--reserve", "expected a size such as 12GiB"),
    (["--gpu-memory", "10000000", "--weights", "-1"], "--weights", "expected a size such as 12GiB"),
])
def test_calc_refuses_with_one_line(args, field, allowed, capsys):
    """--tp 0, --pp 0, a negative --reserve or --weights: one line naming the option and what is allowed."""
    code, out, err = run(["calc", *args], capsys)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"kvdash: error: {field}: ") and allowed in err


def test_calc_weights_zero_is_accepted(capsys):
    """--weights 0 is a valid size (KV-only budgeting): vllm budget floor(10,000,000 x 0.92) - 0 - 0 = 9,200,000 B,
    0 weight bytes per rank (--reserve 0: the default auto reserve alone is larger than this 10 MB GPU)."""
    code, out, _ = run(["calc", "--json", "--gpu-memory", "10000000", "--weights", "0", "--reserve", "0"], capsys)
    assert code == 0
    b = json.loads(out)["budget"]
    assert (b["per_rank_bytes"], b["weights_per_rank_bytes"]) == (9_200_000, 0)


def test_calc_group_of_nine_refused(capsys):
    """calc --group with 9 lengths: refused (8 at most), never evaluated as the first 8."""
    code, _, err = run(["calc", "--group", NINE], capsys)
    assert code == 2 and err.strip() == f"kvdash: error: --group: '{NINE}' is not allowed; at most 8 lengths per " \
                                        "group (got 9)"


def test_grid_group_of_nine_refused(tmp_path: Path):
    """A sweep grid's workload of 9 lengths: refused at workloads.w.group (the key named lengths before issue 15)
    with the same limit; 8 parse."""
    path = tmp_path / "grid.yaml"
    path.write_text(f"workloads:\n  w: {{group: [{NINE}]}}\n")
    with pytest.raises(InputError) as e:
        parse_grid(path)
    assert "workloads.w.group" in str(e.value) and "at most 8 lengths per group (got 9)" in str(e.value)
    path.write_text(f"workloads:\n  w: {{group: [{','.join(['100'] * 8)}]}}\n")
    assert parse_grid(path).workloads["w"].lengths == (100,) * 8


def test_live_group_of_nine_refused(capsys):
    """kvdash live --group with 9 lengths: one line on --group, exit 2 (as calc --group)."""
    code, _, err = run(["live", "--demo", "--once", "--group", NINE], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("kvdash: error: --group: ") and "at most 8 lengths per group (got 9)" in err
