"""One vocabulary (issue 15): each concept is spelled one way across commands; old names survive as
hidden aliases that still work."""

from __future__ import annotations

import json

import typer

from kvdash.cli import app
from tests.cli_run import run

# concept -> the one option name every command uses for it
CANONICAL = {
    "length": "--length", "reservation": "--max-reserved", "model": "--model", "config": "--config",
    "dtype": "--kv-dtype", "block size": "--block-size", "tensor parallel": "--tp", "gpu": "--gpu",
    "utilization": "--gpu-util", "weights": "--weights", "reserve": "--reserve", "budget": "--budget",
}
# other spellings of the same concepts (ours of old, and the engines' own)
SPELLINGS = {
    "--used": "length", "--len": "length", "--tokens": "length", "--seq-len": "length",
    "--max-len": "reservation", "--max-length": "reservation", "--reservation": "reservation",
    "--model-name": "model", "--model-config": "config", "--dtype": "dtype", "--kv-cache-dtype": "dtype",
    "--block": "block size", "--tensor-parallel": "tensor parallel", "--tensor-parallel-size": "tensor parallel",
    "--gpu-preset": "gpu", "--gpu-memory-utilization": "utilization", "--util": "utilization",
    "--weight-bytes": "weights", "--runtime-reserve": "reserve", "--kv-budget": "budget",
}
# hidden aliases kept for one release: (command, old option, canonical option)
ALIASES = [("calc", "--used", "--length"), ("simulate", "--max-len", "--max-reserved")]


def options():
    """(command, option name, hidden) for every option of every command."""
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("--"):
                    yield name, opt, getattr(param, "hidden", False)


def test_every_concept_spelled_one_way():
    """No visible option of any command spells a concept another way than CANONICAL."""
    visible = [(cmd, opt) for cmd, opt, hidden in options() if not hidden]
    assert visible  # the walk found the commands
    clashes = [(cmd, opt, CANONICAL[SPELLINGS[opt]]) for cmd, opt in visible if opt in SPELLINGS]
    assert [] == clashes


def test_hidden_aliases_are_hidden_and_named():
    hidden = {(cmd, opt) for cmd, opt, is_hidden in options() if is_hidden}
    for cmd, old, new in ALIASES:
        assert (cmd, old) in hidden and SPELLINGS[old] == {v: k for k, v in CANONICAL.items()}[new]




def test_old_length_name_gives_the_same_answer(capsys):
    """calc --used 100 is calc --length 100: 2 x 80 x 8 x 128 x 2 = 327,680 B per token; 7 blocks of 16
    per request; floor(2,457 / 7) = 351 requests paged."""
    _, new, _ = run(["calc", "--length", "100", "--json"], capsys)
    _, old, _ = run(["calc", "--used", "100", "--json"], capsys)
    assert json.loads(new) == json.loads(old)
    assert 351 == json.loads(new)["capacity"]["paged_requests"]


def test_old_and_new_name_disagreeing_is_an_error(capsys):
    code, _, err = run(["simulate", "--max-reserved", "1024", "--max-len", "2000"], capsys)
    assert 2 == code and "old name of --max-reserved" in err


def test_simulate_old_reservation_name_still_works(capsys):
    _, new, _ = run(["simulate", "--requests", "20", "--max-reserved", "1024", "--clip", "--json"], capsys)
    _, old, _ = run(["simulate", "--requests", "20", "--max-len", "1024", "--clip", "--json"], capsys)
    assert json.loads(new) == json.loads(old)


def test_simulate_takes_the_gpu_budget_as_calc_does(capsys):
    """simulate --gpu derives the per-rank budget with calc's rule: Llama-3.1-8B on an L40S,
    floor(48,305,799,168 x 0.92) - weights = the same budget_bytes calc reports; the token slots are
    floor(budget / 131,072 B per token) (fp16: 2 x 32 layers x 8 KV heads x 128 x 2 B)."""
    _, doc, _ = run(["calc", "--model", "llama-3.1-8b", "--gpu", "l40s", "--json"], capsys)
    budget = json.loads(doc)["pool"]["budget_bytes"]
    code, out, _ = run(["simulate", "--model", "llama-3.1-8b", "--gpu", "l40s", "--requests", "20"], capsys)
    assert 0 == code
    assert f"{budget // 131_072:,} token slots ({budget:,} B / 131,072 B" in " ".join(out.split())
