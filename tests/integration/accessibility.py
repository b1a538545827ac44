"""WCAG 2 A and AA checks of a page in the real browser, by axe-core (Deque's engine, vendored in
tests/integration/axe/ with its licence): the rules tagged wcag2a, wcag2aa, wcag21a and wcag21aa,
colour contrast included, run on what the page shows at that moment."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver

AXE = Path(__file__).parent / "axe" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"  # 4.14.1's
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


@cache
def _axe_source() -> str:
    data = AXE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == AXE_SHA256, f"{AXE} is not axe-core 4.14.1's"
    return data.decode()


def violations(browser: WebDriver) -> list[str]:
    """Each WCAG 2 AA violation on the page as it is now: the rule, and the elements it found
    (their selectors and what axe says to fix). Injected through WebDriver, not the page, so the
    console's CSP (no inline script) stays as it is."""
    if not browser.execute_script("return typeof window.axe === 'object'"):
        browser.execute_script(_axe_source())
    found: dict[str, Any] = browser.execute_async_script(
        """const [tags, done] = arguments;
        axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})
          .then((r) => done({violations: r.violations.map((v) => ({id: v.id, help: v.help,
              nodes: v.nodes.map((n) => `${n.target.join(' ')}: ${n.failureSummary}`)}))}),
                (e) => done({error: String(e)}));""",
        WCAG_AA,
    )
    assert "error" not in found, found.get("error")
    return [f"{v['id']} ({v['help']}): {'; '.join(v['nodes'])}" for v in found["violations"]]
