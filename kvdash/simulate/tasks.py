"""Simulations a grid runs, as plain functions of plain arguments: each can run in this process, in a worker
process (``kvdash sweep --jobs N``) or on a Ray worker (``--ray``), and gives the same answer wherever it runs
(every random draw comes from the task's own seed)."""

from __future__ import annotations

from typing import Any


def step_point(task: dict[str, Any]) -> Any:
    """One step-unit simulation (:func:`kvdash.simulate.engine.simulate`); None when the pool cannot hold a
    request under the policy."""
    from kvdash.errors import InputError
    from kvdash.simulate.engine import simulate

    try:
        return simulate(task["workload"], task["policy"], task["slots"], task["block_size"], task["max_len"],
                        task["allocator"], task["seed"], watermark=task["watermark"])
    except InputError as exc:
        if exc.field not in ("--budget", "--block-size"):
            raise
        return None


def step_capacity(task: dict[str, Any]) -> Any:
    """One step-unit capacity sweep (:func:`kvdash.simulate.capacity.capacity_sweep`); None as above."""
    from kvdash.errors import InputError
    from kvdash.simulate.capacity import capacity_sweep

    try:
        return capacity_sweep(task["workload"], task["policies"], task["slots"], task["block_size"], task["max_len"],
                              task["rates"], task["bound"], task["allocator"], task["seed"], task["watermark"])
    except InputError as exc:
        if exc.field not in ("--budget", "--block-size"):
            raise
        return None


def time_point(task: dict[str, Any]) -> dict[str, Any]:
    """A grid point in seconds: the SLO search (paged), the run at ``users`` closed-loop users (paged), and each
    policy's normalized latency over ``rates`` with its highest rate within ``bound``.  Returns the values by
    result-column suffix; a policy whose reservation the pool cannot hold gives None."""
    from kvdash.errors import InputError
    from kvdash.simulate import slo

    setup, prompt, output, seed = task["setup"], task["prompt"], task["output"], task["seed"]
    out: dict[str, Any] = {}
    if task.get("slo"):
        s = slo.slo_search(setup, prompt, output, task["slo"], seed)
        out |= {"slo_users": s["max_concurrency"], "slo_rate": s["max_rate_per_s"], "binds": s["binds"],
                "slo_rate_met_up_to": s["rate_met_up_to"]}
    if task.get("users"):
        r = slo.run_point(setup, prompt, output, concurrency=task["users"], seed=seed)
        # no second output token anywhere: no TPOT (null, as the JSON says it; a gate on it fails, not passes at 0)
        out |= {"ttft_p90_ms": r.ttft_ms["p90"], "tpot_p90_ms": r.tpot_ms["p90"] if r.has_tpot else None,
                "e2e_p90_ms": r.e2e_ms["p90"], "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": r.tokens_per_s_per_user if r.has_tpot else None,
                "preemptions": r.preemptions}
    if task.get("rates"):
        for pol in task["policies"]:
            curve: list[float | None]
            try:
                got, top = slo.rate_curve(setup, prompt, output, task["rates"], task["bound"], seed, pol,
                                          task.get("refine", 0))
                curve = list(got)
            except InputError as exc:
                if exc.field not in ("--budget", "--block-size"):
                    raise
                curve, top = [None] * len(task["rates"]), None
            out[f"{pol}_curve"] = curve
            out[f"{pol}_rate"] = top
            # within the bound at every swept rate: the limit is above the highest (a floor a min: gate reads)
            within = bool(curve) and all(x is not None and x <= task["bound"] for x in curve)
            out[f"{pol}_rate_met_up_to"] = task["rates"][-1] if top is None and within else None
    return out
