"""kvdash simulate: hand-worked cases, invariants checked on every step, the policies' order, CLI errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvdash.cli import main
from kvdash.errors import InputError
from kvdash.simulate.engine import PRESETS, Buddy, FirstFit, Lengths, Workload, simulate


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


ONE = Workload("one", Lengths("fixed", 10), Lengths("fixed", 6), requests=1, rate=1.0)


class TestByHand:
    def test_paged_one_request(self):
        """Prompt 10, output 6 (final 16), B = 8, 64 slots: admitted with 10 tokens in 2 blocks; after
        each of 6 steps it holds 11..16 tokens (sum 81) in 16 slots; so 81 token slots, 96 - 81 = 15
        tail slots, 48 x 6 = 288 free, of 384 slot-steps."""
        r = simulate(ONE, "paged", 64, 8, 32)
        assert (6, 1, 0) == (r.steps, r.finished, r.preemptions)
        assert pytest.approx(100 * 81 / 384) == r.shares_percent["token_states"]
        assert pytest.approx(100 * 15 / 384) == r.shares_percent["internal_fragmentation"]
        assert pytest.approx(100 * 288 / 384) == r.shares_percent["free"]

    def test_contiguous_max_one_request(self):
        """The same request reserving max_len = 32: 81 token slots, reservation 6 x 16 - 81 = 15 (slots for
        tokens still to come), over-reservation (32 - 16) x 6 = 96, free 32 x 6 = 192."""
        r = simulate(ONE, "max", 64, 8, 32)
        s = r.shares_percent
        assert [100 * x / 384 for x in (81, 15, 96, 0, 192)] == pytest.approx(
            [s["token_states"], s["reservation"], s["internal_fragmentation"], s["external_fragmentation"], s["free"]])

    def test_buddy_rounds_up(self):
        """Oracle under a buddy allocator reserves the next power of two: 16 -> 16, a final of 17 -> 32."""
        b = Buddy(64)
        assert (0, 32) == b.alloc(17) and (32, 16) == b.alloc(16)
        b.free(0, 32)
        b.free(32, 16)
        assert b.free_lists[6] == {0}

    def test_first_fit_merges(self):
        f = FirstFit(100)
        a, c = f.alloc(30), f.alloc(30)
        assert (0, 30) == a and (30, 30) == c and f.alloc(50) is None
        f.free(0, 30)
        f.free(30, 30)
        assert ([0], [100]) == (f.starts, f.sizes)


def checker(B: int | None):
    def check(state):
        total = sum(state["shares"].values())
        assert total == state["capacity"]  # shares sum to 100 %
        assert all(v >= 0 for v in state["shares"].values())
        if B is not None:
            held = state["r_blocks"] * B
            assert (held >= state["r_len"]).all()  # no request holds less than its tokens
            assert (held - state["r_len"] < B).all()  # paged tail waste per request below one block
            assert state["free_blocks"] >= 0 and state["allocated"] <= state["capacity"]  # never over-commits
        else:
            assert state["reserved"] <= state["capacity"]
            for res, fin, length in state["running"]:
                assert res >= fin >= length  # the reservation covers every token
    return check


WORK = replace(PRESETS["sharegpt"], requests=400, rate=0.3)


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle", "paged", "paged-prefix"])
@pytest.mark.parametrize("allocator", ["first-fit", "buddy"])
def test_invariants_every_step(policy, allocator):
    """Shares sum to 100 %, nothing negative, no request below its tokens, tails below B, no over-commit."""
    w = replace(WORK, prefix=64) if policy == "paged-prefix" else WORK
    B = 16 if policy.startswith("paged") else None
    r = simulate(w, policy, 16_000, 16, 2048, allocator=allocator, seed=3, on_step=checker(B))
    assert r.finished == w.requests
    assert pytest.approx(100.0) == sum(r.shares_percent.values())


def test_tail_waste_below_block_per_request():
    seen = []

    def check(state):
        tails = state["r_blocks"] * 16 - state["r_len"]
        seen.append(int(tails.max()) if len(tails) else 0)
    simulate(WORK, "paged", 16_000, 16, 2048, on_step=check)
    assert max(seen) < 16


def test_order_of_policies_on_one_trace():
    """On one trace: Oracle's token share >= Pow2's >= Max's, and paged >= all three."""
    shares = {p: simulate(WORK, p, 16_000, 16, 2048, seed=5).shares_percent["token_states"]
              for p in ("max", "pow2", "oracle", "paged")}
    assert shares["oracle"] >= shares["pow2"] >= shares["max"]
    assert shares["paged"] >= max(shares["oracle"], shares["pow2"], shares["max"])


def test_deterministic_under_seed():
    a = simulate(WORK, "paged", 16_000, 16, 2048, seed=9).to_json()
    b = simulate(WORK, "paged", 16_000, 16, 2048, seed=9).to_json()
    assert a == b and a != simulate(WORK, "paged", 16_000, 16, 2048, seed=10).to_json()


def test_overload_preempts_and_finishes():
    """An overloaded pool preempts (recompute) yet every request finishes."""
    r = simulate(replace(WORK, rate=5.0), "paged", 6_000, 16, 2048, seed=1)
    assert r.preemptions > 0 and r.finished == WORK.requests


def test_prefix_sharing_saves_memory():
    """With a 512-token shared prefix, paged-prefix preempts less and drains the same requests sooner."""
    w = replace(WORK, prefix=512, rate=2.0)
    plain = simulate(replace(w, prefix=0), "paged", 20_000, 16, 2048, seed=2)
    shared = simulate(w, "paged-prefix", 20_000, 16, 2048, seed=2)
    assert shared.preemptions < plain.preemptions and shared.avg_queue_delay_steps < plain.avg_queue_delay_steps


def test_closed_loop():
    r = simulate(replace(WORK, arrival="closed", concurrency=8), "paged", 16_000, 16, 2048)
    assert r.peak_running <= 8 and r.finished == WORK.requests


def test_pool_too_small():
    with pytest.raises(InputError, match="cannot hold"):
        simulate(WORK, "max", 1000, 16, 2048)


class TestCommand:
    def test_json(self, capsys):
        code, out, _ = run(["simulate", "--requests", "200", "--json", "--policies", "max,paged",
                            "--trace-every", "50"], capsys)
        data = json.loads(out)
        assert 0 == code and ["max", "paged"] == [r["policy"] for r in data["results"]]
        steps = data["results"][1]["trace"]["step"]
        assert data["paper_figure_2"]["max"][0] == 20.4 and steps and all(s % 50 == 0 for s in steps)

    def test_tables(self, capsys):
        code, out, _ = run(["simulate", "--requests", "200", "--workload", "alpaca"], capsys)
        assert 0 == code and "(20.4)" in out and "Scheduling" in out

    def test_trace_file(self, tmp_path, capsys):
        trace = tmp_path / "t.csv"
        trace.write_text("prompt,output\n100,50\n20,300\n")
        code, out, _ = run(["simulate", "--trace", str(trace), "--requests", "50", "--json"], capsys)
        assert 0 == code and json.loads(out)["setup"]["workload"] == "trace t.csv"

    @pytest.mark.parametrize("args,field", [
        (["--rate", "-1"], "--rate"), (["--max-len", "5000"], "--max-len"), (["--policies", "best"], "--policies"),
        (["--prompt", "normal:5"], "--prompt"), (["--model", "gemma-2-9b"], "--model"),
        (["--requests", "0"], "--requests"), (["--prompt", "fixed:4096"], "--prompt"),
    ])
    def test_bad_parameters(self, args, field, capsys):
        code, _, err = run(["simulate", *args], capsys)
        assert 2 == code and field in err and 1 == len(err.strip().splitlines())

    @pytest.mark.parametrize("body", ["", "prompt,output\n", "1,x\n", "5,-3\n"])
    def test_bad_trace(self, tmp_path, body, capsys):
        trace = tmp_path / "t.csv"
        trace.write_text(body)
        code, _, err = run(["simulate", "--trace", str(trace)], capsys)
        assert 2 == code and "--trace" in err


class TestGridSimulate:
    GRID = """
models: [opt-13b, tutorial-gqa-80l]
workloads:
  w: {used: 499, max_reserved: 2048}
grid:
  budget: [12GiB]
simulate: {workload: alpaca, requests: 200, rate: 0.5, policies: [max, paged]}
"""

    def test_columns_and_report(self, tmp_path):
        from kvdash.report.build import write_report
        from kvdash.sweep.evaluate import expand
        from kvdash.sweep.gridfile import parse_grid

        path = tmp_path / "g.yaml"
        path.write_text(self.GRID)
        spec = parse_grid(path)
        exp = expand(spec)
        cols = exp.frame.columns
        assert "sim_max_token_states" in cols and "sim_paged_preemptions" in cols
        row = exp.frame.row(0, named=True)
        direct = simulate(spec.simulate.workload, "max", row["kv_token_slots"], 16, 2048)
        assert pytest.approx(direct.shares_percent["token_states"], abs=1e-5) == row["sim_max_token_states"]
        write_report(spec, exp, tmp_path / "r")
        md = (tmp_path / "r" / "report.md").read_text()
        assert "## Memory over time (simulated)" in md and "(20.4)" in md
        assert (tmp_path / "r" / "simulation.svg").is_file()

    @pytest.mark.parametrize("text,words", [
        ("simulate: {policies: [pagd]}\n", "did you mean .paged."),
        ("simulate: {rate: -1}\n", "positive number"),
        ("simulate: {workload: chat}\n", "expected one of"),
        ("grid:\n  block_size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,"
         " 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,"
         " 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78,"
         " 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101]\n"
         "  tp: [1, 2, 4, 8, 16]\nsimulate: {}\n", "at most 500 points"),
    ])
    def test_errors(self, tmp_path, text, words):
        from kvdash.sweep.gridfile import parse_grid

        path = tmp_path / "g.yaml"
        path.write_text(text)
        with pytest.raises(InputError, match=words):
            parse_grid(path)


class TestVisualSimulation:
    """The step-by-step simulation behind `kvdash live --demo --simulate`."""

    @pytest.mark.parametrize("policy", ["paged", "max", "pow2", "oracle"])
    def test_positions_are_consistent(self, policy):
        """No block or slot is held twice; every request holds at least its tokens; the map has one cell a block."""
        from kvdash.simulate.visual import VisualSimulation

        sim = VisualSimulation(policy, cells=200, seed=3)
        for _ in range(2500):
            sim.step()
            if sim.paged:
                held = [b for s in sim.running.values() for b in s["blocks"]]
                assert len(held) == len(set(held)) and len(held) + len(sim.free_ids) == 200
                assert all(len(s["blocks"]) * 16 >= s["len"] for s in sim.running.values())
            else:
                spans = sorted((s["start"], s["start"] + s["res"]) for s in sim.running.values())
                assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
                assert all(s["res"] >= s["len"] for s in sim.running.values())
        cells = sim.cells()
        assert 200 == len(cells) and sim.finished > 0

    def test_overload_preempts(self):
        from kvdash.simulate.visual import VisualSimulation

        sim = VisualSimulation("paged", cells=100, workload=replace(PRESETS["sharegpt"], requests=10_000, rate=0.2))
        for _ in range(2000):
            sim.step()
        assert sim.preemptions > 0 and "preemptions" in sim.status()


async def test_live_app_draws_simulation():
    from kvdash.live.analysis import LiveConfig
    from kvdash.simulate.visual import VisualSimulation
    from kvdash.sources.demo import DemoSource
    from kvdash.tui.app import LiveApp

    app = LiveApp(DemoSource(seed=7), LiveConfig(), interval=3600, autopoll=False,
                  simulation=VisualSimulation("paged", seed=1), sim_steps_per_poll=500)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.simulation.step_no == 500
        assert "simulated paged" in app.simulation.status()
        assert app._drawn["map-wide"][0] == tuple(app.simulation.cells())  # the map shows the simulation's cells
