"""A grid's ``simulate: time:`` block: every point in seconds (issue 28).

The simulator in seconds (:mod:`kvdash.simulate.timed`, vLLM 0.33's scheduler under the fitted step-time
model of :mod:`kvdash.core.steptime`) runs on each point's own pool (its budget per rank, blocks and block
rule), ``max_num_seqs`` and ``max_num_batched_tokens``, and yields result columns gates and objectives can use:

* ``slo:`` (``ttft=2s,tpot=50ms``, at p90): ``time_slo_users`` and ``time_slo_rate``, the highest closed-loop
  concurrency and Poisson request rate that meet it, and ``time_binds``, the limit that binds just above
  (``kv``, ``max_num_seqs``, ``compute``; ``none`` when every user simulated met it);
* ``users:`` N: p90 TTFT/TPOT/E2E and tokens/s per GPU and per user at N closed-loop users (e.g. a gate
  ``time_tpot_p90_ms`` ``max: 50`` for "256 users at TPOT <= 50 ms");
* ``rates:`` (requests per second, ``A:B:N``) and ``latency_bound:`` (s per output token): each of
  ``policies`` (paged, and Orca's contiguous max, pow2, oracle through
  :mod:`kvdash.simulate.timed_contiguous`) at every rate, its normalized latency (the PagedAttention paper's
  Figure 12 metric), the highest rate within the bound, and paged's rate over each contiguous one's.

Requests are drawn from the ``simulate:`` workload, or per grid workload from ``workloads:`` (a preset name
or ``{prompt: SPEC, output: SPEC}``, each with its own ``rates:`` and ``requests:`` if given); a grid workload
not listed there is not simulated in time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_TIME_REQUESTS = 20_000  # a time block's requests per grid point (its workloads' own requests: too)
TIME_KEYS = ("gpu", "weight_format", "policies", "slo", "users", "rates", "latency_bound", "workloads", "requests",
             "max_num_seqs", "max_batched_tokens", "refine")
WORKLOAD_KEYS = ("preset", "prompt", "output", "rates", "requests")
TIME_POLICIES = ("paged", "max", "pow2", "oracle")
# why a point has no time figures (the ``time_not_timed`` column; the report counts each)
NOT_TIMED = {
    "workload": "its grid workload is not listed under simulate.time.workloads",
    "config": "no config.json to count the model's parameters (a model given by its dimensions)",
    "gpu": "no GPU: a declared budget, and simulate.time has no gpu:",
    "gpu_figures": "the time model has no bandwidth and FLOP/s figures for this GPU",
    "pp": "pipeline parallel (not modelled in time)",
    "budget": "no memory left for the KV cache",
    "pool": "the KV pool cannot hold the longest request",
}
LABEL = ("kvdash's time model (steptime fitted on measured vLLM rows; its measured error is in the README: "
         "Time model accuracy)")


@dataclass
class TimeSpec:
    gpu: str | None  # the GPU figures for points whose budget is declared (no gpu of their own)
    weight_format: str
    policies: tuple[str, ...]
    slo: dict[str, float] | None
    slo_text: str
    users: int | None
    rates: list[float] | None
    latency_bound: float
    workloads: dict[str, Any] | None  # grid workload -> kvdash.simulate.engine.Workload (None: the simulate one)
    requests: int
    max_num_seqs: int | None
    max_batched_tokens: int | None
    workload_rates: dict[str, list[float]] | None = None  # a grid workload's own rates (else ``rates``)
    workload_requests: dict[str, int] | None = None  # a grid workload's own request count (else ``requests``)
    refine: int = 6  # bisection steps narrowing each policy's rate at the bound

    def rates_of(self, workload: str) -> list[float] | None:
        return (self.workload_rates or {}).get(workload, self.rates)

    def requests_by_workload(self) -> dict[str, int]:
        """Requests each time workload simulates (``""``: the simulate workload, when none is listed)."""
        if not self.workloads:
            return {"": self.requests}
        return {name: (self.workload_requests or {}).get(name, self.requests) for name in self.workloads}

    def most_requests(self) -> int:
        """The most requests any time workload simulates (the SLO search's users stop there)."""
        return max(self.requests_by_workload().values())

    def most_rates(self) -> int:
        return max([len(self.rates or [])] + [len(r) for r in (self.workload_rates or {}).values()])


def parse_time(c: Any, raw: Any, p: tuple[Any, ...], base: Any, grid_workloads: list[str]) -> TimeSpec:
    """Read ``simulate: time:`` (``c``: the grid's checker; ``base``: the simulate workload)."""
    from dataclasses import replace

    from kvdash.core.steptime import WEIGHT_BYTES
    from kvdash.errors import InputError, keys_shown
    from kvdash.simulate.lengths import parse_lengths_spec
    from kvdash.simulate.slo import parse_rates_per_s, parse_slo
    from kvdash.simulate.workload import PRESETS

    sec = c.mapping(raw if raw is not True else {}, p, TIME_KEYS)
    gpu = sec.get("gpu")
    if gpu is not None:
        from kvdash.core.steptime import gpu_perf

        try:
            gpu_perf(str(gpu))
        except InputError as exc:
            raise c.fail(p + ("gpu",), gpu, exc.allowed) from exc
    wf = str(sec.get("weight_format", "auto"))
    if wf != "auto" and wf not in WEIGHT_BYTES:
        raise c.fail(p + ("weight_format",), wf, "expected one of: auto, " + ", ".join(WEIGHT_BYTES))
    given = c.seq(sec.get("policies", ["paged"]), p + ("policies",), allow_scalar=True)
    policies = tuple(str(x) for x in given)
    for i, pol in enumerate(policies):
        if pol not in TIME_POLICIES:  # the value as the file writes it (yes, not 'True')
            raise c.fail(p + ("policies", i), given[i], "expected some of: " + ", ".join(TIME_POLICIES))
        if pol in policies[:i]:  # each policy's columns once (a second paged wrote time_paged_* twice)
            raise c.fail(p + ("policies", i), pol, "each policy once; expected some of: " + ", ".join(TIME_POLICIES))
    slo = None
    if "slo" in sec:
        if not isinstance(sec["slo"], str):  # a list or mapping was read as its Python text ("['ttft")
            raise c.fail(p + ("slo",), sec["slo"], "expected one string of KEY=TIME pairs, like ttft=2s,tpot=50ms")
        try:
            slo = parse_slo(str(sec["slo"]), "slo")
        except InputError as exc:
            raise c.fail(p + ("slo",), sec["slo"], exc.allowed) from exc
    users = c.positive_int(sec["users"], p + ("users",)) if "users" in sec else None
    rates = None
    if "rates" in sec:
        try:
            rates = parse_rates_per_s(str(sec["rates"]), "rates")
        except InputError as exc:
            raise c.fail(p + ("rates",), sec["rates"], exc.allowed) from exc
    bound = sec.get("latency_bound", 0.5)
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound) or bound <= 0:
        raise c.fail(p + ("latency_bound",), bound, "expected seconds per output token, more than 0")
    workloads = None
    workload_rates: dict[str, list[float]] = {}
    workload_requests: dict[str, int] = {}
    if "workloads" in sec:
        workloads = {}
        if not sec["workloads"]:  # every point was left "not timed"
            raise c.fail(p + ("workloads",), sec["workloads"], "expected at least one workload of the grid (or "
                                                               "leave workloads out: the simulate: block's own)")
        shape = ("expected a preset (" + ", ".join(PRESETS) + ") or {preset: NAME} or {prompt: SPEC, output: SPEC}, "
                 "each with an optional rates: A:B:N")
        for name, spec in c.mapping(sec["workloads"], p + ("workloads",)).items():
            q = p + ("workloads", name)
            if str(name) not in grid_workloads:
                raise c.fail(q, name, "expected a workload of the grid: " + ", ".join(grid_workloads), key=True)
            m = {"preset": spec} if isinstance(spec, str) else c.mapping(spec, q, WORKLOAD_KEYS)
            if ("preset" in m) == ("prompt" in m or "output" in m):  # both, or neither: say which keys were given
                raise c.fail(q, keys_shown(m),
                             ("preset and prompt/output together: give one; " if "preset" in m else "") + shape)
            if "preset" in m:
                if str(m["preset"]) not in PRESETS:
                    raise c.fail(q + (() if isinstance(spec, str) else ("preset",)), m["preset"], shape)
                pre = PRESETS[str(m["preset"])]
                w = replace(base, name=pre.name, prompt=pre.prompt, output=pre.output, note=pre.note)
            else:
                w = base
                for key in ("prompt", "output"):
                    if key not in m:
                        raise c.fail(q, keys_shown(m), f"{key} missing: " + shape)
                    try:
                        w = replace(w, **{key: parse_lengths_spec(str(m[key]), key)}, name=str(name),
                                    note="custom lengths")
                    except InputError as exc:
                        raise c.fail(q + (key,), m[key], exc.allowed) from exc
            if "rates" in m:
                try:
                    workload_rates[str(name)] = parse_rates_per_s(str(m["rates"]), "rates")
                except InputError as exc:
                    raise c.fail(q + ("rates",), m["rates"], exc.allowed) from exc
            if "requests" in m:
                workload_requests[str(name)] = c.positive_int(m["requests"], q + ("requests",),
                                                              high=MAX_TIME_REQUESTS)
            workloads[str(name)] = w
    refine = sec.get("refine", 6)
    if isinstance(refine, bool) or not isinstance(refine, int) or not 0 <= refine <= 20:
        raise c.fail(p + ("refine",), refine, "expected 0 to 20 bisection steps")
    requests = c.positive_int(sec.get("requests", min(base.requests, 500)), p + ("requests",),
                              high=MAX_TIME_REQUESTS)
    if not rates and not workload_rates:  # refine / latency_bound narrow and bound a rates: sweep, which is absent
        if policies != ("paged",) and "policies" in sec:  # slo: and users: run paged (vLLM's scheduler) only
            raise c.fail(p + ("policies",), ",".join(policies), "Orca's policies run in a rates: sweep only (slo: "
                         "and users: time paged, vLLM's scheduler); add rates:, or leave policies: out")
        for key in ("refine", "latency_bound"):
            if key in sec:
                raise c.fail(p + (key,), sec[key], "applies to a rates: sweep (simulate.time.rates, or a time "
                             "workload's rates:), which this grid does not have", key=True)
    caps = {}
    for key in ("max_num_seqs", "max_batched_tokens"):
        caps[key] = c.positive_int(sec[key], p + (key,)) if key in sec else None
    ts = TimeSpec(gpu=None if gpu is None else str(gpu), weight_format=wf, policies=policies, slo=slo,
                  slo_text=str(sec.get("slo", "")), users=users, rates=rates, latency_bound=float(bound),
                  workloads=workloads, requests=requests, **caps, workload_rates=workload_rates or None,
                  workload_requests=workload_requests or None, refine=refine)
    if users is not None:
        name, least = min(ts.requests_by_workload().items(), key=lambda kv: kv[1])
        if users > least:
            where = (f"simulate.time.workloads.{name}.requests" if name in workload_requests else
                     "simulate.time.requests" + ("" if "requests" in sec else " (default: simulate's requests, at "
                                                 "most 500)"))
            raise c.fail(p + ("users",), users, f"at most the requests simulated ({least:,}"
                         + (f" for workload {name}" if name else "") + f"): a closed loop of {users:,} users over "
                         f"{least:,} requests never runs more than {least:,} at once; raise {where}")
    if slo is None and users is None and not ts.most_rates():
        raise c.fail(p, keys_shown(sec), "expected at least one of slo, users or rates")
    return ts


def time_columns(ts: TimeSpec) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns a ``time:`` block adds, in order."""
    out = [("time_gpu", "str", "time model: the GPU whose bandwidth and FLOP/s figures timed the point"),
           ("time_kv_requests", "int", "time model: mean-length requests of the point's time workload the pool holds"),
           ("time_not_timed", "str", "time model: why the point has no time figures (empty: timed)")]
    if ts.slo:
        out += [("time_slo_users", "int", f"time model: most closed-loop users meeting {ts.slo_text} at p90 (paged)"),
                ("time_slo_rate", "float", f"time model: highest Poisson requests/s meeting {ts.slo_text} at p90 "
                                           "(empty: see time_slo_rate_met_up_to)"),
                ("time_slo_rate_met_up_to", "float", "time model: where every Poisson rate tried met the SLO (the "
                                                     "requests end before a queue builds), the highest rate tried: "
                                                     "no limit found below it"),
                ("time_binds", "str", "time model: the limit binding just above time_slo_users: kv, max_num_seqs, "
                                      "compute (none: every user simulated met the SLO)")]
    if ts.users:
        u = f"at {ts.users:,} closed-loop users (paged)"
        out += [("time_ttft_p90_ms", "float", f"time model: p90 time to first token {u}, ms"),
                ("time_tpot_p90_ms", "float", f"time model: p90 time per output token {u}, ms"),
                ("time_e2e_p90_ms", "float", f"time model: p90 end-to-end latency {u}, ms"),
                ("time_tokens_per_s_per_gpu", "float", f"time model: output tokens/s per GPU {u}"),
                ("time_tokens_per_s_per_user", "float", f"time model: output tokens/s per user (mean of 1 / TPOT) {u}"),
                ("time_preemptions", "int", f"time model: preemptions {u}")]
    if ts.most_rates():
        per = bool(ts.workload_rates)
        if per:
            out.append(("time_rates", "str", "time model: the Poisson rates swept at this point, requests/s"))
        for pol in ts.policies:
            for k in range(ts.most_rates()):
                at = f"the point's rate {k + 1} (time_rates)" if per else f"{(ts.rates or [])[k]:.4g} requests/s"
                out.append((f"time_{pol}_nlat_r{k}", "float",
                            f"time model: {pol}, normalized latency at {at}, s per output token"))
            out.append((f"time_{pol}_rate", "float", f"time model: {pol}, highest requests/s within "
                                                      f"{ts.latency_bound:g} s per output token, narrowed by "
                                                      "bisection (below the lowest swept rate where that one is "
                                                      "over it; empty: within it at every swept rate, see "
                                                      f"time_{pol}_rate_met_up_to, or over it even after narrowing)"))
            out.append((f"time_{pol}_rate_met_up_to", "float",
                        f"time model: {pol}, where it stays within {ts.latency_bound:g} s per output token at every "
                        "swept rate: the highest swept rate (its limit is above it; a min: gate on "
                        f"time_{pol}_rate is judged on this floor)"))
        if "paged" in ts.policies:
            for pol in ts.policies:
                if pol != "paged":
                    out.append((f"time_paged_over_{pol}", "float",
                                f"time model: paged's request rate over Orca ({pol})'s at {ts.latency_bound:g} s per "
                                "output token"))
                    out.append((f"time_paged_over_{pol}_at_least", "float",
                                f"time model: where paged stays within the bound at every swept rate, its floor over "
                                f"Orca ({pol})'s rate: time_paged_rate_met_up_to / time_{pol}_rate (a min: gate on "
                                f"time_paged_over_{pol} is judged on it)"))
    return out


def model_config_of(entry: Any, grid_dir: Any) -> dict[str, Any] | None:
    """The ``config.json`` a grid model was read from (a preset's shipped copy or the grid's ``config:``), for the
    time model's parameter counts; None for a model given by its dimensions only."""
    from pathlib import Path

    from kvdash.core.model import DATA, engine_config

    spec = entry.spec
    if "config" in spec:
        path = Path(grid_dir) / str(spec["config"])
    elif "preset" in spec and not set(spec) - {"preset", "weights", "max_context", "window"}:
        path = DATA / "models" / f"{str(spec['preset']).lower()}.json"
    else:
        return None
    if not path.is_file():
        return None
    return engine_config(path)


def add_time(spec: Any, frame: Any, jobs: int = 1, use_ray: bool = False) -> Any:
    """The ``time:`` columns of every point (one simulation task per distinct setup)."""
    import numpy as np
    import polars as pl

    from kvdash.core.steptime import fitted_constants, gpu_perf
    from kvdash.engines.vllm import rank_shapes, timed_compute
    from kvdash.errors import InputError
    from kvdash.simulate import tasks as T
    from kvdash.simulate.slo import no_tpot_to_judge
    from kvdash.simulate.timed import Pool
    from kvdash.simulate.workload import draw_requests
    from kvdash.sweep.parallel import run_tasks

    sim = spec.simulate
    ts: TimeSpec = sim.time
    consts = fitted_constants()
    cfgs: dict[str, dict[str, Any] | None] = {}
    drawn: dict[tuple[str, int], Any] = {}
    perfs: dict[str, Any] = {}
    tasks: dict[tuple[Any, ...], dict[str, Any]] = {}
    keys: list[tuple[Any, ...] | None] = []
    gpus: list[str | None] = []
    kv_req: list[int | None] = []
    why: list[str | None] = []
    wls: list[str] = []
    cols = ("model", "workload", "kv_dtype", "kv_scales", "tp", "pp", "block_size", "budget_bytes", "gpu",
            "kv_token_slots", "max_num_seqs", "max_batched_tokens", "max_model_len")

    def untimed(reason: str, gpu: str | None = None, kv: int | None = None) -> None:
        keys.append(None)
        gpus.append(gpu)
        kv_req.append(kv)
        why.append(reason)

    for r in frame.select([c for c in cols if c in frame.columns]).iter_rows(named=True):
        model, wl = str(r["model"]), str(r["workload"])
        wls.append(wl)
        gpu = r.get("gpu") or ts.gpu
        w = sim.workload if ts.workloads is None else ts.workloads.get(wl)
        if model not in cfgs:
            cfgs[model] = model_config_of(spec.models[model], spec.path.parent)
        cfg = cfgs[model]
        if w is None:
            untimed(NOT_TIMED["workload"])
            continue
        if cfg is None:
            untimed(NOT_TIMED["config"])
            continue
        if not gpu:
            untimed(NOT_TIMED["gpu"])
            continue
        if str(gpu) not in perfs:
            try:
                perfs[str(gpu)] = gpu_perf(str(gpu))
            except InputError:
                perfs[str(gpu)] = None
        if perfs[str(gpu)] is None:
            untimed(f"{gpu}: {NOT_TIMED['gpu_figures']}")
            continue
        if r["pp"] != 1:
            untimed(NOT_TIMED["pp"])
            continue
        if not r["budget_bytes"]:
            untimed(NOT_TIMED["budget"])
            continue
        arch = spec.models[model].arch
        # vLLM refuses a request longer than max_model_len (and Orca's Max reserves it): the point's own, which
        # is the grid workload's max_reserved where the grid does not set max_model_len
        max_len = min(int(r.get("max_model_len") or sim.max_len), arch.max_context)
        if (wl, max_len) not in drawn:
            from dataclasses import replace

            n_req = (ts.workload_requests or {}).get(wl, ts.requests)
            try:
                drawn[(wl, max_len)] = draw_requests(replace(w, requests=n_req, arrival="closed",
                                                             concurrency=1), sim.seed, max_len)
            except InputError as exc:  # fixed lengths longer than the point allows: the grid is inconsistent
                at = ("simulate", "time", "workloads", wl) if ts.workloads is not None else ("simulate", "workload")
                where = ".".join(at)
                clamped = max_len == arch.max_context and int(r.get("max_model_len") or 0) > max_len
                raise InputError(f"{spec.tree.at(at)}: {where}", f"{w.name} ({str(exc.value).split(' longer than')[0]} "
                                 f"longer than {max_len:,} tokens)",
                                 f"every prompt + output must fit the {max_len:,} tokens of the points of {model} x "
                                 f"{wl}: " + (f"{model}'s context ({max_len:,}), below their max_model_len; shorter "
                                              "lengths or simulate: clip: true" if clamped else
                                              "their max_model_len (the grid workload's max_reserved unless "
                                              "max_model_len is set); shorter lengths, a larger max_model_len, or "
                                              "simulate: clip: true")) from None
        reqs = drawn[(wl, max_len)]
        if ts.slo and no_tpot_to_judge(ts.slo, reqs.output):  # slo_search refuses it as --slo; here, the grid key
            raise InputError(f"{spec.tree.at(('simulate', 'time', 'slo'))}: simulate.time.slo", ts.slo_text,
                             f"TPOT needs outputs of at least 2 tokens; workload {wl}'s outputs are all 1 token: "
                             "judge ttft or e2e there")
        shape = rank_shapes(arch, str(r["kv_dtype"]), str(r["kv_scales"]), r["tp"], 1, r["block_size"])[0]
        pool = Pool.of(shape, int(r["budget_bytes"]))
        mean_len = max(int(round(float(reqs.final.mean()))), 1)
        kv = pool.blocks // max(int(pool.request_blocks(mean_len)), 1)
        if int(pool.request_blocks(int(reqs.final.max()))) > pool.blocks:
            untimed(NOT_TIMED["pool"], kv=kv)
            continue
        seqs = ts.max_num_seqs or int(r["max_num_seqs"])
        if ts.max_batched_tokens and ts.max_batched_tokens < seqs:  # as simulate --time and vLLM refuse it
            whose = "time.max_num_seqs" if ts.max_num_seqs else f"vLLM 0.33's default on {gpu}"
            raise InputError("simulate.time.max_batched_tokens", ts.max_batched_tokens,
                             f"at least max_num_seqs ({seqs:,}, {whose}), as vLLM requires")
        batched = max(ts.max_batched_tokens or int(r["max_batched_tokens"]), seqs)
        key = (model, wl, str(r["kv_dtype"]), str(r["kv_scales"]), r["tp"], r["block_size"], int(r["budget_bytes"]),
               str(gpu), seqs, batched, max_len)
        if key not in tasks:
            try:
                mc = timed_compute(cfg, arch, r["tp"], ts.weight_format, str(r["kv_dtype"]), str(r["kv_scales"]))
            except InputError as exc:
                untimed(f"{model}: {exc.allowed}", kv=kv)
                continue
            setup = {"pool": pool, "mc": mc, "gpu": perfs[str(gpu)], "consts": consts.on(str(gpu)),
                     "max_num_seqs": seqs, "max_batched": batched, "tp": r["tp"], "kv_requests": kv,
                     "slots": int(r["kv_token_slots"]), "max_len": max_len, "allocator": sim.allocator}
            tasks[key] = {"setup": setup, "prompt": np.asarray(reqs.prompt), "output": np.asarray(reqs.output),
                          "seed": sim.seed, "slo": ts.slo, "users": ts.users, "rates": ts.rates_of(wl),
                          "refine": ts.refine, "bound": ts.latency_bound, "policies": list(ts.policies)}
        keys.append(key)
        gpus.append(str(gpu))
        kv_req.append(kv)
        why.append(None)
    results = dict(zip(tasks, run_tasks(T.time_point, list(tasks.values()), jobs, use_ray), strict=True))
    columns = time_columns(ts)
    rows: dict[str, list[Any]] = {name: [] for name, _, _ in columns}
    for point_key, gpu_key, kv_n, wl, reason in zip(keys, gpus, kv_req, wls, why, strict=True):
        res = results.get(point_key) if point_key is not None else None
        rows["time_gpu"].append(gpu_key if res is not None else None)
        rows["time_kv_requests"].append(kv_n)
        rows["time_not_timed"].append(reason)
        for name, _, _ in columns[3:]:
            rows[name].append(None if res is None else _value(res, name[len("time_"):], ts, wl))
    dtypes = {"str": pl.Utf8, "int": pl.Int64, "float": pl.Float64}
    return frame.with_columns(pl.Series(name, rows[name], dtype=dtypes[kind]) for name, kind, _ in columns)


def _value(res: dict[str, Any], name: str, ts: TimeSpec, wl: str) -> Any:
    """A column's value from a :func:`kvdash.simulate.tasks.time_point` result (``name`` without ``time_``)."""
    if name in res:
        return res[name]
    if name == "rates":
        rates = ts.rates_of(wl)
        return None if rates is None else ",".join(f"{r:.4g}" for r in rates)
    if name.startswith("paged_over_") and name.endswith("_at_least"):
        a, b = res.get("paged_rate_met_up_to"), res.get(name[len("paged_over_"):-len("_at_least")] + "_rate")
        return None if a is None or not b or res.get("paged_rate") is not None else round(a / b, 6)
    if name.startswith("paged_over_"):
        a, b = res.get("paged_rate"), res.get(name[len("paged_over_"):] + "_rate")
        return None if a is None or not b else round(a / b, 6)
    pol, _, k = name.rpartition("_nlat_r")
    if pol and k.isdigit():
        curve = res.get(f"{pol}_curve")
        return None if curve is None or int(k) >= len(curve) else curve[int(k)]
    return None
