"""A step-by-step simulation that keeps block positions, so a block map can be drawn as it runs
(``kvdash live --demo --simulate POLICY``).

It applies the scheduling rules of :mod:`kvdash.simulate.rules` (the same functions the fast
simulator calls: running requests served first, the newest preempted by recompute with its progress
kept, FCFS admission in steps without preemption) on a pool small enough to draw: one map cell per
block (paged) or per ``block_size`` slots (contiguous).  The fast engine counts memory; this one
places it, so it is kept to the few requests a screen can show.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from kvdash.core import formulas as f
from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS
from kvdash.simulate.allocators import Buddy, FirstFit
from kvdash.simulate.rules import admit_fcfs, paged_blocks_to_admit, serve_running
from kvdash.simulate.workload import PRESETS, Workload, draw_requests

EXTERNAL = "x"  # free, but the queue's head does not fit in any hole


class VisualSimulation:
    def __init__(self, policy: str = "paged", cells: int = 480, block_size: int = 16, max_len: int = 2048,
                 workload: Workload | None = None, seed: int = 7, allocator: str = "first-fit") -> None:
        self.policy = policy
        self.B = block_size
        self.blocks = cells
        self.capacity = cells * block_size
        self.max_len = min(max_len, self.capacity)
        w = workload or replace(PRESETS["sharegpt"], requests=100_000, rate=0.02)
        reqs = draw_requests(replace(w, clip=True), seed, self.max_len)
        self.prompt, self.final, self.arrivals = reqs.prompt, reqs.final, reqs.arrival
        self.length = self.prompt.tolist()  # tokens each request holds (kept across preemptions)
        self.paged = policy.startswith("paged")
        self.free_ids: deque[int] = deque(range(cells))
        self.alloc = FirstFit(self.capacity) if allocator == "first-fit" else Buddy(self.capacity)
        self.waiting: deque[int] = deque()
        self.running: dict[int, dict[str, int | list[int]]] = {}  # request -> state, in admission order
        self.order: dict[int, int] = {}  # the running requests in admission order, as rules.serve_running takes them
        self.next_arrival = 0
        self.step_no = 0
        self.preemptions = 0
        self.finished = 0
        self.blocked = False

    # the pool, as rules.serve_running sees it
    @property
    def free(self) -> int:
        return len(self.free_ids)

    def take(self, key: int) -> None:
        self.running[key]["blocks"].append(self.free_ids.popleft())  # type: ignore[union-attr]

    def release(self, key: int) -> None:
        state = self.running.pop(key)
        self.free_ids.extend(state["blocks"])  # type: ignore[arg-type]
        self.waiting.appendleft(key)
        self.preemptions += 1

    def _reserve(self, i: int) -> int:
        fin = int(self.final[i])
        pow2 = f.pow2_output_reservation(int(self.prompt[i]), fin, self.max_len)
        return {"max": self.max_len, "pow2": pow2, "oracle": fin}[self.policy]

    def _place(self, i: int) -> bool:
        n = self.length[i]
        if self.paged:
            need = paged_blocks_to_admit(n, self.B, 0, True)
            if need > len(self.free_ids):
                return False
            self.running[i] = {"len": n, "blocks": [self.free_ids.popleft() for _ in range(need)]}
        else:
            got = self.alloc.alloc(self._reserve(i))
            if got is None:
                return False
            self.running[i] = {"len": n, "start": got[0], "res": got[1]}
        self.order[i] = i
        return True

    def step(self) -> None:
        t = self.step_no
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival] <= t:
            self.waiting.append(self.next_arrival)
            self.next_arrival += 1
        preempted: list[int] = []
        if self.paged:
            needers = [i for i in self.order if self.length[i] % self.B == 0]
            preempted = serve_running(self.order, needers, self)
        if not preempted:
            admit_fcfs(self.waiting, self._place)
        self.blocked = bool(self.waiting)
        for i, state in self.running.items():
            self.length[i] += 1
            state["len"] = self.length[i]
        for i in [i for i in self.running if self.length[i] >= int(self.final[i])]:
            state = self.running.pop(i)
            del self.order[i]
            if self.paged:
                self.free_ids.extend(state["blocks"])  # type: ignore[arg-type]
            else:
                self.alloc.free(int(state["start"]), int(state["res"]))  # type: ignore[arg-type, unused-ignore]
            self.finished += 1
        self.step_no += 1

    def cells(self) -> list[str]:
        """One cell per block (paged) or per ``block_size`` slots (contiguous), in address order."""
        B = self.B
        out = [EXTERNAL if self.blocked and not self.paged else FREE] * self.blocks
        for i, state in self.running.items():
            length = self.length[i]
            if self.paged:
                for k, b in enumerate(state["blocks"]):  # type: ignore[arg-type]
                    out[b] = TOKENS if (k + 1) * B <= length else TAIL
            else:
                start, res = int(state["start"]), int(state["res"])  # type: ignore[arg-type]
                fin = min(int(self.final[i]), res)
                for c in range(start // B, f.cdiv(start + res, B)):
                    slot = c * B
                    if slot < start + length:
                        out[c] = TOKENS
                    elif slot < start + fin:
                        out[c] = RESERVED
                    else:
                        out[c] = TAIL  # reserved beyond the final length: never used
        return out

    def status(self) -> str:
        return (f"simulated {self.policy}: step {self.step_no:,}, running {len(self.running)}, "
                f"waiting {len(self.waiting)}, finished {self.finished:,}, preemptions {self.preemptions:,}")
