"""A grid's simulations on several cores (``kvdash sweep --jobs N``) or on a Ray cluster (``--ray``).

Every task is a function of its own arguments (:mod:`kvdash.simulate.tasks`; random draws from the task's
seed), and results come back in the order of the tasks, so a grid's results are identical however many
workers ran it.  Local workers are processes started with ``spawn`` (polars' threads and ``fork`` do not
mix); Ray is an optional extra (``pip install 'kvdash[ray]'``): ``ray.init()`` joins the cluster that
``RAY_ADDRESS`` names, else starts one on this machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from kvdash.errors import InputError

MIN_PARALLEL = 4  # fewer tasks run in this process: starting workers costs more than they save


def default_jobs() -> int:
    """The idle cores this process may use: its cores (``os.sched_getaffinity``) less the one-minute load average,
    at least 1.  On a busy machine workers only add their start-up (``benchmarks/sweep_jobs.py`` measured 2
    workers at 0.6-0.7x of one process on 2 cores at load 15)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, min(cores, int(cores - load + 0.5)))


def check_jobs(jobs: int | None) -> int:
    """``--jobs``: 0 or None -> :func:`default_jobs` (the idle cores); otherwise 1 to 256."""
    if jobs is None or jobs == 0:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 256:
        raise InputError("--jobs", jobs, "expected 0 (every core this process may use) or 1 to 256 workers")
    return jobs


def run_tasks(fn: Callable[[dict[str, Any]], Any], tasks: list[dict[str, Any]], jobs: int = 1,
              use_ray: bool = False) -> list[Any]:
    """``[fn(t) for t in tasks]``, in that order, on ``jobs`` local processes or on Ray."""
    if use_ray:
        return _run_ray(fn, tasks)
    if jobs <= 1 or len(tasks) < MIN_PARALLEL:
        return [fn(t) for t in tasks]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from kvdash.interrupts import checkpoint

    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=mp.get_context("spawn"))
    try:
        futures = [pool.submit(fn, t) for t in tasks]
        out = []
        for future in futures:
            while True:  # a SIGTERM (SIGHUP) noted while the workers run is raised here, not after the grid
                try:
                    out.append(future.result(timeout=0.2))
                    break
                except TimeoutError:
                    checkpoint()
    except BaseException:
        # an interrupt or a task's error: the workers are stopped, not waited for (a point's SLO search can take a
        # minute); spawned workers hold no part of the report
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return out


def _run_ray(fn: Callable[[dict[str, Any]], Any], tasks: list[dict[str, Any]]) -> list[Any]:
    try:
        import ray
    except ImportError as exc:
        raise InputError("--ray", "ray", "Ray is an optional extra: pip install 'kvdash[ray]'") from exc
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):  # an existing cluster
            ray.init(logging_level=logging.ERROR, log_to_driver=False)
        else:  # a cluster of this machine's cores, for as long as the sweep runs
            ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    remote = ray.remote(fn)
    return list(ray.get([remote.remote(t) for t in tasks]))
