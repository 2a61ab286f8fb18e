"""A page the lab wrote, as a reader first sees it: opened in headless Chromium at a laptop's screen size.

Measures what the report promises a reader (no sideways scrolling, the findings on the first screen),
with every `<details>` closed and again with all of them open, and saves a screenshot of the first
screen. The browser is Debian's `chromium`, driven through Selenium and Debian's `chromium-driver`
(both installed by `scripts/setup`; Selenium is a dev extra).

    python -m experiments.report.page_check PAGE.html [--screenshot FIRST-SCREEN.png] [--width 1366 --height 768]

prints the measurements and exits 1 when the page scrolls sideways or its findings are below the fold.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

WIDTH, HEIGHT = 1366, 768      # the most common laptop screen
FINDINGS_ID = "findings"       # the id of the report's "What these runs show" section

# One script, run in the page: the widths, and where the findings' heading and first paragraph sit.
_MEASURE = """
const root = document.documentElement;
const findings = document.getElementById(arguments[0]);
const first = findings ? findings.querySelector('p, li') : null;
const box = (element) => element ? element.getBoundingClientRect() : null;
const open = Array.from(document.querySelectorAll('table')).filter(t => !t.closest('details:not([open])'));
return {scrollWidth: root.scrollWidth, innerWidth: window.innerWidth, innerHeight: window.innerHeight,
        widestTable: Math.max(0, ...open.map(t => t.rows.length ? t.rows[0].cells.length : 0)),
        findings: findings ? {top: box(findings).top, firstBottom: first ? box(first).bottom : box(findings).bottom}
                           : null};
"""
_OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => d.open = true); return document.querySelectorAll('details').length;"


class NoBrowser(RuntimeError):
    """Chromium or its driver is missing (scripts/setup installs both)."""


@dataclass(frozen=True, kw_only=True)
class PageView:
    """One page at one window size: the widest content with details closed and open, and the findings' place."""

    page: Path
    width: int
    height: int
    scroll_width: int              # document.documentElement.scrollWidth, every <details> closed
    scroll_width_open: int         # the same with every <details> open
    details: int                   # how many <details> the page has
    widest_table: int              # the most columns of a table not inside a closed <details>
    findings_top: float | None     # px from the top of the first screen; None: no findings section
    findings_first_bottom: float | None   # the bottom of the findings' first paragraph
    screenshot: Path | None

    @property
    def fits(self) -> bool:
        """Nothing scrolls sideways, whether the details are open or closed."""
        return max(self.scroll_width, self.scroll_width_open) <= self.width

    @property
    def findings_first(self) -> bool:
        """The findings' heading and first paragraph are on the first screen."""
        return (self.findings_top is not None and self.findings_first_bottom is not None
                and 0 <= self.findings_top and self.findings_first_bottom <= self.height)

    def lines(self) -> list[str]:
        findings = ("no findings section" if self.findings_top is None else
                    f"findings at {self.findings_top:.0f} px, first paragraph ends at {self.findings_first_bottom:.0f} px "
                    f"({'on' if self.findings_first else 'below'} the first screen)")
        return [f"{self.page} at {self.width}x{self.height}:",
                f"  widest content {self.scroll_width} px, {self.scroll_width_open} px with its {self.details} "
                f"details open ({'fits' if self.fits else 'SCROLLS SIDEWAYS'}); widest table in view: "
                f"{self.widest_table} columns",
                f"  {findings}",
                *([f"  screenshot: {self.screenshot}"] if self.screenshot else [])]


def _find(names: tuple[str, ...]) -> str | None:
    return next((found for name in names if (found := shutil.which(name))), None)


class Browser:
    """Headless Chromium with a viewport of exactly `width` x `height` CSS pixels; a context manager."""

    def __init__(self, *, width: int = WIDTH, height: int = HEIGHT) -> None:
        chromium = _find(("chromium", "chromium-browser"))
        driver = _find(("chromedriver",))
        if chromium is None or driver is None:
            raise NoBrowser("needs Debian's chromium and chromium-driver (scripts/setup installs them)")
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.options import Options
            from selenium.webdriver.chrome.service import Service
        except ImportError as error:
            raise NoBrowser("needs selenium (the dev extra: pip install -e '.[dev]')") from error
        options = Options()
        options.binary_location = chromium
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         f"--window-size={width},{height}", "--force-device-scale-factor=1"):
            options.add_argument(argument)
        self.width, self.height = width, height
        self._driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        # The window's size includes what a headless window still reserves; the viewport is set exactly.
        self._driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._driver.quit()

    def view(self, page: Path, *, screenshot: Path | None = None) -> PageView:
        """Open `page`, measure it closed, screenshot its first screen, then measure it with details open."""
        driver = self._driver
        driver.get(Path(page).absolute().as_uri())
        driver.execute_script("window.scrollTo(0, 0)")
        closed = driver.execute_script(_MEASURE, FINDINGS_ID)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(screenshot))
        details = int(driver.execute_script(_OPEN_DETAILS))
        opened = driver.execute_script(_MEASURE, FINDINGS_ID)
        findings = closed["findings"] or {}
        return PageView(page=Path(page), width=int(closed["innerWidth"]), height=int(closed["innerHeight"]),
                        scroll_width=int(closed["scrollWidth"]), scroll_width_open=int(opened["scrollWidth"]),
                        details=details, widest_table=int(closed["widestTable"]), findings_top=findings.get("top"),
                        findings_first_bottom=findings.get("firstBottom"), screenshot=screenshot)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report.page_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--screenshot", type=Path, help="where to save the first screen (one page only)")
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--height", type=int, default=HEIGHT)
    args = parser.parse_args(argv)
    if args.screenshot and len(args.pages) > 1:
        parser.error("--screenshot takes one page")
    ok = True
    with Browser(width=args.width, height=args.height) as browser:
        for page in args.pages:
            view = browser.view(page, screenshot=args.screenshot)
            print("\n".join(view.lines()))
            ok &= view.fits and (view.findings_first or view.findings_top is None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
