"""README.md's links into docs/ must resolve: each `docs/PAGE.md` exists, and each
`docs/PAGE.md#anchor` names a heading of the built page (build/docs/PAGE.html). Run by
`make docs` after the site is built; exits non-zero naming every broken link."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "docs"
LINK = re.compile(r"\]\((docs/[^)\s#]+)(?:#([^)\s]+))?\)")


def broken(readme: Path) -> list[str]:
    bad = []
    for path, anchor in LINK.findall(readme.read_text()):
        if not (ROOT / path).is_file():
            bad.append(f"{path} (no such file)")
            continue
        if anchor and path.endswith(".md"):
            page = SITE / Path(path).relative_to("docs").with_suffix(".html")
            if not page.is_file() or f'id="{anchor}"' not in page.read_text():
                bad.append(f"{path}#{anchor} (no such heading in the built page)")
    return bad


if __name__ == "__main__":
    bad = broken(ROOT / "README.md")
    if bad:
        sys.exit("README.md links to what docs/ does not have: " + ", ".join(bad))
    print("README.md: every link into docs/ resolves")
