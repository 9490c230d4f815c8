"""One vocabulary (issue 15): each concept is spelled one way across commands; old names survive as
hidden aliases that still work."""

from __future__ import annotations

import json

import pytest
import typer

from kvdash import defaults as D
from kvdash.cli import app
from kvdash.sweep import gridfile
from kvdash.sweep.evaluate import DEFAULTS as GRID_DEFAULTS
from tests.cli_run import run

# concept -> the one option name every command uses for it
CANONICAL = {
    "length": "--length", "reservation": "--max-reserved", "model": "--model", "config": "--config",
    "dtype": "--kv-dtype", "block size": "--block-size", "tensor parallel": "--tp", "gpu": "--gpu",
    "utilization": "--gpu-util", "weights": "--weights", "reserve": "--reserve", "budget": "--budget",
    "group": "--group", "engine timeout": "--engine-timeout", "interval": "--interval",
    "file size limit": "--max-file-size", "prefix": "--prefix", "max batched tokens": "--max-batched-tokens",
    "gpu memory": "--gpu-memory",
}
# other spellings of the same concepts (ours of old, and the engines' own)
SPELLINGS = {
    "--used": "length", "--len": "length", "--tokens": "length", "--seq-len": "length",
    "--max-len": "reservation", "--max-length": "reservation", "--reservation": "reservation",
    "--model-name": "model", "--model-config": "config", "--dtype": "dtype", "--kv-cache-dtype": "dtype",
    "--block": "block size", "--tensor-parallel": "tensor parallel", "--tensor-parallel-size": "tensor parallel",
    "--gpu-preset": "gpu", "--gpu-memory-utilization": "utilization", "--util": "utilization",
    "--weight-bytes": "weights", "--runtime-reserve": "reserve", "--kv-budget": "budget",
    "--lengths": "group", "--preset": "model", "--timeout": "engine timeout", "--scrape-timeout": "engine timeout",
    "--poll": "interval", "--period": "interval", "--max-size": "file size limit", "--max-bytes": "file size limit",
    "--prefix-len": "prefix", "--max-num-batched-tokens": "max batched tokens", "--gpu-mem": "gpu memory",
    "--gpu-total": "gpu memory",
}
# hidden aliases kept for one release: (command, old option, canonical option)
ALIASES = [("calc", "--used", "--length"), ("simulate", "--max-len", "--max-reserved"),
           ("calibrate", "--timeout", "--engine-timeout")]


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
    _, new, quiet = run(["calc", "--length", "100", "--json"], capsys)
    _, old, err = run(["calc", "--used", "100", "--json"], capsys)
    assert json.loads(new) == json.loads(old)
    assert 351 == json.loads(new)["capacity"]["paged_requests"]
    # the old name works with one line saying what to write (the README promises it); the new name says nothing
    assert "" == quiet
    assert ["kvdash: note: --used is the old name of --length (kept for one release); write --length 100"] == \
        err.splitlines()
    # refused input stays one line: the note is printed once the command has run, never beside a refusal
    code, _, err = run(["calc", "--used", "200000", "--model", "llama-3.1-8b"], capsys)
    assert 2 == code and 1 == len(err.splitlines()) and "old name" not in err


def test_old_and_new_name_disagreeing_is_an_error(capsys):
    code, _, err = run(["simulate", "--max-reserved", "1024", "--max-len", "2000"], capsys)
    assert 2 == code and "old name of --max-reserved" in err


def test_simulate_old_reservation_name_still_works(capsys):
    _, new, _ = run(["simulate", "--requests", "20", "--max-reserved", "1024", "--clip", "--json"], capsys)
    _, old, err = run(["simulate", "--requests", "20", "--max-len", "1024", "--clip", "--json"], capsys)
    assert json.loads(new) == json.loads(old)
    assert "kvdash: note: --max-len is the old name of --max-reserved (kept for one release); write --max-reserved " \
        "1024" in err


def test_simulate_takes_the_gpu_budget_as_calc_does(capsys):
    """simulate --gpu derives the per-rank budget with calc's rule: Llama-3.1-8B on an L40S,
    floor(48,305,799,168 x 0.92) - weights = the same budget_bytes calc reports; the token slots are
    floor(budget / 131,072 B per token) (fp16: 2 x 32 layers x 8 KV heads x 128 x 2 B)."""
    _, doc, _ = run(["calc", "--model", "llama-3.1-8b", "--gpu", "l40s", "--json"], capsys)
    budget = json.loads(doc)["pool"]["budget_bytes"]
    code, out, _ = run(["simulate", "--model", "llama-3.1-8b", "--gpu", "l40s", "--requests", "20"], capsys)
    assert 0 == code
    assert f"{budget // 131_072:,} token slots ({budget:,} B / 131,072 B" in " ".join(out.split())


# --- the sweep grid's keys (issue 15: the grid spells each concept as the CLI does) -----------------------

# section of the grid file -> (its keys, the command whose options they mirror)
GRID_SECTIONS = {
    "dimensions": (gridfile.DIMENSIONS, "calc"), "workloads.NAME": (gridfile.WORKLOAD_KEYS, "calc"),
    "models[i]": (gridfile.MODEL_KEYS, "calc"), "simulate": (gridfile.SIMULATE_KEYS, "simulate"),
}
# grid keys with no option of that command, each for a reason
GRID_ONLY = {
    ("dimensions", "workload"): "names a workloads: entry of the same file; a command takes its fields instead",
    ("workloads.NAME", "description"): "free text shown in the report",
    ("models[i]", "name"): "the label of a models: entry in the report",
    ("models[i]", "preset"): "a models: entry is itself the model; preset says which kind of entry it is "
                             "(beside config: and explicit fields), as --model takes a preset name",
}


def cli_form(key: str) -> str:
    return "--" + key.replace("_", "-")


def command_options(name: str) -> set[str]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}


def test_grid_keys_spell_concepts_one_way():
    """No grid key is another spelling of a CLI concept (used for length, max_len for max_reserved, ...)."""
    keys = [(section, key) for section, (names, _) in GRID_SECTIONS.items() for key in names]
    assert len(keys) > 40  # the walk found the schema
    clashes = [(section, key, CANONICAL[SPELLINGS[cli_form(key)]]) for section, key in keys
               if cli_form(key) in SPELLINGS and (section, key) not in GRID_ONLY]
    assert [] == clashes


def test_every_grid_key_is_the_option_of_its_command():
    """Each grid key is the option of the same concept with '_' for '-' (tp <-> --tp, max_reserved <->
    --max-reserved, length <-> calc --length, group <-> calc --group), or a listed grid-only key."""
    missing = [(section, key, command) for section, (names, command) in GRID_SECTIONS.items() for key in names
               if (section, key) not in GRID_ONLY and cli_form(key) not in command_options(command)]
    assert [] == missing
    stale = [k for k in GRID_ONLY if k[1] not in GRID_SECTIONS[k[0]][0]]
    assert [] == stale


@pytest.mark.parametrize("old,new,text", [
    ("used", "length", "workloads:\n  w: {used: 100, max_reserved: 2048}\n"),
    ("lengths", "group", "workloads:\n  w: {lengths: [200, 825, 1525], max_reserved: 2048}\n"),
    ("max_len", "max_reserved", "simulate: {requests: 20, max_len: 1024}\n"),
])
def test_old_grid_keys_work_for_one_release_with_a_note(tmp_path, capsys, old, new, text):
    """The old key reads as the new one (same points) and prints one note naming the position and the new key."""
    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text(text)
    new_file.write_text(text.replace(f"{old}:", f"{new}:"))
    a = gridfile.parse_grid(old_file)
    err = capsys.readouterr().err
    b = gridfile.parse_grid(new_file)
    assert "" == capsys.readouterr().err
    assert (a.workloads, a.simulate) == (b.workloads, b.simulate)
    assert 1 == len(err.strip().splitlines())
    assert "old.yaml:" in err and f"is the old name of {new}" in err and err.startswith("kvdash: note:")


def test_old_and_new_grid_key_together_are_an_error(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("workloads:\n  w: {used: 100, length: 200}\n")
    with pytest.raises(gridfile.InputError) as exc:
        gridfile.parse_grid(path)
    assert "g.yaml:2:" in exc.value.field and "workloads.w.used" in exc.value.field
    assert "old name of length" in str(exc.value)


# --- one set of defaults (kvdash/defaults.py) --------------------------------------------------------------

# option -> the default every command gives it (None-default options state it in their help text instead)
DEFAULTS = {"--model": D.MODEL, "--kv-dtype": D.KV_DTYPE, "--block-size": str(D.BLOCK_SIZE), "--tp": D.TP,
            "--pp": D.PP, "--reserve": D.RESERVE, "--length": D.LENGTH, "--interval": D.INTERVAL,
            "--engine-timeout": D.ENGINE_TIMEOUT, "--max-file-size": D.MAX_FILE_SIZE,
            "--prefix": 0}
HELP_DEFAULTS = {"--max-batched-tokens": "Default: vLLM 0.33's for the GPU",
                 "--max-num-seqs": "Default: vLLM 0.33's for the GPU",
                 "--gpu-util": D.GPU_UTIL, "--max-reserved": f"{D.RESERVATION}", "--budget": D.BUDGET_TEXT,
                 "--gpu": "Default: none", "--gpu-memory": "Default: none", "--config": "Default: none"}
# (command, option) whose default differs, each for a reason (kvdash/defaults.py says why)
EXCEPTIONS = {
    ("live", "--model"): "live reads a running engine: the default is the engine --demo runs (Llama-3.1-70B); "
                         "the tutorial model is hypothetical and never runs on a GPU",
    ("exporter", "--model"): "as live (the same options, kvdash/commands/common.py)",
    ("live", "--tp"): "Llama-3.1-70B's 141.2 GB of bf16 weights do not fit one H200 (TP 1 leaves no KV budget); "
                      "the --demo engine runs TP 8",
    ("exporter", "--tp"): "as live",
    ("exporter", "--interval"): "readings for Prometheus, whose scrape_interval is typically 15 s or more; each "
                                "reading also scrapes every --engine (live and record: a reading a second)",
    ("calibrate", "--model"): "calibrate measures a running engine: its default is the preset named like the model "
                              "the engine serves (a preset default would name a model the engine may not serve)",
}


def all_options():
    """(command, option name, click parameter) for every visible option of every command."""
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if param.param_type_name == "option" and not getattr(param, "hidden", False):
                for opt in param.opts:
                    if opt.startswith("--"):
                        yield name, opt, param


def test_one_default_per_concept_across_commands():
    """Every command gives a shared option the default of kvdash/defaults.py (live's --length is the text
    '825', a list of lengths), or states it in its help; the exceptions are listed with their reason.
    --block-size is 'auto' everywhere (calc, simulate, live, exporter): the engine's own choice, what `vllm
    serve` does without --block-size (kvdash answers what the engine will do; a fixed 16 was not vLLM's choice
    for fp8 MLA or sparse MLA)."""
    assert DEFAULTS["--block-size"] == "auto"
    seen = 0
    wrong = []
    for cmd, opt, param in all_options():
        if (cmd, opt) in EXCEPTIONS:
            assert param.default != DEFAULTS[opt]  # an exception that no longer differs must leave the list
            continue
        if opt in DEFAULTS and param.default is not None:
            seen += 1
            if str(param.default) != str(DEFAULTS[opt]):
                wrong.append((cmd, opt, param.default, DEFAULTS[opt]))
        if opt in HELP_DEFAULTS:
            seen += 1
            if param.default is not None or HELP_DEFAULTS[opt] not in (param.help or "").replace(",", ""):
                wrong.append((cmd, opt, param.default, param.help))
    assert seen > 25 and [] == wrong


def test_exceptions_are_the_live_pair_exporter_interval_and_calibrate_model():
    assert (D.LIVE_MODEL, D.LIVE_TP) == ("llama-3.1-70b", 8)
    assert set(EXCEPTIONS) == {("live", "--model"), ("exporter", "--model"), ("live", "--tp"), ("exporter", "--tp"),
                               ("exporter", "--interval"), ("calibrate", "--model")}


def test_grid_defaults_are_the_commands_defaults():
    """A dimension a grid leaves out takes the commands' default: bf16, block size auto (the engine's own
    choice, as `vllm serve` without --block-size: 16 for attention and bf16 MLA on Hopper, 64 for fp8 MLA and
    sparse MLA; a fixed 16 planned blocks vLLM never uses and refused DeepSeek-V3.2, which vLLM starts at 64),
    TP 1, PP 1, utilization 0.92 (vLLM 0.33's gpu_memory_utilization), reserve auto (issue 23: on GPU-derived
    budgets; declared ones take none); a grid without workloads holds one request of 825 tokens reserving
    2,048, as calc without --length."""
    assert (GRID_DEFAULTS["kv_dtype"], GRID_DEFAULTS["block_size"], GRID_DEFAULTS["tp"], GRID_DEFAULTS["pp"],
            GRID_DEFAULTS["gpu_util"], GRID_DEFAULTS["reserve"]) == ("bf16", "auto", 1, 1, "0.92", "auto")
    assert D.BLOCK_SIZE == "auto"
    w = gridfile.DEFAULT_WORKLOAD
    assert (w.lengths, w.max_reserved) == ((D.LENGTH,), D.RESERVATION) == ((825,), 2048)


def test_gpu_util_default_is_vllms():
    """vLLM 0.33.0, vllm/config/cache.py: gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)."""
    assert "0.92" == D.GPU_UTIL


@pytest.mark.parametrize("command", [["calc", "--json"], ["simulate", "--requests", "5", "--json"],
                                     ["live", "--demo", "--json"], ["exporter", "--demo", "--once"]])
@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", "9999999"])
def test_block_size_one_parser(capsys, command, value):
    """Every command refuses a bad --block-size with the same line: 'auto' or 1 to 65,536 tokens."""
    code, _, err = run([*command, "--block-size", value], capsys)
    assert 2 == code and "--block-size" in err and "'auto' or a whole number of tokens from 1 to 65,536" in err


@pytest.mark.parametrize("command", [["calc", "--json"], ["simulate", "--requests", "5", "--json"],
                                     ["live", "--demo", "--json"], ["exporter", "--demo", "--once"]])
def test_block_size_auto_everywhere(capsys, command):
    """--block-size auto is vLLM 0.33's choice: 16 for a model without MLA (the default models)."""
    code_auto, out_auto, _ = run([*command, "--block-size", "auto"], capsys)
    code_16, out_16, _ = run([*command, "--block-size", "16"], capsys)
    assert 0 == code_auto == code_16
    if command[0] != "exporter":
        a, b = json.loads(out_auto), json.loads(out_16)
        key = {"calc": "capacity", "simulate": "results", "live": "kv_pool"}[command[0]]
        assert a[key] == b[key] and a[key]


# --- one precision for ratios (units.RATIO_DECIMALS) ---------------------------------------------------------

def test_ratio_text_rule():
    """One helper formats every ratio: 94 paged / 38 contiguous = 2.473684... -> 2.4737x (4 decimals)."""
    from kvdash.units import RATIO_DECIMALS, ratio_text

    assert 4 == RATIO_DECIMALS and "2.4737x" == ratio_text(94 / 38) and "-" == ratio_text(None)


def test_reports_and_calc_print_ratios_with_one_precision(capsys):
    """Every 'N.NNx' ratio in the committed reports and in calc's output has 4 decimals; the only other is
    the quoted vLLM log line ('Maximum concurrency ...: 2.47x'), which is vLLM's own format."""
    import re
    from pathlib import Path

    texts = {str(p): p.read_text(encoding="utf-8") for p in Path("reports").glob("*/report.md")}
    _, out, _ = run(["calc"], capsys)
    texts["calc"] = re.sub(r"Maximum concurrency.{0,200}?\d+\.\d\dx", "", out, flags=re.S)  # vLLM's own line
    found = {name: re.findall(r"\b\d+\.(\d+)x\b", text) for name, text in texts.items()}
    assert len(texts) >= 6 and sum(map(len, found.values())) > 50
    assert {} == {name: d for name, ds in found.items() if (d := sorted({len(x) for x in ds} - {4}))}


# --- every --help states every option's default -------------------------------------------------------------

def help_entries(command: str, capsys) -> dict[str, str]:
    """``kvdash COMMAND --help`` as shown, one entry per option: first option name -> its whole text."""
    code, out, _ = run([command, "--help"], capsys)
    assert 0 == code
    entries: dict[str, str] = {}
    current = None
    for line in out.split("Options:", 1)[1].splitlines():
        first = line.strip().split(" ")[0].rstrip(",")
        if line.startswith("  -") and first.startswith("-"):
            names = [w.rstrip(",") for w in line.split() if w.startswith("-")]
            current = next((n for n in names if n.startswith("--")), names[0])
            entries[current] = line
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
    return entries


def test_every_help_names_every_default(capsys):
    """Each option of each command, as --help shows it, names its default: typer's '[default: X]' for a set
    default, 'Default: ...' in the help text for a None default. Flags (on when given), required options and
    --help itself are exempt."""
    root = typer.main.get_command(app)
    missing, checked = [], 0
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        entries = help_entries(name, capsys)
        for param in command.params:
            if param.param_type_name != "option" or getattr(param, "hidden", False):
                continue
            long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
            if long == "--help" or param.is_flag or param.required:
                continue
            checked += 1
            text = entries.get(long, "")
            assert text, (name, long)  # the option is shown, whole
            if "default" not in text.lower():
                missing.append((name, long))
    assert checked > 100 and [] == missing


def test_calc_model_default_does_not_clash_with_explicit_layers(capsys):
    """--model now defaults to the preset (not None), so calc asks click whether it was given: explicit
    --layers/--kv-heads/--head-dim alone work (3 x 1 x 8 x 2 x 2 B = 96 B per token); with --model they clash."""
    code, out, _ = run(["calc", "--layers", "3", "--kv-heads", "1", "--head-dim", "8", "--json"], capsys)
    assert 0 == code and 96 == json.loads(out)["bytes_per_token"]
    code, _, err = run(["calc", "--model", D.MODEL, "--layers", "3", "--kv-heads", "1", "--head-dim", "8"], capsys)
    assert 2 == code and "give either --model/--config or --layers" in err


def test_old_grid_key_noted_once_per_file(tmp_path, capsys):
    """Three workloads written with used: one note, at the first (line 2, column 7), counting the others."""
    path = tmp_path / "g.yaml"
    path.write_text("workloads:\n  a: {used: 100}\n  b: {used: 200}\n  c: {used: 300}\n")
    spec = gridfile.parse_grid(path)
    err = capsys.readouterr().err.strip().splitlines()
    assert [w.lengths for w in spec.workloads.values()] == [(100,), (200,), (300,)]
    assert 1 == len(err) and "g.yaml:2:7: workloads.a.used (and 2 more) is the old name of length" in err[0]


# --- one declaration per shared option (kvdash/commands/common.py) -------------------------------------------

# options several commands declare differently, each for a reason
PER_COMMAND = {
    "--json": "a flag; its help says what this command prints as JSON",
    "--once": "a flag; live prints one snapshot as tables, exporter the metrics page",
    "--dry-run": "a flag; sweep prints the first points, calibrate the entry",
    "--out": "sweep writes a folder of reports, record appends to one JSON-lines file",
    "--engine": "live shows one engine, exporter publishes several (repeat it), calibrate measures one vLLM "
                "(required)",
    "--seed": "two generators: live, record and exporter seed the demo GPUs (7), simulate the drawn workload (0)",
    "--length": "one length everywhere; exporter takes it repeated to publish several lengths, each on its own "
                "(calc and live pack several lengths as one --group): test_length_means_one_length_everywhere",
}


def declarations() -> dict[str, dict[str, tuple]]:
    """option -> command -> (its names, type, help) for every visible option."""
    out: dict[str, dict[str, tuple]] = {}
    for cmd, opt, param in all_options():
        out.setdefault(opt, {})[cmd] = (tuple(param.opts), param.type.name, param.help or "")
    return out


def test_each_shared_option_is_one_declaration():
    """An option several commands take is declared once: the same names, type and help text in every command
    (an option whose default differs for a listed reason, calibrate's --model, adds one sentence stating its
    default), or it is listed in PER_COMMAND with a reason."""
    shared = {opt: decls for opt, decls in declarations().items() if len(decls) > 1}
    assert {"--model", "--config", "--gpu", "--gpu-memory", "--weights", "--tp", "--pp", "--max-batched-tokens",
            "--engine-timeout", "--interval", "--max-file-size", "--prefix"} <= set(shared)
    split = {}
    for opt, decls in shared.items():
        if opt in PER_COMMAND:
            continue
        excepted = any((cmd, opt) in EXCEPTIONS for cmd in decls)  # compared up to the sentence on the default
        forms = {(names, kind, text.split(" Default: ")[0] if excepted else text)
                 for names, kind, text in decls.values()}
        if len(forms) > 1:
            split[opt] = sorted(decls)
    assert {} == split
    # a listed option that is one declaration now must leave the list
    assert [] == [opt for opt in PER_COMMAND if len(set(declarations()[opt].values())) == 1]


def test_calibrate_takes_the_shared_options():
    """calibrate's model, GPU, weights, parallelism and engine-timeout options are the declarations calc, live,
    exporter and simulate use (issue 15: the pending exception for calibrate is gone)."""
    decls = declarations()
    for opt, other in (("--config", "calc"), ("--gpu", "calc"), ("--gpu-memory", "calc"), ("--weights", "calc"),
                       ("--tp", "calc"), ("--pp", "calc"), ("--max-batched-tokens", "calc"),
                       ("--engine-timeout", "live")):
        assert decls[opt]["calibrate"] == decls[opt][other], opt
    names, kind, text = decls["--model"]["calibrate"]
    assert (names, kind) == decls["--model"]["calc"][:2] and text.startswith(decls["--model"]["calc"][2])
    assert "--timeout" not in decls  # the old name is hidden


@pytest.mark.parametrize("command", [["live", "--demo", "--once"], ["record", "--demo", "--count", "1"],
                                     ["exporter", "--demo", "--once"]])
def test_interval_one_check(tmp_path, capsys, command):
    """--interval: one declaration, one check, the same line in live, record and exporter (at least 0.1 s)."""
    extra = ["--out", str(tmp_path / "r.jsonl")] if command[0] == "record" else []
    code, _, err = run([*command, *extra, "--interval", "0.05"], capsys)
    assert 2 == code and "kvdash: error: --interval: 0.05 is not allowed; at least 0.1 seconds" in err


@pytest.mark.parametrize("command", [["live", "--demo", "--once"], ["simulate", "--requests", "5", "--json"]])
@pytest.mark.parametrize("value", ["0", "lots", "-1MiB"])
def test_max_file_size_one_parser(capsys, command, value):
    """--max-file-size: one parser in live and simulate, checked even when no --replay/--trace is read."""
    code, _, err = run([*command, "--max-file-size", value], capsys)
    assert 2 == code and err.startswith("kvdash: error: --max-file-size:") and err.count("\n") == 1


def test_max_file_size_bounds_replay_and_trace_alike(tmp_path, capsys):
    """The same limit stops a --replay file and a --trace file larger than it, naming the option that raises it."""
    replay, trace = tmp_path / "r.jsonl", tmp_path / "t.csv"
    code, _, _ = run(["record", "--demo", "--count", "2", "--interval", "0.1", "--out", str(replay)], capsys)
    assert 0 == code
    trace.write_text("prompt,output\n" + "100,50\n" * 200)
    size = 1000  # both files are larger: one demo snapshot alone is several KB; the trace is 1,414 bytes
    assert replay.stat().st_size > size and trace.stat().st_size > size
    for args in (["live", "--replay", str(replay), "--once"], ["simulate", "--trace", str(trace), "--requests", "5"]):
        code, _, err = run([*args, "--max-file-size", str(size)], capsys)
        assert 2 == code and "--max-file-size" in err and err.count("\n") == 1, (args, err)
        code, _, err = run([*args, "--max-file-size", "1MiB"], capsys)
        assert 0 == code, (args, err)


def test_default_file_size_limit_is_the_stream_cap():
    from kvdash import safeio
    from kvdash.units import parse_size

    assert parse_size(D.MAX_FILE_SIZE) == safeio.STREAM_CAP == 256 * 2**20


def test_length_means_one_length_everywhere(capsys):
    """--length is the tokens one request holds in calc, live and exporter; several lengths packed together are
    --group (calc, live), and exporter publishes each repeated --length on its own. Pinned against calc with the
    tutorial model in 12 GiB: 327,680 B per token, blocks of 16 tokens = 5,242,880 B, floor(12,884,901,888 /
    5,242,880) = 2,457 blocks; contiguous: 39,321 token slots.

    live --group 200,825,1525 is calc --group 200,825,1525: 13 + 52 + 96 = 161 blocks a group, floor(2,457 / 161)
    = 15 groups = 45 requests paged; 3 x 2,048 reserved a group, floor(39,321 / 6,144) = 6 groups = 18.
    live --length 825 and exporter --length 200 --length 825 are calc --length 200 and calc --length 825: floor(2,457
    / 13) = 189 and floor(2,457 / 52) = 47 paged; floor(39,321 / 2,048) = 19 contiguous each."""
    pool = ["--model", D.MODEL, "--tp", "1", "--budget-mode", "explicit", "--budget", "12GiB"]
    _, out, _ = run(["live", "--demo", "--json", *pool, "--group", "200,825,1525"], capsys)
    live = json.loads(out)["kv_pool"]
    _, out, _ = run(["calc", "--group", "200,825,1525", "--json"], capsys)
    group = json.loads(out)["group"]
    assert (45, 18) == (live["paged_requests"], live["contiguous_requests"])
    assert (15, 6) == (group["complete_groups"], group["contiguous_complete_groups"])
    _, out, _ = run(["live", "--demo", "--json", *pool, "--length", "825"], capsys)
    assert (47, 19) == (json.loads(out)["kv_pool"]["paged_requests"], json.loads(out)["kv_pool"]["contiguous_requests"])
    code, page, _ = run(["exporter", "--demo", "--once", *pool, "--length", "200", "--length", "825"], capsys)
    assert 0 == code
    for n, paged in ((200, 189), (825, 47)):
        _, out, _ = run(["calc", "--length", str(n), "--json"], capsys)
        capacity = json.loads(out)["capacity"]
        assert (paged, 19) == (capacity["paged_requests"], capacity["contiguous_requests"])
        assert f'kvdash_kv_requests_fit{{layout="paged",length="{n}"}} {paged}.0' in page
        assert f'kvdash_kv_requests_fit{{layout="contiguous",length="{n}"}} 19.0' in page


def test_length_list_is_the_old_spelling_for_one_release(capsys):
    """live --length A,B,C (before issue 15) still reads as --group A,B,C, and exporter --length A,B as
    --length A --length B: the same figures, with one note on stderr saying what to write."""
    pool = ["--model", D.MODEL, "--tp", "1", "--budget-mode", "explicit", "--budget", "12GiB"]
    _, new, err_new = run(["live", "--demo", "--json", *pool, "--group", "200,825,1525"], capsys)
    _, old, err_old = run(["live", "--demo", "--json", *pool, "--length", "200,825,1525"], capsys)
    assert json.loads(new)["kv_pool"] == json.loads(old)["kv_pool"] and "" == err_new
    assert 1 == len(err_old.splitlines()) and err_old.startswith("kvdash: note: --length 200,825,1525:")
    assert "write --group 200,825,1525" in err_old
    _, new, err_new = run(["exporter", "--demo", "--once", *pool, "--length", "200", "--length", "825"], capsys)
    _, old, err_old = run(["exporter", "--demo", "--once", *pool, "--length", "200,825"], capsys)
    fits = [line for line in new.splitlines() if line.startswith("kvdash_kv_requests_fit")]
    assert 4 == len(fits) and fits == [line for line in old.splitlines() if line.startswith("kvdash_kv_requests_fit")]
    assert "" == err_new and 1 == len(err_old.splitlines()) and "write --length 200 --length 825" in err_old


@pytest.mark.parametrize("command", [["calc", "--json"], ["live", "--demo", "--json"],
                                     ["exporter", "--demo", "--once"]])
@pytest.mark.parametrize("value", ["x", "1.5", "1" * 19])
def test_length_one_parser(capsys, command, value):
    """Every command refuses a --length that is no whole number with the same line."""
    code, _, err = run([*command, "--length", value], capsys)
    assert 2 == code and err.startswith("kvdash: error: --length:") and err.count("\n") == 1
    assert "expected a whole number of tokens (requests of several lengths: --group)" in err


def test_live_length_and_group_together_are_refused(capsys):
    """live draws one request length or one group: both at once is one error (calc uses --length beside a group
    for its snapshot figures, so it takes both)."""
    code, _, err = run(["live", "--demo", "--once", "--length", "100", "--group", "200,300"], capsys)
    assert 2 == code and "give --length or --group, not both" in err
    code, _, err = run(["live", "--demo", "--once", "--length", "200,300", "--group", "200,300"], capsys)
    assert 2 == code and "give them only as --group" in err
