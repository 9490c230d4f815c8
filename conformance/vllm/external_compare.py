"""Compare kvdash with vLLM 0.33.0 on the external config set, case by case, and count.

The external set (``conformance/vllm/external/``) holds published config.json files that
``tests/data/configs/`` does not; ``conformance/vllm/external/expected.json`` is what vLLM 0.33.0's own
planning code made of them (``conformance/vllm/run.sh --external``, the same harness and grid as the main
set).  This script runs kvdash on every case with the comparison of ``tests/test_conformance.py`` and
counts, per case, one of:

* ``agree``: vLLM planned and every figure agrees, or vLLM refused and kvdash refused (one InputError);
* ``wrong``: vLLM planned, kvdash planned, and at least one figure differs (a wrong figure);
* ``refused``: vLLM planned and kvdash refused (a refusal of a model vLLM serves);
* ``refused_log_line``: vLLM refused and kvdash printed a "vLLM 0.33 would log" line;
* ``kvdash_error``: kvdash raised something other than its one-line InputError (a traceback);
* ``no_vllm_figures``: the harness could not build the model (``not_built``): not counted either way.

Run with the project's environment (kvdash and pytest importable), no vLLM needed::

    .venv/bin/python conformance/vllm/external_compare.py               # the summary and every config
    .venv/bin/python conformance/vllm/external_compare.py --json out.json
    .venv/bin/python conformance/vllm/external_compare.py --expected other.json --configs DIR

Exit status 0 whatever the counts (it measures; ``tests/test_conformance_external.py`` is the gate).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvdash.errors import InputError  # noqa: E402
from tests.test_conformance import case_id, compare, kvdash_case  # noqa: E402

EXTERNAL = ROOT / "conformance" / "vllm" / "external"
KINDS = ("agree", "wrong", "refused", "refused_log_line", "kvdash_error", "no_vllm_figures")


def classify(case: dict[str, Any], serve: dict[str, Any], root: Path) -> tuple[str, list[tuple[str, Any, Any]]]:
    """One case's kind (see the module docstring) and the figures that differ."""
    if case["status"] not in ("ok", "refused"):
        return "no_vllm_figures", []
    try:
        diffs = compare(case, serve, root)
    except InputError as exc:  # compare lets none through; kept for safety
        return "refused", [("refusal", "planned", str(exc)[:160])]
    except Exception as exc:  # noqa: BLE001 - a traceback kvdash would print is what is measured
        return "kvdash_error", [("error", case.get("log_line") or case.get("reason", "")[:80],
                                 f"{type(exc).__name__}: {exc}"[:200])]
    if not diffs:
        return "agree", []
    if diffs[0][0] == "refusal":
        return ("refused_log_line" if case["status"] == "refused" else "refused"), diffs
    return "wrong", diffs


def measure(expected: Path, root: Path) -> dict[str, Any]:
    data = json.loads(expected.read_text(encoding="utf-8"))
    serve = data.get("serve", {})
    totals: Counter[str] = Counter()
    per_config: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    for case in data["cases"]:
        kind, diffs = classify(case, serve, root)
        totals[kind] += 1
        entry = per_config.setdefault(case["config"], {"cases": 0, **{k: 0 for k in KINDS}, "figures": Counter(),
                                                       "examples": []})
        entry["cases"] += 1
        entry[kind] += 1
        for key, want, have in diffs:
            entry["figures"][key] += 1
            if len(entry["examples"]) < 3:
                entry["examples"].append(f"{case_id(case)}: {key}: vLLM {want!r}, kvdash {have!r}")
    for entry in per_config.values():
        entry["figures"] = dict(entry["figures"].most_common())
    model_types = {}
    for name in per_config:
        cfg = json.loads((root / name / "config.json").read_text(encoding="utf-8"))
        model_types[name] = cfg.get("model_type", "?")
    return {
        "expected": str(expected.relative_to(ROOT) if expected.is_relative_to(ROOT) else expected),
        "vllm_version": data.get("vllm_version"),
        "configs": len(per_config),
        "cases": sum(totals.values()),
        "vllm_planned": sum(c["status"] == "ok" for c in data["cases"]),
        "vllm_refused": sum(c["status"] == "refused" for c in data["cases"]),
        "totals": {k: totals.get(k, 0) for k in KINDS},
        "compare_s": round(time.monotonic() - t0, 1),
        "per_config": {name: dict(per_config[name], model_type=model_types[name]) for name in sorted(per_config)},
    }


def render(result: dict[str, Any]) -> str:
    t = result["totals"]
    lines = [f"kvdash against vLLM {result['vllm_version']} on {result['configs']} configs "
             f"({result['expected']}): {result['cases']:,} cases, {result['vllm_planned']:,} planned by vLLM, "
             f"{result['vllm_refused']:,} refused by vLLM",
             f"  agree {t['agree']:,}; wrong figures {t['wrong']:,}; kvdash refusals of cases vLLM plans "
             f"{t['refused']:,}; log lines where vLLM refuses {t['refused_log_line']:,}; kvdash errors "
             f"{t['kvdash_error']:,}; no vLLM figures {t['no_vllm_figures']:,} (compared in {result['compare_s']} s)",
             ""]
    for name, e in result["per_config"].items():
        bad = e["cases"] - e["agree"] - e["no_vllm_figures"]
        mark = "ok " if not bad else "BAD"
        lines.append(f"{mark} {name} ({e['model_type']}): {e['agree']}/{e['cases']} agree"
                     + (f"; wrong {e['wrong']}, refused {e['refused']}, refused-log {e['refused_log_line']}, "
                        f"error {e['kvdash_error']}; figures {e['figures']}" if bad else ""))
        lines.extend(f"      {x}" for x in e["examples"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--expected", type=Path, default=EXTERNAL / "expected.json")
    ap.add_argument("--configs", type=Path, default=EXTERNAL)
    ap.add_argument("--json", type=Path, help="also write the counts as JSON here")
    args = ap.parse_args(argv)
    result = measure(args.expected.resolve(), args.configs.resolve())
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["classify", "kvdash_case", "measure"]
