"""The command line: output, JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvdash.cli import main


def run(args, capsys):
    """Run ``kvdash ARGS`` in-process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_calc_json_reproduces_tutorial(capsys):
    """`kvdash calc --json` with no other option is the tutorial artifact."""
    code, out, _ = run(["calc", "--json"], capsys)
    r = json.loads(out)
    assert 0 == code
    assert (327680, 39321, 2457, 39312) == (r["bytes_per_token"], r["kv_token_slots"], r["whole_pool_blocks"],
                                            r["block_backed_token_slots"])
    assert (19, 47) == (r["capacity"]["contiguous_requests"], r["capacity"]["paged_requests"])


def test_calc_json_group(capsys):
    """--group adds the exercise figures with the documented keys."""
    code, out, _ = run(["calc", "--json", "--group", "200,825,1525"], capsys)
    g = json.loads(out)["group"]
    assert {"lengths", "useful_slots", "allocated_slots", "tail_waste_slots", "complete_groups", "offload"} <= set(g)
    assert {"tokens", "useful_bytes", "allocated_bytes"} == set(g["offload"])


def test_calc_tables_name_units_and_assumptions(capsys):
    """The default tables print every section with units."""
    code, out, _ = run(["calc"], capsys)
    assert 0 == code
    for text in ("Assumptions", "327,680 B", "39,321 tokens", "2,457 blocks", "0.8413 %", "2.4737x",
                 "GPU KV cache size: 39,312 tokens", "Sensitivity", "12.00 GiB"):
        assert text in out


def test_calc_explains_per_token_bytes_for_the_architecture(capsys, monkeypatch):
    """MLA stores one latent per layer: its explanation must not claim a K/V pair (2 x ...)."""
    monkeypatch.setenv("COLUMNS", "200")
    _, mla, _ = run(["calc", "--model", "deepseek-v3"], capsys)
    _, gqa, _ = run(["calc", "--kv-dtype", "fp8", "--kv-scales", "token_head"], capsys)
    assert "one latent, no K/V pair" in mla and "2 x layers" not in mla
    assert "2 x layers x kv_heads x head_dim x bytes, + an fp32 K and V scale per KV head" in gqa


@pytest.mark.parametrize("args", [["calc", "--group", "200,825,1525", "--target", "100", "--prefix", "500"],
                                  ["models"], ["gpus"]])
def test_tables_fit_80_columns_and_cut_no_value(args, capsys, monkeypatch):
    """Piped output is 80 columns wide (as rich's); no value is shortened with an ellipsis."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(args, capsys)
    assert 0 == code
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "\u2026" not in out and "\x1b[" not in out


@pytest.mark.parametrize("args,field", [
    (["calc", "--block-size", "0"], "--block-size"),
    (["calc", "--length", "4000", "--max-reserved", "2048"], "--length"),
    (["calc", "--kv-dtype", "fp9"], "--kv-dtype"),
    (["calc", "--model", "llama-3-8b"], "--model"),
    (["calc", "--budget", "12 parsecs"], "--budget"),
    (["calc", "--budget", "-5GiB"], "--budget"),
    (["calc", "--group", "200,abc"], "--group"),
    (["calc", "--tp", "3", "--model", "llama-3.1-8b"], "--tp"),
    (["calc", "--gpu", "h100", "--model", "llama-3.1-8b"], "--gpu"),
    (["calc", "--block-size", "sixteen"], "--block-size"),
    (["calc", "--no-such-option"], "--no-such-option"),
    (["calc", "--config", "/does/not/exist.json"], "--config"),
    (["calc", "--layers", "80", "--kv-heads", "8"], "--head-dim"),
    (["calc", "--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--attention-heads", "4"], "--kv-heads"),
    (["calc", "--layers", "80", "--kv-heads", "8", "--head-dim", "0"], "--head-dim"),
])
def test_bad_input_one_line_exit_2(args, field, capsys):
    """Bad input: one line naming the field, exit code 2, no traceback."""
    code, out, err = run(args, capsys)
    assert 2 == code
    assert 1 == len(err.strip().splitlines())
    assert field in err and "Traceback" not in err


def test_suggests_closest_preset(capsys):
    _, _, err = run(["calc", "--model", "llama-3.1-7b"], capsys)
    assert "did you mean 'llama-3.1-70b'" in err


def test_malformed_config(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run(["calc", "--config", str(bad)], capsys)
    assert 2 == code and "not valid JSON (line 1" in err


def test_models_and_gpus_list(capsys):
    code, out, _ = run(["models", "--json"], capsys)
    rows = {r["preset"]: r for r in json.loads(out)}
    assert 327_680 == rows["tutorial-gqa-80l"]["bf16_bytes_per_token"]
    assert 70_272 == rows["deepseek-v3"]["bf16_bytes_per_token"]
    code, out, _ = run(["gpus"], capsys)
    assert 0 == code and "h100-80gb" in out


def test_console_script_help():
    """The installed entry point answers --help quickly and without error."""
    proc = subprocess.run([sys.executable, "-m", "kvdash.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert 0 == proc.returncode
    assert "calc" in proc.stdout


def test_calc_group_of_nine_is_refused_not_truncated(capsys):
    """Issue 17's bug: nine 100-token requests were evaluated as eight (800 useful slots, capacities x9).
    The limit of 8 lengths per group is stated once (core.point.group_size_problem) and enforced for calc."""
    code, _, err = run(["calc", "--group", ",".join(["100"] * 9)], capsys)
    assert code == 2
    assert "--group" in err and "at most 8 lengths per group (got 9)" in err


def test_calc_group_of_eight_counts_every_length(capsys):
    """Eight 100-token requests hold 8 x 100 = 800 useful slots and 8 x cdiv(100, 16) x 16 = 8 x 112 = 896
    allocated slots (block 16): every length of the group is counted."""
    code, out, _ = run(["calc", "--json", "--group", ",".join(["100"] * 8)], capsys)
    assert code == 0
    g = json.loads(out)["group"]
    assert (g["useful_slots"], g["allocated_slots"], g["tail_waste_slots"]) == (800, 896, 96)


def test_workload_inputs_never_drops_lengths():
    """The core refuses a group past the limit rather than reading only l0..l7."""
    from kvdash.core.point import workload_inputs

    assert workload_inputs((5,) * 8)["k"] == 8
    with pytest.raises(ValueError, match="at most 8"):
        workload_inputs((5,) * 9)


def test_refusals_show_what_was_typed_and_the_whole_rule(tmp_path, capsys):
    """A helper's trial: three refusals misled.  --budget beside --gpu echoed the bytes it was converted to
    (12884901888) where 12GiB was typed; a --trace refused beside a prefix replay showed PosixPath('...'); and
    --rates 0.1:1:1 was refused under a rule it met (N = 1 asks for one rate, so A must equal B: unsaid)."""
    code, _, err = run(["calc", "--budget", "12GiB", "--gpu", "h100-80gb"], capsys)
    assert 2 == code and err.startswith("kvdash: error: --budget: '12GiB' is not allowed; give either --budget or")
    trace = tmp_path / "t.csv"
    trace.write_text("prompt,output\n100,50\n")
    code, _, err = run(["simulate", "--prefix-workload", "multi-turn:2,2,100,100,100", "--trace", str(trace)], capsys)
    assert 2 == code and err.startswith(f"kvdash: error: --trace: '{trace}' is not allowed") and "PosixPath" not in err
    code, _, err = run(["simulate", "--rates", "0.1:1:1"], capsys)
    assert 2 == code and "N = 1 only with A = B" in err


CASES = {  # case: (the file's text, the command, the words of its refusal)
    "empty grid": ("", ["sweep", "{path}", "--dry-run"], "'an empty file' is not allowed; a grid names at least"),
    "comments only": ("# a grid\n", ["sweep", "{path}", "--dry-run"], "'an empty file' is not allowed"),
    "no workloads": ("workloads: {}\n", ["sweep", "{path}", "--dry-run"], "expected at least one workload"),
    "trace swapped": ("output,prompt\n50,100\n", ["simulate", "--trace", "{path}"], "read by position"),
    "trace timestamp": ("timestamp,input_length,output_length\n0,100,50\n", ["simulate", "--trace", "{path}"],
                        "read by position"),
    "fp8_ds_mla on mamba": ("", ["calc", "--model", "tests/data/configs/mamba-130m", "--budget", "20GiB",
                                 "--kv-dtype", "fp8_ds_mla"], "fp8_ds_mla applies to MLA models only"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_once_accepted_silently_is_refused(case, tmp_path, capsys):
    """A helper's trial: four inputs ran as though they were right.  An empty grid file wrote the tutorial's report;
    workloads: {} was replaced by the default workload (models: [] is refused); a trace whose header names the output
    first was read by position, lengths swapped (a Mooncake-style timestamp column first, too); fp8_ds_mla was
    accepted for an attention-free model, which every other model without MLA refuses.  Each is one line, exit 2."""
    text, command, words = CASES[case]
    path = tmp_path / "in"
    path.write_text(text)
    code, _, err = run([a.format(path=path) for a in command], capsys)
    assert 2 == code and words in err and 1 == len(err.strip().splitlines()), err


@pytest.mark.parametrize("header", ["prompt,output", "prompt_tokens,completion_tokens", "input,output", "ISL,OSL",
                                    "prompt,response_len_without_prompt"])
def test_a_trace_header_in_the_right_order_is_read(header, tmp_path, capsys):
    """The header check refuses a header naming the output first or the prompt second; one that names both words in a
    column (a review: prompt,response_len_without_prompt was refused) or neither is read by position."""
    path = tmp_path / "t.csv"
    path.write_text(f"{header}\n100,50\n")
    code, _, err = run(["simulate", "--trace", str(path), "--requests", "10"], capsys)
    assert 0 == code, err
