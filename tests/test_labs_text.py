"""The labs' text against their tests, without running anything: every claim a lab makes has a check, every
check has a claim, and the Markdown conventions (tests/labs/walk.py) parse as the walk expects."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.labs.walk import Lab, lab_files, parse, rich_tables


def _module_for(lab: Path) -> str:
    return f"tests.labs.test_lab{lab.name[:2]}"


@pytest.mark.parametrize("lab", lab_files(), ids=lambda path: path.stem)
def test_every_claim_has_a_check_and_every_check_a_claim(lab: Path) -> None:
    importlib.import_module(_module_for(lab))
    checks = Lab.registry[lab.name].checks
    text = parse(lab)
    assert text.blocks, f"{lab.name} has no sh block"
    claimed = {claim.name for claim in text.claims}
    unchecked = sorted(claimed - set(checks))
    assert not unchecked, f"{lab.name}: claims with no check in {_module_for(lab)}: {unchecked}"
    unused = sorted(set(checks) - claimed)
    assert not unused, f"{_module_for(lab)}: checks that no claim of {lab.name} uses: {unused}"


def test_blocks_claims_and_directives(tmp_path: Path) -> None:
    lab = tmp_path / "99-example.md"
    lab.write_text(
        "# Example\n\n"
        "Intro.\n<!-- claim: early -->\n\n"
        "```sh\n./lab one --a \\\n    --b\n\n./lab two  # a comment\n```\n\n"
        "```python\nprint('not a command')\n```\n\n"
        "- A list item that says\n  something.\n  <!-- claim: counted C0=3 note=\"two words\" -->\n\n"
        "<!-- test: replace \"9092\" \"{port:broker}\" -->\n"
        "<!-- test: exit 2 -->\n"
        "  ```sh\n  ./lab refuse\n  ```\n"
        "<!-- claim: after -->\n")
    text = parse(lab)
    assert [block.commands for block in text.blocks] == [["./lab one --a --b", "./lab two  # a comment"],
                                                          ["./lab refuse"]]
    assert [block.exit for block in text.blocks] == [0, 2]
    early, counted, after = text.claims
    assert early.after_block is None and early.sentence == "Intro."
    assert counted.after_block == 0 and counted.args == {"C0": "3", "note": "two words"}
    assert counted.sentence == "A list item that says something."
    assert after.after_block == 1
    assert [(r.old, r.new) for r in text.replacements] == [("9092", "{port:broker}")]


@pytest.mark.parametrize("comment", ["<!-- claim: -->", "<!-- claim: name novalue -->",
                                     "<!-- test: shrink everything -->", '<!-- claim: x a="open -->'])
def test_a_malformed_comment_is_refused_with_its_line(tmp_path: Path, comment: str) -> None:
    lab = tmp_path / "99-bad.md"
    lab.write_text(f"# Bad\n\n{comment}\n")
    with pytest.raises(ValueError, match="99-bad.md:3"):
        parse(lab)


def test_rich_tables_are_read_with_their_titles() -> None:
    printed = ("cooperative-sticky,    \nround 1                \n┏━━━━━━━━┳━━━━━━━━━━━━┓\n"
               "┃ member ┃ partitions ┃\n┡━━━━━━━━╇━━━━━━━━━━━━┩\n│ C0     │ t0-0 t0-1  │\n"
               "│ C2     │ -          │\n└────────┴────────────┘\n")
    assert rich_tables(printed) == [("cooperative-sticky, round 1", [["C0", "t0-0 t0-1"], ["C2", "-"]])]


def test_a_clean_up_that_meets_a_process_already_gone_goes_on() -> None:
    """Lab 4's teardown kills what its shells left behind; a process that exited meanwhile must not raise
    (its ProcessLookupError once turned one failed wait into five errors that hid it)."""
    import subprocess

    from tests.labs.walk import kill_all

    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "30"])
    try:
        assert kill_all([gone.pid, alive.pid]) == [alive.pid]
        assert alive.wait(timeout=10) == -9
    finally:
        alive.kill()
