"""Option declarations and parsing shared by commands (no heavy imports).

Each option several commands take is declared once here, as an ``Annotated`` alias: its name, help text and
type cannot drift between commands; its default comes from :mod:`kvdash.defaults` in the signature (typer shows
it in ``--help``; an option whose default is None states it in its help text).
"""

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvdash import defaults as D
from kvdash.core.limits import parse_block_size
from kvdash.errors import InputError

__all__ = ["parse_block_size"]  # the one --block-size parser lives in kvdash.core.limits (the grid uses it too)

Opt = typer.Option
UNIT_HINT = "write a unit: 12GiB (2^30 B), 80GB (10^9 B), 512MiB"
DTYPES_TEXT = ("fp32, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8, fp8_ds_mla, or auto (what vLLM's --kv-cache-dtype "
               "auto stores: the checkpoint's declared KV scheme, else bf16)")

# --- the model --------------------------------------------------------------------------------------
MODEL_HELP = "Model preset (kvdash models), a config.json path, or a checkpoint folder holding one."
ModelOpt = Annotated[str, Opt("--model", "-m", help=MODEL_HELP)]
# calibrate's --model: the same option, whose default is read from the engine (a preset default would name a
# model the engine may not serve; tests/test_vocabulary.py lists the difference with this reason)
ServedModelOpt = Annotated[Optional[str], Opt("--model", "-m", help=f"{MODEL_HELP} Default: the preset named like "
                                                                   "the model the engine serves (its model_name "
                                                                   "label: meta-llama/Llama-3.1-70B-Instruct is "
                                                                   "llama-3.1-70b).")]
ConfigOpt = Annotated[Optional[Path], Opt(help="A Hugging Face config.json instead of --model. Default: none "
                                                "(--model's preset).")]
KvDtypeOpt = Annotated[str, Opt(help=f"KV dtype: {DTYPES_TEXT}.")]
BlockSizeOpt = Annotated[str, Opt(help=D.BLOCK_SIZE_HELP)]
TpOpt = Annotated[int, Opt(help="Tensor-parallel degree (live, exporter: the first TP readable GPUs are the "
                                "ranks; calibrate: the engine's).")]
PpOpt = Annotated[int, Opt(help="Pipeline-parallel degree.")]
# --- the budget -------------------------------------------------------------------------------------
BudgetOpt = Annotated[Optional[str], Opt(help=f"KV budget per rank: 12GiB, 80GB, 512MiB or bytes. Default: derived "
                                              f"from the GPU (--gpu, or the GPUs live reads), else "
                                              f"{D.BUDGET_TEXT} (the tutorial's).")]
GpuOpt = Annotated[Optional[str], Opt(help="GPU preset (kvdash gpus): its total memory, from which the budget is "
                                           "derived as an engine does. Default: none (calc, simulate: the budget is "
                                           "--budget; calibrate: GPU 0's total read through NVML).")]
GpuMemoryOpt = Annotated[Optional[str], Opt(help="GPU total memory (80GB, 141GiB or bytes) instead of a --gpu preset. "
                                                 "Default: none (--gpu's figure; calibrate without either reads GPU 0 "
                                                 "through NVML).")]
GpuUtilOpt = Annotated[Optional[str], Opt(help=f"Fraction of GPU memory for the engine. Default: {D.GPU_UTIL} "
                                               f"(vLLM 0.33's gpu_memory_utilization); {D.TRTLLM_UTIL} with "
                                               "--util-policy trtllm (free_gpu_memory_fraction).")]
WeightsOpt = Annotated[Optional[str], Opt(help="Weight bytes of the whole model (split over tp x pp ranks). Default: "
                                               "the preset's figure, the safetensors index, or an estimate counted "
                                               "from config.json.")]
EngineRulesOpt = Annotated[str, Opt("--engine-rules", help="Engine whose sizing rules are used: 'vllm' (vLLM 0.33, "
                                                         "the default) or 'sglang' (SGLang 0.5.23: its "
                                                         "mem_fraction_static default, cell size, token-slot pool "
                                                         "and start-up line; needs a GPU). calc shows SGLang's view "
                                                         "beside kvdash's pool and how it differs from vLLM; "
                                                         "simulate runs on SGLang's pool; the exporter sizes its "
                                                         "analytical pool by the rules.")]
ReserveOpt = Annotated[str, Opt(help="Runtime reserve per rank of a GPU-derived budget (activations, CUDA graphs, "
                                     "non-torch memory): 'auto', a kvdash calibrate entry, else the published "
                                     "terms; 0 asks for the upper bound; or a size (4GiB). A declared --budget "
                                     "takes none.")]
CAPS_DEFAULT = ("vLLM 0.33's for the GPU (EngineArgs.get_batch_defaults: from 160 GiB 16,384 tokens / 1,024 "
                "sequences; from 70 GiB and not an A100 8,192 / 1,024; else 2,048 / 256; without a GPU 8,192 / 1,024)")
MaxBatchedTokensOpt = Annotated[Optional[int], Opt(help="vLLM's max_num_batched_tokens (calc: sliding-window sizing, "
                                                         "the CUDA graphs and activation term of --reserve auto; "
                                                         "calibrate: the engine's, recorded with the entry). "
                                                         f"Default: {CAPS_DEFAULT}.")]
SloOpt = Annotated[Optional[str], Opt(help="e.g. ttft=2s,tpot=50ms (keys ttft, tpot, e2e): a timed simulation (needs "
                                          "--gpu; in simulate also --time) gives the highest concurrency and "
                                          "request rate whose p90 meets it, and the limit that binds. Default: "
                                          "none.")]
WeightFormatOpt = Annotated[str, Opt(help="Time model: storage format of the weights: auto (the checkpoint's own: "
                                          "its quantization_config's fp8 / NVFP4, else bf16), bf16, fp16, fp8, "
                                          "nvfp4, mxfp4, int4_wo.")]
MaxNumSeqsOpt = Annotated[Optional[int], Opt(help="vLLM's max_num_seqs: requests it runs at once. Default: "
                                                  f"{CAPS_DEFAULT}.")]
PerformanceModeOpt = Annotated[str, Opt(help="vLLM's --performance-mode: balanced, interactivity, or throughput "
                                             "(doubles both default caps).")]
AsyncSchedulingOpt = Annotated[bool, Opt("--async-scheduling/--no-async-scheduling",
                                         help="vLLM's async scheduling (on by default in 0.33): two batches in "
                                              "flight, so sliding-window and chunked layers hold 2 x "
                                              "max_num_batched_tokens more.")]
ChunkedPrefillOpt = Annotated[bool, Opt("--chunked-prefill/--no-chunked-prefill",
                                        help="vLLM's chunked prefill (on by default); off raises the default "
                                             "max_num_batched_tokens to max_model_len.")]
AllowLongOpt = Annotated[bool, Opt("--allow-long-max-model-len",
                                   help="Accept a --max-model-len above the model's derived limit, as vLLM does with "
                                        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (it refuses it otherwise).")]
# --- the requests -----------------------------------------------------------------------------------
# --length is one length everywhere (its value: tokens one request holds); several lengths packed together are
# --group (calc, live); exporter publishes several lengths each on its own, so there --length repeats
LengthOpt = Annotated[Optional[str], Opt("--length", metavar="<int>", help=f"Tokens each request holds now (the snapshot). Default: "
                                                          f"{D.LENGTH} (the tutorial's). Requests of several lengths: "
                                                          "--group.")]
ExporterLengthOpt = Annotated[Optional[list[str]], Opt("--length", metavar="<int>", help=f"Tokens each request holds now; repeat it to "
                                                                        "publish several lengths, each on its own "
                                                                        "(--length 2048 --length 8192). Default: "
                                                                        f"{D.LENGTH} (the tutorial's).")]
GroupOpt = Annotated[Optional[str], Opt(help="A group of request lengths packed repeatedly, e.g. 200,825,1525. "
                                             "Default: none (one request of --length).")]
PrefixOpt = Annotated[int, Opt(help="Tokens of a prompt prefix every request shares (simulate: stored once by "
                                    "paged-prefix; paged on the same requests is the no-sharing baseline).")]
OffloadOpt = Annotated[Optional[str], Opt(help="Tiers below the GPU: cpu:SIZE[,disk:SIZE|disk:inf], bytes over all "
                                             "ranks as vLLM's --kv-offloading-size (calc: each tier's chunks and "
                                             "tokens, one request's reload bytes and time, requests held; simulate: "
                                             "the tiers of the prefix-cache replay). Default: none.")]
BlocksPerChunkOpt = Annotated[int, Opt(help="vLLM offloading: GPU blocks per CPU chunk.")]
LinkOpt = Annotated[Optional[str], Opt(help="GPU-host link: pcie4-x16, pcie5-x16, nvlink-c2c or a bandwidth (25GB/s). "
                                          "Default: the --gpu preset's (PCIe Gen5 x16 without one).")]
DiskLinkOpt = Annotated[str, Opt(help="Disk (or remote) tier bandwidth: nvme-gen4, nvme-gen5, ethernet-100g, "
                                       "rdma-400g or a bandwidth.")]
MaxReservedOpt = Annotated[Optional[int], Opt(help=f"Tokens a contiguous allocator reserves per request (Max "
                                                   f"policy). Default: the largest of {D.RESERVATION} (capped at the "
                                                   "model's context) and every length asked about.")]
# --- live readings (live, exporter, record) ---------------------------------------------------------
DemoOpt = Annotated[bool, Opt("--demo", help="Simulated GPUs and engine (8 x H200 running Llama-3.1-70B at TP 8), "
                                             "no GPU needed.")]
SeedOpt = Annotated[int, Opt(help="Seed of the demo.")]
GpusOpt = Annotated[int, Opt(help="Number of demo GPUs (1 to 64).")]
EngineTimeoutOpt = Annotated[float, Opt(help="Seconds one engine read may take in all (connect + read + parse; 0.1 "
                                             "to 60).")]
IntervalOpt = Annotated[float, Opt(help=f"Seconds between readings (at least {D.MIN_INTERVAL}): live redraws, record "
                                        f"writes a snapshot, exporter refreshes in the background (scrapes never "
                                        f"trigger one). Default: {D.INTERVAL:g}; exporter {D.EXPORTER_INTERVAL:g}, "
                                        f"as a Prometheus scrape_interval is typically 15 s or more and each "
                                        f"reading also scrapes every --engine.")]
# --- input files ------------------------------------------------------------------------------------
MaxFileSizeOpt = Annotated[str, Opt(help="Largest input file read, streamed line by line (live --replay, simulate "
                                         "--trace): a size such as 256MiB, 1GB.")]
BudgetModeOpt = Annotated[Optional[str], Opt(help="vllm (from each GPU's total), explicit, or engine. Default: "
                                                  "explicit when --budget is given, else vllm.")]
MIN_INTERVAL = D.MIN_INTERVAL


def check_interval(seconds: float) -> float:
    if not seconds >= MIN_INTERVAL:
        raise InputError("--interval", seconds, f"at least {MIN_INTERVAL} seconds")
    return seconds


def parse_max_file_size(text: str) -> int:
    """``--max-file-size``: a size in bytes, at least one byte (live --replay and simulate --trace)."""
    from kvdash.units import parse_size

    return parse_size(text, "--max-file-size")


def given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was on the command line (a default cannot tell by its value)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def refuse_unread(ctx: typer.Context, names: tuple[str, ...], why: str) -> None:
    """One line for the first of ``names`` (parameter names, in that order) given on the command line that this
    run does not read: ``--seed 8`` beside ``--replay`` was dropped silently.  Its default typed out is harmless (it
    would change nothing); a flag is shown as typed (not ``--clip: True``), a path as text (not ``PosixPath(...)``)."""
    params = {p.name: p for p in ctx.command.params}
    for name in names:
        value = ctx.params.get(name)
        default = params[name].default
        same = value == default
        if name == "max_file_size" and not same:  # a size however written: "256 MiB" and 268435456 are the default
            same = parse_max_file_size(str(value)) == parse_max_file_size(str(default))
        if given(ctx, name) and not same:
            option = max(params[name].opts, key=len)
            raise InputError(option, option if value is True else str(value) if isinstance(value, Path) else value, why)


def refuse_model_beside_config(ctx: typer.Context) -> None:
    """``--model`` beside ``--config``: the config.json is read (calc, simulate, calibrate; live and exporter keep
    the name, which they compare with the engine's served model)."""
    refuse_unread(ctx, ("model",), "give --model or --config, not both (the config.json is read)")


def check_engine_timeout(seconds: float) -> float:
    if not 0.1 <= seconds <= 60:
        raise InputError("--engine-timeout", seconds, "expected 0.1 to 60 seconds")
    return seconds


def check_demo_gpus(gpus: int) -> int:
    if not 1 <= gpus <= 64:
        raise InputError("--gpus", gpus, "expected 1 to 64 demo GPUs")
    return gpus


def parse_budget(text: str | None) -> int | None:
    """``--budget``: a size; a bare number under 1 MiB is refused (bytes cannot be meant)."""
    from kvdash.units import MiB, parse_size

    if text is None:
        return None
    value = parse_size(text, "--budget")
    if text.strip().replace(",", "").replace("_", "").isdigit() and value < MiB:
        raise InputError("--budget", text, f"a bare number is bytes, and under 1 MiB it cannot be meant; {UNIT_HINT}")
    return value


def block_size_of(value: int | str, arch: object, kv_dtype: str = D.KV_DTYPE, gpu: str | None = None) -> int:
    """A parsed ``--block-size`` as the number of tokens: 'auto' (the default) is vLLM 0.33's choice for the
    model, its KV dtype and the GPU preset's generation (Hopper without one), as ``vllm serve`` picks it: 64 for
    DeepSeek-V3 with an fp8 KV cache, where a fixed 16 would plan blocks vLLM never uses."""
    if value == "auto":
        from kvdash.core.gpus import gpu_presets
        from kvdash.engines.vllm import auto_block_size

        preset = gpu_presets().get(gpu) if gpu else None
        return auto_block_size(arch, kv_dtype, preset.compute_capability if preset else "")[0]  # type: ignore[arg-type]
    return int(value)


def parse_lengths(text: str | None, field: str = "--group") -> tuple[int, ...] | None:
    """``"200,825,1525"`` -> ``(200, 825, 1525)``."""
    if text is None:
        return None
    parts = [p.strip().replace("_", "") for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError(field, text, "expected comma-separated positive token counts, e.g. 200,825,1525")
    out = []
    for p in parts:
        if not (p.isascii() and p.isdigit()) or len(p) > 18 or int(p) <= 0:  # 18 digits: no 4,300-digit int()
            raise InputError(field, text, "expected comma-separated positive token counts, e.g. 200,825,1525")
        out.append(int(p))
    return tuple(out)


def note(message: str) -> None:
    """One line on stderr; the command goes on."""
    import sys

    print(f"kvdash: note: {message}", file=sys.stderr)


def parse_length(text: str | None) -> int | None:
    """``--length``: a whole number of tokens (its range is checked where the model is known)."""
    if text is None:
        return None
    import re

    value = text.strip().replace("_", "")
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", value):  # 18 digits: no 4,300-digit int()
        raise InputError("--length", text, "expected a whole number of tokens (requests of several lengths: --group)")
    return int(value)


def length_or_group(length: str | None, group: str | None) -> tuple[int | None, str | None]:
    """``--length`` and ``--group`` as (one length, the group's text).  ``--length 200,825,1525``, live's list
    before issue 15, is read as ``--group 200,825,1525`` for one release, with a note."""
    if length is not None and "," in length:
        if group is not None:
            raise InputError("--length", length, "several lengths are a --group; give them only as --group")
        note(f"--length {length.strip()}: several lengths are a group (the list form of --length is kept for one "
             f"release); write --group {length.strip()}")
        return None, length
    return parse_length(length), group


def parse_on_off(text: str, field: str) -> bool:
    value = text.strip().lower()
    if value not in ("on", "off"):
        raise InputError(field, text, "expected 'on' or 'off'")
    return value == "on"


def pick_alias(value: object, old_value: object, name: str, old_name: str) -> object:
    """The value of an option that also answers to a hidden old name (kept for one release): the old
    name's value when only it is given, with a note on stderr saying what to write (printed after the command
    has run: :data:`PENDING_NOTES`); both given with different values is an error."""
    if old_value is None:
        return value
    if value is not None and value != old_value:
        raise InputError(old_name, old_value, f"is the old name of {name}; give only {name}")
    PENDING_NOTES.append(f"{old_name} is the old name of {name} (kept for one release); write {name} {old_value}")
    return old_value


# notes kvdash.cli prints once the command has run (dropped where it refuses its input, whose one line stays one)
PENDING_NOTES: list[str] = []


def flush_notes(show: bool = True) -> None:
    """Print the pending notes (``show``), and forget them."""
    for message in PENDING_NOTES if show else ():
        note(message)
    PENDING_NOTES.clear()


@contextmanager
def working(message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while a long computation runs (an SLO search: gpt-oss-120b's takes
    ~45 s), only where stderr is a terminal: piped output and scripts see nothing of it."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message, spinner="dots"):
        yield


def warn(message: str) -> None:
    """One line on stderr; the command goes on."""
    print(f"kvdash: warning: {message}", file=sys.stderr)


def check_budget_options(budget: str | None, gpu: str | None, gpu_memory: str | None, gpu_util: str | None,
                         util_policy: str, weights: str | None, reserve: str,
                         reserve_given: bool = True) -> list[str]:
    """Validate every budget option, even one the mode ignores; return one warning line about those it ignores
    (printed once the whole command line is known to be valid)."""
    from kvdash.units import parse_fraction, parse_size

    parse_budget(budget)
    if budget is not None and (gpu is not None or gpu_memory is not None):  # as typed (the budget code has bytes)
        from kvdash.answer.budget import BOTH_BUDGETS

        raise InputError("--budget", budget, BOTH_BUDGETS)
    if gpu_util is not None:
        parse_fraction(gpu_util, "--gpu-util")
    if util_policy not in ("vllm", "trtllm"):
        raise InputError("--util-policy", util_policy, "expected 'vllm' or 'trtllm'")
    if weights is not None:
        parse_size(weights, "--weights", allow_zero=True)
    if reserve.strip().lower() != "auto":  # a named value (branch i16's 'auto') is the budget code's to check
        parse_size(reserve, "--reserve", allow_zero=True)
    if gpu is None and gpu_memory is None:
        unused = [name for name, given in (("--gpu-util", gpu_util is not None),
                                           ("--util-policy", util_policy != "vllm"),
                                           ("--weights", weights is not None),
                                           ("--reserve", reserve_given and reserve.strip().lower()
                                            not in ("0", "", "auto"))) if given]
        if unused:
            return [f"{', '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect without --gpu or "
                 "--gpu-memory (the KV budget is " + ("--budget" if budget is not None else "the 12 GiB default")
                 + ")"]
    return []


def end_signalled(app) -> None:  # type: ignore[no-untyped-def]
    """After the dashboard ended on SIGTERM or SIGHUP (the terminal already restored): one line, exit 128 + N; after
    one textual ended on an error (return_code 1), that code, not 0."""
    if app.signalled:
        from kvdash.errors import Terminated, interrupted_text

        print(f"kvdash: error: {interrupted_text(Terminated(app.signalled))}", file=sys.stderr)
        raise typer.Exit(128 + app.signalled)
    if app.return_code:  # textual ended the app on an error it printed: not a success
        raise typer.Exit(app.return_code)


class Prose:
    """rich's ``Console.print`` for prose (markup, wrapping at the terminal's width) without the spaces rich leaves
    at the end of each wrapped line (`simulate` at 80 columns ended 22 of its lines in one)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console()

    def print(self, *objects: object, **kwargs: object) -> None:
        with self.console.capture() as captured:
            self.console.print(*objects, **kwargs)  # type: ignore[arg-type]
        # a colour terminal's line ends in its reset codes, after the space
        sys.stdout.write("\n".join(_TRAILING.sub(r"\1", line) for line in captured.get().split("\n")))


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")  # spaces before a line's closing escape codes
