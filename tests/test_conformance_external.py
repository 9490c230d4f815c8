"""kvdash against vLLM 0.33.0 on configs it was not built on: the external set.

``conformance/vllm/external/`` holds published config.json files that ``tests/data/configs/`` does not (other
sizes and variants of the same families, and families not yet there), each with its origin in ``SOURCES.md``.
``conformance/vllm/external/expected.json`` is what vLLM 0.33.0's own code made of them, written by the same
harness over the same grid as ``conformance/vllm/expected.json`` (``conformance/vllm/run.sh --external``).
Every case is compared as in ``tests/test_conformance.py``: same figures, and kvdash refuses exactly where
vLLM refuses.  ``conformance/vllm/external_compare.py`` prints the same comparison as counts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.test_conformance import CONFIGS, SERVE, report

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = ROOT / "conformance" / "vllm" / "external"
EXPECTED = EXTERNAL / "expected.json"
DATA: dict[str, Any] = json.loads(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.is_file() else {}
CASES: list[dict[str, Any]] = DATA.get("cases", [])
BY_CONFIG: dict[str, list[dict[str, Any]]] = {}
for _case in CASES:
    BY_CONFIG.setdefault(_case["config"], []).append(_case)

def test_external_file_is_vllm_033_on_the_same_grid():
    """The external set's expected figures are vLLM 0.33.0's, run as ``vllm serve`` runs on an H200 with the
    grid and settings of the main conformance file (one ``serve`` header for both)."""
    assert DATA, f"{EXPECTED} is missing: run conformance/vllm/run.sh --external"
    assert "0.33.0" == DATA["vllm_version"]
    assert SERVE == DATA["serve"]
    folders = {p.name for p in EXTERNAL.iterdir() if (p / "config.json").is_file()}
    assert folders == set(BY_CONFIG), "every external config has cases, and every case a config"
    per = Counter(c["config"] for c in CASES)
    assert min(per.values()) >= 128, per  # tp 4 x dtype 2 x block 4 x length 2 x budget 2, at least


def test_external_configs_are_not_the_projects_own():
    """Measured on configs the project does not hold: no external folder name nor config.json content
    equals one under ``tests/data/configs``; every folder's origin is in SOURCES.md."""
    own = {p.name: json.loads((p / "config.json").read_text(encoding="utf-8"))
           for p in CONFIGS.iterdir() if (p / "config.json").is_file()}
    sources = (EXTERNAL / "SOURCES.md").read_text(encoding="utf-8")
    for folder in sorted(BY_CONFIG):
        cfg = json.loads((EXTERNAL / folder / "config.json").read_text(encoding="utf-8"))
        assert folder not in own
        assert cfg not in own.values(), folder
        assert f"| `{folder}` |" in sources, folder


def test_every_case_has_vllm_figures():
    """Every case came from vLLM's own layer code, or vLLM refused it: none is "not built" (nothing mirrored in
    its place).  GLM-5 (sparse MLA; DeepSeek-V3.2 moved to tests/data/configs) builds in every case since the
    harness sets up vLLM's workspace manager as the worker does, and its block sizes 16 and 32 are vLLM's own
    refusals."""
    missing = Counter(c["config"] for c in CASES if c["status"] not in ("ok", "refused"))
    assert not missing, missing
    assert {c.get("spec_source") for c in CASES if c["status"] in ("ok", "refused")} <= {"vllm-layers"}


@pytest.mark.parametrize("config", sorted(BY_CONFIG))
def test_external_config_agrees_with_vllm(config):
    """All cases of one external config: the same figures as vLLM 0.33.0, or refused where it refuses."""
    text = report(config, BY_CONFIG[config], serve=DATA["serve"], root=EXTERNAL)
    assert not text, "\n" + text
