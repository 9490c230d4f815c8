"""Coverage as a number, and no model type loses its conformance config.

``conformance/vllm/registry.json`` is written by ``conformance/vllm/run.sh --registry`` from vLLM 0.33.0's
own registry (``_TEXT_GENERATION_MODELS`` in ``vllm/model_executor/models/registry.py``), with, for each
architecture, the ``model_type`` values whose transformers auto class it is.  An architecture counts as
modelled by kvdash when one of its model types is in kvdash's table (``kvdash.core.modeltypes.SUPPORTED``)
or a published config under ``tests/data/configs/`` names it with a model type kvdash reads.  The README
states the number; this test recomputes it, so the sentence cannot go stale.

The README's model-type table names, per model type, the published configs that conformance-check it
(``conformance/vllm/expected.json``); each named config must still be there, with that model type, and
have cases vLLM planned.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvdash.core.modeltypes import SUPPORTED

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
REGISTRY = ROOT / "conformance" / "vllm" / "registry.json"
EXPECTED = ROOT / "conformance" / "vllm" / "expected.json"
README = ROOT / "README.md"
# issue 23 moved the model-type table and the conformance text from the README to docs/ (linked from the README)
DOCS = (README, ROOT / "docs" / "model-types.md", ROOT / "docs" / "conformance.md")


def docs_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCS)


def config_files() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CONFIGS.glob("*/config.json"))}


def modelled_architectures() -> tuple[list[str], int]:
    registry = json.loads(REGISTRY.read_text(encoding="utf-8"))
    text = registry["text_generation"]
    named = {}
    for cfg in config_files().values():
        for arch in cfg.get("architectures") or []:
            named.setdefault(arch, set()).add(cfg.get("model_type"))
    covered = sorted(arch for arch, info in text.items()
                     if set(info["transformers_model_types"]) & set(SUPPORTED)
                     or named.get(arch, set()) & set(SUPPORTED))
    return covered, len(text)


def test_registry_is_vllm_033():
    registry = json.loads(REGISTRY.read_text(encoding="utf-8"))
    assert "0.33.0" == registry["vllm_version"]
    assert len(registry["text_generation"]) >= 100  # vLLM 0.33.0 registers 124


def test_readme_states_the_coverage_number():
    covered, total = modelled_architectures()
    text = docs_text()
    m = re.search(r"\*\*(\d+) of the (\d+) text-generation architectures\*\* vLLM 0\.33\.0 registers", text)
    assert m, "README: the coverage sentence ('**N of the M text-generation architectures** vLLM 0.33.0 " \
              "registers') is missing"
    assert (len(covered), total) == (int(m.group(1)), int(m.group(2))), \
        f"README says {m.group(1)} of {m.group(2)}; registry.json and kvdash give {len(covered)} of {total}: {covered}"


def readme_table() -> tuple[list[str], list[list[str]]]:
    text = docs_text()
    block = text.split("<!-- model-types:start", 1)[1].split("<!-- model-types:end -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    return header, body


def test_every_table_row_keeps_its_conformance_configs():
    header, body = readme_table()
    assert "conformance-checked on" in header, \
        f"README's model-type table has no 'conformance-checked on' column: {header}"
    col = header.index("conformance-checked on")
    configs = config_files()
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    planned = {c["config"] for c in expected["cases"] if c["status"] == "ok"}
    problems = []
    for row in body:
        model_type = row[0].strip("`")
        names = re.findall(r"`([^`]+)`", row[col])
        if not names:
            continue  # the row says it is not conformance-checked ("not yet ...")
        for name in names:
            cfg = configs.get(name)
            if cfg is None:
                problems.append(f"{model_type}: tests/data/configs/{name}/config.json is gone")
                continue
            types = {cfg.get("model_type"), (cfg.get("text_config") or {}).get("model_type")}
            if model_type not in types:
                problems.append(f"{model_type}: {name} has model_type {cfg.get('model_type')!r}")
            if name not in planned:
                problems.append(f"{model_type}: {name} has no case vLLM planned in expected.json")
    assert not problems, "\n".join(problems)
