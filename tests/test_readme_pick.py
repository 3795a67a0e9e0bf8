"""The README's "What to pick" table is what scripts/what_to_pick.py prints from the committed results, to the digit."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from privft.compare import pick_table

ROOT = Path(__file__).parent.parent
COMMAND = re.compile(r"<!-- (\.venv/bin/python scripts/what_to_pick\.py .*?) -->\n")


def test_the_readme_opens_with_the_what_to_pick_table_of_the_committed_results():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [match] = COMMAND.finditer(readme)
    _, _, comparison, *names = shlex.split(match.group(1))
    table = pick_table(json.loads((ROOT / comparison).read_text(encoding="utf-8"))["rows"], names)
    assert readme[match.end():].startswith(table)  # the command's output follows its line, verbatim
    assert readme.index("## What to pick") < readme.index("## Add privft to your fine-tune script")
