"""The HTML report opens in a real headless browser without console errors, charts drawn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                reason="Debian's chromium is not installed (.ci/run installs it)")

PROBE = """
<script>
window.addEventListener('load', () => {
  const figs = [...document.querySelectorAll('figure.chart svg')];
  const out = {charts: figs.length,
               drawn: figs.filter(s => s.getBoundingClientRect().width > 200
                                      && s.querySelectorAll('path, rect, use').length > 5).length,
               title: document.title, tables: document.querySelectorAll('table').length, errors: window.__errors || []};
  document.body.setAttribute('data-probe', JSON.stringify(out));
});
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
</script>
"""


def test_report_renders_in_chromium(tmp_path):
    assert CHROMIUM is not None, "chromium is required under CI"
    html = (REPO / "reports" / "tutorial" / "report.html").read_text()
    page = tmp_path / "report.html"
    page.write_text(html.replace("<head>", "<head>" + PROBE, 1))
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
                           "--v=0", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 0 == proc.returncode, proc.stderr[-2000:]
    marker = 'data-probe="'
    start = proc.stdout.index(marker) + len(marker)
    probe = json.loads(proc.stdout[start:proc.stdout.index('"', start)].replace("&quot;", '"'))
    assert 3 == probe["charts"] and 3 == probe["drawn"]
    assert probe["tables"] >= 8 and probe["title"].startswith("Tutorial worked example")
    assert [] == probe["errors"]
    console_errors = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and "error" in ln.lower()]
    assert [] == console_errors
