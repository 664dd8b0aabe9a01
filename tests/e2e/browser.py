"""What the browser tests share: Debian's Chromium and the marks that skip them (CI=true: fail) without it."""
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium: apt-get install -y chromium chromium-driver"),
]
