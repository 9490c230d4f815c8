"""The simulator's workloads: length distributions, the workload presets, ``prompt,output`` traces, and the
requests every policy runs (prompt and final lengths, arrival steps), drawn from the seed alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvdash import safeio
from kvdash.errors import InputError

LENGTH_CAP = 2**40  # lengths drawn are cut here before any check (no int64 overflow)
MAX_REDRAWN = 0.05  # a lognormal whose draws exceed the maximum length more often than this is refused


@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``fixed`` (a), ``uniform`` (a..b), ``lognormal`` (mean a, spread b: the
    sigma of the log), or ``trace`` (values taken in order from a file, cycled)."""

    kind: str
    a: float = 0
    b: float = 0
    values: tuple[int, ...] = ()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths, each from 1 to ``LENGTH_CAP`` (far above any maximum length, so a length too
        long is refused or clipped later, never overflows)."""
        cap = LENGTH_CAP
        if self.kind == "fixed":
            out = np.full(n, int(min(self.a, cap)))
        elif self.kind == "uniform":
            out = rng.integers(int(min(self.a, cap)), int(min(self.b, cap)) + 1, size=n)
        elif self.kind == "lognormal":
            mu = math.log(self.a) - self.b**2 / 2  # so that the mean is a
            out = np.minimum(np.rint(rng.lognormal(mu, self.b, size=n)), cap).astype(np.int64)
        elif self.kind == "trace":
            out = np.resize(np.asarray([min(v, cap) for v in self.values], dtype=np.int64), n)
        else:  # pragma: no cover - validated on construction
            raise ValueError(self.kind)
        return np.maximum(out, 1).astype(np.int64)


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: Lengths
    output: Lengths
    requests: int = 1000
    arrival: str = "poisson"  # or "closed"
    rate: float = 1.0  # requests per step (poisson)
    concurrency: int = 32  # requests kept in the system (closed loop)
    prefix: int = 0  # tokens of a prompt prefix every request shares
    synthetic: bool = True
    note: str = ""
    clip: bool = False  # cut requests longer than the maximum length instead of refusing them


PRESETS = {
    "sharegpt": Workload("sharegpt", Lengths("lognormal", 161.31, 1.0), Lengths("lognormal", 337.99, 1.0),
                         note="synthetic, shaped after the PagedAttention paper's ShareGPT means (161 in, 338 out)"),
    "alpaca": Workload("alpaca", Lengths("lognormal", 19.31, 0.6), Lengths("lognormal", 58.45, 0.8),
                       note="synthetic, shaped after the PagedAttention paper's Alpaca means (19 in, 58 out)"),
}


def _shown(line: str) -> str:
    """A refused trace line as the file has it, at most 40 characters."""
    text = line.strip()
    return text if len(text) <= 40 else text[:37] + "..."


def trace_name(name: str, rows: int, requests: int | None) -> str:
    """A trace workload's name: the file's, and how its rows were repeated where fewer than the requests run (the
    values are taken in order, cycled: a 3-row trace ran as 2,000 requests under its name alone)."""
    if requests is None or rows >= requests:
        return f"trace {name}"
    return f"trace {name} ({rows:,} rows, repeated in order to {requests:,} requests)"


_OUTPUT_WORDS = ("output", "completion", "response", "generated", "decode")
_PROMPT_WORDS = ("prompt", "input", "context", "prefill")


def _check_header(path: str, line: str, parts: list[str]) -> None:
    """A header is read past, the columns being taken by position (prompt, then output); one that names them the
    other way round is refused, not read with the two swapped (a helper's trial: `output,prompt` ran silently)."""
    first, second = (p.lower() for p in (parts + ["", ""])[:2])

    def names(text: str, words: tuple[str, ...], other: tuple[str, ...]) -> bool:  # one kind, not both
        return any(w in text for w in words) and not any(w in text for w in other)

    if names(first, _OUTPUT_WORDS, _PROMPT_WORDS) or names(second, _PROMPT_WORDS, _OUTPUT_WORDS):
        raise InputError("--trace", f"{path}:1: {_shown(line)}",
                         "the columns are read by position, the prompt length first, then the output length: put "
                         "them in that order")


def read_trace(path: str, limit: int | None = None,
               max_bytes: int = safeio.STREAM_CAP) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A CSV of ``prompt,output`` lengths (a header line is allowed), streamed by :mod:`kvdash.safeio`
    (a regular file, at most ``max_bytes``); reading stops after ``limit`` requests (the simulation
    takes the values in order, so later lines would not be used)."""
    prompts: list[int] = []
    outputs: list[int] = []
    for number, line in safeio.iter_lines(path, "--trace", max_bytes, "--max-file-size"):
        if limit is not None and len(prompts) >= limit:
            break
        parts = [p.strip() for p in line.split(",")]
        if not line.strip():
            continue
        if len(parts) < 2 or not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts[:2]):
            if number == 1 and not any(p.isdigit() for p in parts):
                _check_header(path, line, parts)
                continue  # header
            raise InputError("--trace", f"{path}:{number}: {_shown(line)}", "each line must start 'prompt,output', two "
                                                                   "positive integers (further fields are ignored)")
        p, o = int(parts[0]), int(parts[1])
        if p <= 0 or o <= 0:
            raise InputError("--trace", f"{path}:{number}: {_shown(line)}", "lengths must be positive")
        prompts.append(p)
        outputs.append(o)
    if not prompts:
        raise InputError("--trace", path, "the trace holds no request")
    return tuple(prompts), tuple(outputs)


@dataclass(frozen=True)
class Requests:
    """The requests every policy runs: prompt and final lengths, arrival steps (closed loop: 0)."""

    prompt: np.ndarray
    final: np.ndarray
    arrival: np.ndarray
    redrawn: int = 0  # lognormal draws longer than the maximum length, drawn again
    clipped: int = 0  # requests cut to the maximum length (``clip``)

    @property
    def output(self) -> np.ndarray:
        return self.final - self.prompt


def draw_requests(workload: Workload, seed: int, max_len: int) -> Requests:
    """Prompt lengths, final lengths and arrival steps of every request, from the seed alone (never
    from the policy).  A prompt shorter than the shared prefix is raised to it; the output is kept.
    Requests longer than ``max_len`` (prompt + output) are cut when the workload says ``clip``;
    otherwise lognormal draws are drawn again (a distribution truncated at ``max_len``, refused when
    more than 5 % of the draws are too long) and fixed, uniform or trace lengths are refused."""
    rng = np.random.default_rng(seed)
    n = workload.requests
    prompt = workload.prompt.draw(rng, n)
    output = workload.output.draw(rng, n)
    if workload.prefix:
        prompt = np.maximum(prompt, workload.prefix)  # every prompt starts with the shared prefix
    over = prompt + output > max_len
    count = int(over.sum())
    redrawn = clipped = 0
    if count and workload.clip:
        clipped = count
        final = np.minimum(prompt + output, max_len)
        prompt = np.minimum(prompt, final - 1)
        output = final - prompt
    elif count:
        lognormal = "lognormal" in (workload.prompt.kind, workload.output.kind)
        if not lognormal or count > MAX_REDRAWN * n:
            field_ = "--trace" if workload.prompt.kind == "trace" else "--prompt/--output"
            raise InputError(field_, f"{count:,} of {n:,} requests longer than --max-reserved={max_len:,}",
                             "every prompt + output must fit the maximum length: raise --max-reserved (up to the "
                             "model's context), or pass --clip to cut them"
                             + ("" if not lognormal else " (lognormal lengths are drawn again when at most 5 % "
                                "of the draws are too long)"))
        redrawn = count
        for _ in range(1000):
            idx = np.nonzero(over)[0]
            if not len(idx):
                break
            p = workload.prompt.draw(rng, len(idx))
            if workload.prefix:
                p = np.maximum(p, workload.prefix)
            prompt[idx] = p
            output[idx] = workload.output.draw(rng, len(idx))
            over = prompt + output > max_len
        if over.any():  # every one of the 1000 draws checked (a fit at the last one is kept); issue 17
            raise InputError("--max-reserved", max_len, "the lengths drawn do not fit")
    if workload.arrival == "poisson":
        arrivals = _arrival_steps(rng.exponential(1 / workload.rate, size=n), workload.rate)  # issue 17
    else:
        arrivals = np.zeros(n, dtype=np.int64)
    return Requests(prompt.astype(np.int64), (prompt + output).astype(np.int64), arrivals, redrawn, clipped)


ARRIVAL_CAP = 2**53  # arrival steps stay exact integers (and far below the event loop's 2^62 "never")


def _arrival_steps(gaps: np.ndarray, rate: float) -> np.ndarray:
    """Poisson arrival steps: the floor of the running sum of the exponential gaps.  A rate so small that
    the last arrival lies at step 2^53 or later is refused (it used to overflow int64 silently: every
    request arrived at step -2^63, issue 17)."""
    times = np.floor(np.cumsum(gaps))
    if not times[-1] < ARRIVAL_CAP:
        raise InputError("--rate", rate, f"{len(gaps):,} requests at this rate arrive past step 2^53; "
                         "expected a larger rate (requests per step)")
    return times.astype(np.int64)
