"""A step-by-step simulation that keeps block positions, so a block map can be drawn as it runs
(``kvdash live --demo --simulate POLICY``).

It follows the rules of :mod:`kvdash.simulate.engine` (FCFS admission, one token per running request
per step, preempt-newest-and-recompute for paged pools) on a pool small enough to draw: one map cell
per block (paged) or per ``block_size`` slots (contiguous).  The fast engine counts memory; this one
places it, so it is kept to the few requests a screen can show.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from kvdash.core import formulas as f
from kvdash.live.analysis import FREE, RESERVED, TAIL, TOKENS
from kvdash.simulate.engine import PRESETS, Buddy, FirstFit, Workload, draw_requests

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
        self.prompt, self.final, self.arrivals = draw_requests(w, seed, self.max_len, False)
        self.paged = policy.startswith("paged")
        self.free_ids: deque[int] = deque(range(cells))
        self.alloc = FirstFit(self.capacity) if allocator == "first-fit" else Buddy(self.capacity)
        self.waiting: deque[int] = deque()
        self.running: dict[int, dict[str, int | list[int]]] = {}  # request -> state, in admission order
        self.next_arrival = 0
        self.step_no = 0
        self.preemptions = 0
        self.finished = 0
        self.blocked = False

    def _reserve(self, i: int) -> int:
        fin = int(self.final[i])
        return {"max": self.max_len, "pow2": f.pow2_reservation(fin, self.max_len), "oracle": fin}[self.policy]

    def _preempt_newest(self) -> None:
        victim = next(reversed(self.running))
        state = self.running.pop(victim)
        self.free_ids.extend(state["blocks"])  # type: ignore[arg-type]
        self.waiting.appendleft(victim)
        self.preemptions += 1

    def step(self) -> None:
        t = self.step_no
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival] <= t:
            self.waiting.append(self.next_arrival)
            self.next_arrival += 1
        self.blocked = False
        while self.waiting:
            i = self.waiting[0]
            n = int(self.prompt[i])
            if self.paged:
                need = f.cdiv(n, self.B)
                if need > len(self.free_ids):
                    self.blocked = True
                    break
                self.running[i] = {"len": n, "blocks": [self.free_ids.popleft() for _ in range(need)]}
            else:
                got = self.alloc.alloc(self._reserve(i))
                if got is None:
                    self.blocked = True
                    break
                self.running[i] = {"len": n, "start": got[0], "res": got[1]}
            self.waiting.popleft()
        for i in list(self.running):
            if i not in self.running:
                continue  # preempted during this step
            state = self.running[i]
            state["len"] = int(state["len"]) + 1  # type: ignore[operator]
            if self.paged:
                blocks = state["blocks"]
                assert isinstance(blocks, list)
                if len(blocks) * self.B < int(state["len"]):
                    while not self.free_ids and next(reversed(self.running)) != i:
                        self._preempt_newest()
                    if not self.free_ids:
                        self._preempt_newest()  # i itself is the newest
                        continue
                    blocks.append(self.free_ids.popleft())
        for i in [i for i, s in self.running.items() if int(s["len"]) >= int(self.final[i])]:
            state = self.running.pop(i)
            if self.paged:
                self.free_ids.extend(state["blocks"])  # type: ignore[arg-type]
            else:
                self.alloc.free(int(state["start"]), int(state["res"]))  # type: ignore[arg-type]
            self.finished += 1
        self.step_no += 1

    def cells(self) -> list[str]:
        """One cell per block (paged) or per ``block_size`` slots (contiguous), in address order."""
        B = self.B
        out = [EXTERNAL if self.blocked and not self.paged else FREE] * self.blocks
        for i, state in self.running.items():
            length = int(state["len"])
            if self.paged:
                for k, b in enumerate(state["blocks"]):  # type: ignore[arg-type]
                    out[b] = TOKENS if (k + 1) * B <= length else TAIL
            else:
                start, res = int(state["start"]), int(state["res"])
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
