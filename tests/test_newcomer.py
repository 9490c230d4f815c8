"""The CLI as a newcomer meets it (issue 15): one command per question with the answer first, no silent
nonsense, consistent figures, pipes, usage errors that point at the right help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdash.cli import main
from kvdash.units import parse_size

QUESTION = ["calc", "--model", "llama-3.1-70b", "--tp", "4", "--gpu", "h100-80gb", "--kv-dtype", "fp8",
            "--length", "8192"]


def run(args, capsys):
    """Run ``kvdash ARGS`` in-process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


class TestAnswerFirst:
    def test_used_longer_than_default_reservation_needs_no_extra_flag(self, capsys):
        """--used 8192 alone: the reservation defaults to max(2048, --used) = 8,192 tokens.

        Worked by hand: fp8 Llama-3.1-70B at TP 4 holds 2 x 80 layers x (8 / 4) KV heads x 128 x 1 B
        = 40,960 B per token.  Budget per rank: floor(85,520,809,984 B x 0.92) - 141.2e9 / 4 B of weights
        = 78,679,145,185 - 35,300,000,000 = 43,379,145,185 B before the runtime reserve.  The default reserve
        (issue 23: auto, the published terms at TP 4): activation 1.89 GiB = 2,029,372,047 B + non-torch (TP > 1)
        2.10 GiB = 2,254,857,830 B + CUDA graphs 26.88 MiB x 80 layers = 2,254,857,830 B = 6,539,087,707 B, so
        the budget is 43,379,145,185 - 6,539,087,707 = 36,840,057,478 B.  Paged: a block is 16 x 40,960 =
        655,360 B, floor(36,840,057,478 / 655,360) = 56,213 blocks, a request of 8,192 tokens takes 512 blocks,
        floor(56,213 / 512) = 109 requests.  Contiguous: 8,192 x 40,960 = 335,544,320 B per request,
        floor(36,840,057,478 / 335,544,320) = 109 requests."""
        code, out, err = run([*QUESTION, "--json"], capsys)
        assert (0, "") == (code, err)
        r = json.loads(out)
        assert 8192 == r["inputs"]["max_reserved_tokens"]
        assert (36_840_057_478, 40_960, 56_213) == (r["budget"]["per_rank_bytes"], r["bytes_per_token"],
                                                    r["whole_pool_blocks"])
        assert (109, 109) == (r["capacity"]["paged_requests"], r["capacity"]["contiguous_requests"])
        assert "summary" == next(iter(r))  # the answer is the first key
        assert r["summary"].startswith("109 requests of 8,192 tokens fit paged, 109 contiguous (runtime reserve "
                                       "6.09 GiB per rank, --reserve auto: published terms)")

    def test_upper_bound_is_asked_for_and_labelled(self, capsys):
        """--reserve 0 asks for the upper bound: 43,379,145,185 B, 66,191 blocks, floor(66,191 / 512) = 129, and
        the first words say so, with what the default gives (109, above)."""
        code, out, _ = run([*QUESTION, "--reserve", "0", "--json"], capsys)
        r = json.loads(out)
        assert (0, 43_379_145_185, 129) == (code, r["budget"]["per_rank_bytes"], r["capacity"]["paged_requests"])
        assert r["summary"].startswith("UPPER BOUND (--reserve 0, no runtime reserve; the default --reserve auto "
                                       "gives 109): 129 requests of 8,192 tokens fit paged")

    def test_table_starts_with_the_answer(self, capsys):
        code, out, _ = run(QUESTION, capsys)
        assert 0 == code
        assert out.startswith("109 requests of 8,192 tokens fit paged, 109 contiguous")

    def test_summary_says_why_contiguous_fits_fewer(self, capsys):
        """The tutorial: 47 paged, 19 contiguous, because Max reserves 2,048 tokens and 1,223 sit unused."""
        code, out, _ = run(["calc", "--json"], capsys)
        s = json.loads(out)["summary"]
        assert s.startswith("47 requests of 825 tokens fit paged, 19 contiguous")
        assert "reserves --max-reserved 2,048 tokens up front, 1,223 of them unused now" in s

    def test_explicit_short_reservation_names_the_fix(self, capsys):
        code, _, err = run(["calc", "--used", "8192", "--max-reserved", "2048"], capsys)
        assert 2 == code
        assert "add --max-reserved 8192 or more" in err

    def test_length_beyond_context_is_refused_on_length(self, capsys):
        """The default reservation follows --length, so a length past the context names --length."""
        code, _, err = run(["calc", "--model", "llama-3.1-8b", "--length", "200000"], capsys)
        assert 2 == code and err.startswith("kvdash: error: --length: 200000")


class TestNoSilentNonsense:
    @pytest.mark.parametrize("budget", ["12", "1048575", "80"])
    def test_bare_number_under_one_mib_refused_with_unit_hint(self, budget, capsys):
        code, _, err = run(["calc", "--budget", budget], capsys)
        assert 2 == code
        assert "12GiB (2^30 B), 80GB (10^9 B)" in err and 1 == len(err.strip().splitlines())

    def test_bare_number_of_one_mib_is_bytes_but_below_one_block(self, capsys):
        """1,048,576 B is accepted as bytes; Llama-3.1-70B bf16 blocks are 16 x 327,680 = 5,242,880 B, so
        the budget holds no block and is refused with the block size."""
        code, _, err = run(["calc", "--budget", "1048576"], capsys)
        assert 2 == code and "at least one block (5,242,880 B)" in err

    def test_budget_below_one_block_refused(self, capsys):
        code, _, err = run(["calc", "--budget", "4MiB"], capsys)
        assert 2 == code and "--budget" in err and "5,242,880 B" in err

    def test_gpu_util_without_gpu_warns_one_line(self, capsys):
        code, out, err = run(["calc", "--gpu-util", "0.5", "--json"], capsys)
        assert 0 == code
        json.loads(out)  # stdout stays JSON
        assert ["kvdash: warning: --gpu-util has no effect without --gpu or --gpu-memory "
                "(the KV budget is the 12 GiB default)"] == err.strip().splitlines()

    @pytest.mark.parametrize("args,field", [
        (["--gpu-util", "1.5"], "--gpu-util"),
        (["--gpu-util", "zero"], "--gpu-util"),
        (["--util-policy", "sglang"], "--util-policy"),
        (["--weights", "lots"], "--weights"),
    ])
    def test_unused_budget_options_still_validated(self, args, field, capsys):
        code, _, err = run(["calc", *args], capsys)
        assert 2 == code and err.startswith(f"kvdash: error: {field}")


class TestConsistentFigures:
    def test_mha_is_num_attention_heads_everywhere(self, capsys):
        """Llama-3.1-8B: 32 attention heads, 8 KV heads.  MHA = 2 x 32 layers x 32 heads x 128 x 2 B
        = 524,288 B per token, in the sensitivity key and in the variants table alike."""
        code, out, _ = run(["calc", "--model", "llama-3.1-8b", "--json"], capsys)
        s = json.loads(out)["sensitivity"]
        mha = [v for v in s["variants"] if v["variant"].startswith("MHA")]
        assert (524_288, 32) == (s["mha_bytes_per_token"], s["mha_kv_heads"])
        assert [524_288] == [v["bytes_per_token"] for v in mha]
        assert "mha_64_kv_heads_bytes_per_token" not in s  # 8B has 32 heads: the 64-head key would lie

    def test_min_gpu_util_is_a_number(self, capsys):
        code, out, _ = run(["calc", "--model", "llama-3.1-70b", "--tp", "4", "--gpu", "h100-80gb",
                            "--gpu-util", "0.9", "--target", "100", "--json"], capsys)
        # 100 requests of 825 tokens: 100 x 52 blocks x 1,310,720 B = 6,815,744,000 B; with the weights per rank
        # (35,300,000,000) and the default reserve auto at TP 4 (6,539,087,707), (6,815,744,000 + 41,839,087,707)
        # / 85,520,809,984 = 0.5689 -> 0.57 (floor(85,520,809,984 x 0.57) = 48,746,861,690 holds it); at
        # --reserve 0 it is 0.50, as worked in test_architectures
        assert 0.57 == json.loads(out)["planning"]["min_gpu_util"]

    def test_ratios_have_one_format(self, capsys):
        """Every paged/contiguous ratio in calc's tables has four decimals: 47 / 19 = 2.4737x.  The line
        vLLM logs ("Maximum concurrency ...: 19.20x") is quoted in vLLM's own format, two decimals."""
        import re

        code, out, _ = run(["calc"], capsys)
        _, doc, _ = run(["calc", "--json"], capsys)
        vllm = f"{json.loads(doc)['vllm_view']['max_concurrency']:.2f}x"  # 19.20x (the log line wraps)
        ratios = [x for x in re.findall(r"\b\d+\.\d+x\b", out) if x != vllm]
        assert ratios and all(re.fullmatch(r"\d+\.\d{4}x", x) for x in ratios), ratios
        assert "2.4737x" in out


class TestPipesAndUsage:
    @pytest.mark.parametrize("args", [
        ["calc"], ["models"], ["gpus"], ["claims"], ["simulate"], ["live", "--demo", "--once"],
        ["calc", "--help"], ["calc", "--json"],
    ])
    def test_closed_pipe_exits_0_quietly(self, args):
        """`kvdash ... | head -1`: the reader leaves early; kvdash exits 0 with nothing on stderr."""
        proc = subprocess.run(
            f"{sys.executable} -m kvdash.cli {' '.join(args)} | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}",
            shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
        assert "0" == proc.stdout.strip(), proc.stderr
        assert "" == proc.stderr

    def test_bare_kvdash_prints_multi_line_help(self, capsys):
        code, out, _ = run([], capsys)
        assert 0 == code
        assert out.startswith("Usage: kvdash") and len(out.splitlines()) > 5 and "calc" in out

    def test_bad_option_points_to_the_command_help(self, capsys):
        code, _, err = run(["calc", "--bogus"], capsys)
        assert 2 == code and "(see kvdash calc --help)" in err
        # an option without its value: click raises it without a context, and the line pointed to `kvdash --help`
        code, _, err = run(["simulate", "--requests"], capsys)
        assert 2 == code and "kvdash: error: Option '--requests' requires an argument. (see kvdash simulate --help)\n" \
            == err


def test_unit_hint_sizes_are_what_they_say():
    """The hint's examples parse to the units it names."""
    assert (12 * 2**30, 80 * 10**9) == (parse_size("12GiB"), parse_size("80GB"))


class TestDerivedLabelled:
    def test_head_dim_from_hidden_size_is_labelled(self, tmp_path, capsys):
        """A Llama config.json without head_dim: 4,096 / 32 = 128, stated as derived in the JSON and in
        the assumptions; one that states head_dim has nothing derived."""
        cfg = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "hidden_size": 4096, "max_position_embeddings": 8192}
        path = tmp_path / "m" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(cfg))
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        r = json.loads(out)
        line = "head_dim 128 derived as hidden_size 4,096 / num_attention_heads 32 (config.json has no head_dim)"
        # the two fields of the weight estimate the file leaves out are transformers' LlamaConfig defaults
        # (transformers/models/llama/configuration_llama.py: intermediate_size=11008, vocab_size=32000)
        filled = [f"{f}: transformers' LlamaConfig default" for f in ("intermediate_size 11,008", "vocab_size 32,000")]
        assert [*filled, line] == r["architecture"]["derived"]
        assert line in next(a for a in r["assumptions"] if a.startswith("model: "))  # after the engine caps
        path.write_text(json.dumps({**cfg, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256}))
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        assert [] == json.loads(out)["architecture"]["derived"]

    def test_model_type_alone_names_every_default(self, tmp_path, capsys):
        """Issue 23: {"model_type": "llama"} alone is what transformers' LlamaConfig makes of it: 32 layers, 32
        heads, hidden_size 4,096 (so head_dim 4,096 / 32 = 128, never "hidden_size 0"), 2,048 positions, and
        each default is named with the class; the KV heads default to the attention heads (MHA)."""
        path = tmp_path / "config.json"
        path.write_text('{"model_type": "llama"}')
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        derived = json.loads(out)["architecture"]["derived"]
        assert 0 == code
        assert [f"{f}: transformers' LlamaConfig default" for f in (
            "num_hidden_layers 32", "num_attention_heads 32", "hidden_size 4,096", "max_position_embeddings 2,048",
            "intermediate_size 11,008", "vocab_size 32,000")] == derived[:6]
        assert derived[6].startswith("head_dim 128 derived as hidden_size 4,096 / num_attention_heads 32")
        assert "hidden_size 0" not in out
        # a class whose head_dim default is not hidden_size / heads: Gemma3TextConfig's 256, where 2,304 / 8 = 288
        # (the line said "256 derived as hidden_size 2,304 / num_attention_heads 8")
        path.write_text('{"model_type": "gemma3_text"}')
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        assert 0 == code and "head_dim 256: transformers' Gemma3TextConfig default (config.json has no " \
            "head_dim; hidden_size 2,304 / num_attention_heads 8 would give 288)" in json.loads(out)["architecture"][
            "derived"]

    def test_kv_heads_defaulting_to_attention_heads_is_labelled(self, tmp_path, capsys):
        cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64,
               "hidden_size": 256, "max_position_embeddings": 4096}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        assert ["intermediate_size 11,008: transformers' LlamaConfig default",
                "vocab_size 32,000: transformers' LlamaConfig default",
                "KV heads 4 derived from num_attention_heads (config.json names no KV heads: multi-head "
                "attention)"] == json.loads(out)["architecture"]["derived"]


    def test_multimodal_defaults_name_the_text_class(self, capsys):
        """google/gemma-3-4b-it's text_config leaves out num_key_value_heads and vocab_size: they are
        Gemma3TextConfig's defaults (4 and 262,208), not Gemma3Config's (whose own are None); the KV heads (4 of 8
        attention heads) were shown as if read (a derived line was written only where they equal the heads)."""
        code, out, _ = run(["calc", "--model", "tests/data/configs/gemma-3-4b-it", "--json"], capsys)
        derived = json.loads(out)["architecture"]["derived"]
        assert 0 == code and "text_config.vocab_size 262,208: transformers' Gemma3TextConfig default" in derived
        assert "KV heads 4: transformers' Gemma3TextConfig default (config.json names no KV heads)" \
            in derived
        assert not any("Gemma3Config default" in line for line in derived)

    def test_a_text_config_without_its_model_type_names_the_class_that_reads_it(self, tmp_path, capsys):
        """A review of the class naming: a text_config that names no model_type read "transformers' config class
        for model_type None default"; Gemma3Config reads it with Gemma3TextConfig (its sub_configs)."""
        path = tmp_path / "config.json"
        path.write_text('{"model_type": "gemma3", "text_config": {}}')
        code, out, _ = run(["calc", "--config", str(path), "--json"], capsys)
        derived = json.loads(out)["architecture"]["derived"]
        assert 0 == code and "KV heads 4: transformers' Gemma3TextConfig default (config.json names no KV heads)" \
            in derived and not any("None" in line for line in derived)

    def test_json_names_the_kv_dtype_stored_under_auto(self, capsys):
        """--kv-dtype auto on NVIDIA's MiniMax-M2.5-NVFP4 (its ModelOpt config declares an 8-bit float KV scheme):
        vLLM 0.33 stores fp8_e4m3, and bytes_per_token counts 62 layers x 2 x 8 KV heads x 128 x 1 B = 126,976; the
        JSON said kv_dtype bf16 and bytes_per_element 2 beside it (the text said fp8_e4m3)."""
        code, out, _ = run(["calc", "--model", "tests/data/measured/models/minimax-m2.5-nvfp4", "--kv-dtype", "auto",
                            "--json"], capsys)
        d = json.loads(out)
        assert 0 == code and d["bytes_per_token"] == 62 * 2 * 8 * 128 * 1
        assert (d["inputs"]["kv_dtype"], d["inputs"]["kv_dtype_stored"]) == ("auto", "fp8_e4m3")
        assert d["architecture"]["bytes_per_element"] == 1
        rows = {r["variant"]: r for r in d["sensitivity"]["variants"]}
        assert rows["as configured"]["kv_dtype"] == "fp8_e4m3" and rows["kv dtype bf16"]["bytes_per_token"] == 253_952


    def test_model_line_says_what_the_file_does_not(self, capsys):
        """The calc audit's findings (a helper against each config.json): each figure the model line gives that the
        file does not state, or states otherwise, is explained."""
        def model_line(name: str) -> str:
            code, out, _ = run(["calc", "--model", f"tests/data/configs/{name}", "--json"], capsys)
            assert 0 == code
            d = json.loads(out)
            return next(a for a in d["assumptions"] if a.startswith("model: ")) + " | " + " ".join(
                d["architecture"]["derived"])

        # Falcon-H1: 44 decoder layers (num_hidden_layers), each an attention and a Mamba mixer: 88 cache layers
        assert "88 cache layers in 44 decoder layers (each runs" in model_line("falcon-h1-7b")
        # Zamba2: 81 Mamba layers, 13 of them with the shared attention beside (not "each")
        code, out, _ = run(["calc", "--model", "tests/data/configs/zamba2-7b", "--block-size", "64", "--json"], capsys)
        assert "94 cache layers in 81 decoder layers (13 of them run an attention beside" in out
        # Gemma 3n: 35 decoder layers, the last 15 (num_kv_shared_layers) read earlier layers' KV
        assert "20 cache layers of 35 decoder layers (the last 15 reuse" in model_line("gemma-3n-e4b")
        # Nemotron-H: 118 blocks, 54 of them MLP blocks without a cache
        assert "64 cache layers of 118 decoder layers (the other 54 are MLP" in model_line("nemotron-h-56b-base-8k")
        # MiMo-V2-Flash: full layers 4 KV heads, sliding ones swa_num_key_value_heads 8; K 192, V 128 (9 x 4 x 320 x 2
        # + 39 x 8 x 320 x 2 = 222,720 B a token: the line had said 4 KV heads, head_dim 192 for all 48)
        line = model_line("mimo-v2-flash")
        assert "full layers 4 KV heads, head_dim 192 (V 128); sliding layers 8 KV heads, head_dim 192 (V 128)" in line
        # Cohere2: vLLM's sliding layer sees sliding_window + 1 = 4,097 tokens
        assert "sliding window 4,097 = sliding_window 4,096 + 1" in model_line("command-r7b-12-2024")
        # Falcon-7B: multi_query wins over num_kv_heads 71
        assert "KV heads 1: multi_query true" in model_line("falcon-7b-instruct")
        # Mamba: no attention (was "0 attention heads, 0 KV heads, head_dim 0"), 2,048 is vLLM's fallback
        line = model_line("mamba-130m")
        assert "no attention layers" in line and "0 KV heads" not in line and "vLLM 0.33's fallback" in line
        assert "fallback" not in model_line("llama-3.1-8b")
        # a layer mix that rests on the class's default: Gemma 3 (62 layers, every 6th full: 10 full + 52 sliding),
        # Llama 4 Scout (48 layers, every 4th full: 12 full + 36 chunked); Gemma 3 1B writes its pattern (6)
        assert "every 6th layer full, the rest sliding (transformers' Gemma3TextConfig default" in model_line(
            "gemma-3-27b-it")
        assert "layer pattern" not in model_line("gemma-3-1b-it")
        assert "every 4th layer full (no RoPE), the rest chunked" in model_line("llama-4-scout-17b-16e-instruct")

    def test_a_model_without_cache_layers_is_refused_by_what_it_lacks(self, tmp_path, capsys):
        """Nemotron-H 56B with its hybrid_override_pattern made of MLP blocks only ("-" x 118): no layer holds KV or
        state.  It was refused as '--pp: 1 is not allowed; at most the number of layers (0)', naming an option the
        user never gave; now the config.json field and what is missing."""
        cfg = json.loads((Path("tests/data/configs") / "nemotron-h-56b-base-8k" / "config.json").read_text())
        cfg["hybrid_override_pattern"] = "-" * len(cfg["hybrid_override_pattern"])
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        code, out, err = run(["calc", "--model", str(tmp_path)], capsys)
        assert 2 == code and not out and len(err.strip().splitlines()) == 1
        assert "config.json: num_hidden_layers: 118 is not allowed; no layer holds KV cache or state" in err
        assert "--pp" not in err

    def test_a_text_config_without_its_model_type_still_names_the_default_layer_pattern(self, tmp_path, capsys):
        """Gemma 3 27B with its text_config's model_type left out: transformers reads the text_config as
        Gemma3TextConfig all the same (Gemma3Config.sub_configs), so the layer mix still rests on that class's
        default sliding_window_pattern 6 (62 layers: 10 full + 52 sliding) and the derived line says so, as
        for the published file (the line keyed on text_config's model_type and was left out); Llama 4 Scout's
        likewise (Llama4TextConfig's no_rope_layer_interval 4)."""
        for name, said in (("gemma-3-27b-it", "every 6th layer full, the rest sliding (transformers' Gemma3TextConfig"),
                           ("llama-4-scout-17b-16e-instruct", "every 4th layer full (no RoPE), the rest chunked")):
            cfg = json.loads((Path("tests/data/configs") / name / "config.json").read_text())
            del cfg["text_config"]["model_type"]
            folder = tmp_path / name
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(cfg))
            code, out, err = run(["calc", "--model", str(folder), "--json"], capsys)
            assert 0 == code, err
            assert said in " ".join(json.loads(out)["architecture"]["derived"])

    def test_sparse_mla_names_its_indexer(self, capsys):
        """DeepSeek-V3.2: 61 x (576 x 2 + 132) = 78,324 B a token; the 'how' said layers x latent x bytes (70,272)
        without the indexer's 132 B key cache (fp8 index_head_dim 128 + a 4 B scale)."""
        code, out, _ = run(["calc", "--model", "tests/data/configs/deepseek-v3.2", "--json"], capsys)
        d = json.loads(out)
        assert d["bytes_per_token"] == 61 * (576 * 2 + 132)
        assert d["architecture"]["index_bytes_per_token_per_layer"] == 132
        code, out, _ = run(["calc", "--model", "tests/data/configs/deepseek-v3.2"], capsys)
        assert "indexer" in " ".join(out.split())


class TestEightyColumns:
    @pytest.mark.parametrize("args", [
        ["calc"], ["calc", "--model", "llama-3.1-70b", "--tp", "4", "--gpu", "h100-80gb", "--target", "100",
                   "--group", "200,825,1525", "--prefix", "100"],
        ["calc", "--model", "gemma-2-9b"], ["models"], ["gpus"], ["claims"], ["simulate"],
        ["live", "--demo", "--once"],
    ])
    def test_tables_fit_80_columns_whole(self, args, capsys, monkeypatch):
        """Every line at most 80 columns; no value or id cut with an ellipsis."""
        monkeypatch.setenv("COLUMNS", "80")
        code, out, _ = run(args, capsys)
        assert 0 == code
        assert max(len(line) for line in out.splitlines()) <= 80
        assert "\u2026" not in out

    def test_claim_ids_printed_whole(self, capsys, monkeypatch):
        """The README tells users to copy claim ids: each appears whole in the 80-column table."""
        monkeypatch.setenv("COLUMNS", "80")
        _, doc, _ = run(["claims", "--json"], capsys)
        _, out, _ = run(["claims"], capsys)
        for claim in json.loads(doc):
            assert f"\u2502 {claim['id']} " in out

    @pytest.mark.parametrize("command", ["", "calc", "sweep", "diff", "live", "simulate", "record", "claims"])
    def test_help_not_cut_and_arguments_plain(self, command, monkeypatch):
        monkeypatch.setenv("COLUMNS", "80")
        proc = subprocess.run([sys.executable, "-m", "kvdash.cli", *command.split(), "--help"],
                              capture_output=True, text=True, timeout=60)
        assert 0 == proc.returncode
        lines = proc.stdout.splitlines()
        assert not [line for line in lines[1:] if line.rstrip().endswith("...")]  # [ARGS]... is notation
        assert "{" not in lines[0]
        assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_check_says_which_files_of_an_earlier_run_it_removed(tmp_path, capsys):
    """A run with --parquet writes results.parquet; a later --check run (results.csv by default) replaces
    the report and names the file it removed, on stderr, instead of dropping it silently."""
    from pathlib import Path

    grid = str(Path(__file__).resolve().parent.parent / "sweeps" / "tutorial.yaml")
    out = tmp_path / "r"
    assert 0 == run(["sweep", grid, "--out", str(out), "--parquet", "--quiet"], capsys)[0]
    assert (out / "results.parquet").is_file()
    code, _, err = run(["sweep", grid, "--out", str(out), "--check", "--quiet"], capsys)
    assert 0 == code
    assert not (out / "results.parquet").exists() and (out / "results.csv").is_file()
    assert err.startswith("kvdash: note: removed results.parquet from ")


def test_gpu_presets_read_vendor_figures_one_way():
    """Advertised sizes are GB = 10^9 B (b200 and mi300x: 192 GB = 192,000,000,000 B); NVML / nvidia-smi figures
    are MiB = 2^20 B (h100-80gb: 81,559 MiB = 85,520,809,984 B; h20: 97,871 MiB = 102,625,181,696 B)."""
    from kvdash.core.gpus import gpu_presets

    presets = gpu_presets()
    for key, gpu in presets.items():
        if gpu.basis == "nominal":
            gb = int(gpu.detail.split(" GB advertised")[0])
            assert gb * 10**9 == gpu.memory_bytes and "GB = 10^9 B" in gpu.detail, key
        else:
            assert "nvml" == gpu.basis
            mib = int(gpu.detail.split(" MiB")[0].replace(",", ""))
            assert mib * 2**20 == gpu.memory_bytes, key
    assert (102_625_181_696, 192_000_000_000, 192_000_000_000, 85_520_809_984) == tuple(
        presets[k].memory_bytes for k in ("h20", "b200", "mi300x", "h100-80gb"))
