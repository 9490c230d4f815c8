"""Merge the shard files harness.py --shard K/N --partial-out wrote into expected.json (no vLLM
needed). Cases keep the harness's order: config name, then the grid order within a config. A config in a
later file replaces the same config of an earlier one (``merge.py OUT all.json rerun.json``). ``--drop NAME ...``
leaves those configs out (their cases and ``configs`` entries): ``merge.py OUT OUT --drop NAME`` removes a config
whose folder left the set, e.g. one moved from the external set into ``tests/data/configs/``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def dumps(doc: dict) -> str:
    """The harness's layout: sorted keys, one case per line."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    text = json.dumps(head, indent=1, sort_keys=True)
    lines = [json.dumps(c, sort_keys=True) for c in doc["cases"]]
    return text[:-2] + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n"


def main(argv: list[str]) -> int:
    drop: set[str] = set()
    if "--drop" in argv:
        at = argv.index("--drop")
        argv, drop = argv[:at], set(argv[at + 1:])
    out, *parts = argv
    docs = [json.loads(Path(p).read_text()) for p in parts]
    head = {k: v for k, v in docs[0].items() if k not in ("cases", "configs", "harness")}
    for d in docs[1:]:
        other = {k: v for k, v in d.items() if k not in ("cases", "configs", "harness")}
        if other != head:
            raise SystemExit(f"merge: shard headers differ: {other} vs {head}")
    harness = dict(docs[0]["harness"])
    for key in ("stubbed_cuda_extensions", "kernel_capability_queries_answered_false"):
        harness[key] = sorted({x for d in docs for x in d["harness"][key]})
    harness["kernel_handles_taken_never_run"] = max(d["harness"]["kernel_handles_taken_never_run"]
                                                    for d in docs)
    configs: dict = {}
    for d in docs:
        configs.update(d["configs"])
    missing = drop - set(configs)
    if missing:
        raise SystemExit(f"merge: --drop: no such config: {', '.join(sorted(missing))}")
    configs = {name: info for name, info in configs.items() if name not in drop}
    by_config: dict[str, list] = {}
    for d in docs:  # a later file's config replaces an earlier one's (a rerun with --only)
        mine: dict[str, list] = {}
        for c in d["cases"]:
            mine.setdefault(c["config"], []).append(c)
        by_config.update(mine)
    cases = [c for name in sorted(by_config) if name not in drop for c in by_config[name]]
    doc = dict(head, harness=harness, configs=configs, cases=cases)
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(dumps(doc))
    tmp.replace(out)
    print(f"{len(cases)} cases from {len(configs)} configs -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
