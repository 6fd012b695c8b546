"""The project speaks of itself alone: no numbered labels of work periods in what a reader sees.

A measurement is cited by its date and the title of its benchmarks/RESULTS.md entry (e.g.
"RESULTS.md, 2026-11-24 'Decode chain beside the read chain, and its power'"), never by a
numbered label of the work that produced it, which nothing in the repository resolves. This test
scans the README, docs/, benchmarks/RESULTS.md and the source, test and tool trees for such
labels and names file:line of each one (benchmarks/data/ keeps its file names and headers as
they were recorded; it is not scanned), and checks that every citation of the form
"<date> '<title>'" names an entry of RESULTS.md that exists.

The patterns are assembled from pieces so that this file, which is scanned too, does not match
itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What is scanned: single files and whole trees, relative to the repository root.
SCANNED_FILES = ("README.md", "benchmarks/RESULTS.md")
SCANNED_TREES = ("docs", "deep_tile", "include", "csrc", "tests", "tools")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", "build", "dist"}
MAX_BYTES = 4 << 20  # larger files are data, not prose

_WORD = "[Ss]" + "ession"  # the word, split so this file does not match itself
_GAP = r"\s[\s/#*]*"  # blanks, also across a line break and a comment's leader (//, ///, #, *)
LABEL_PATTERNS = (
    # a numbered label: "<word> 21", "<word>s 17-26", "<word> 24's"
    re.compile(r"\b" + _WORD + r"s?" + _GAP + r"\d"),
    # a deictic label: "this <word>", "that <word>", "the previous <word>", "earlier <word>s" ...
    re.compile(r"\b(?:[Tt]his|[Tt]hat|[Pp]revious|[Nn]ext|[Ee]arlier|[Ll]ater|[Ll]ast)" + _GAP
               + _WORD + r"(?:s|'s)?\b"),
    # a short label: a capital S and one or two digits, standing alone
    re.compile(r"(?<![\w.\-/])S\d{1,2}(?![\w.\-/])"),
)


def find_labels(text: str) -> list[tuple[int, str]]:
    """(1-based line, the line stripped) of every label in ``text``, in line order."""
    hits: dict[int, str] = {}
    lines = text.split("\n")
    for pattern in LABEL_PATTERNS:
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.setdefault(line, lines[line - 1].strip())
    return sorted(hits.items())


def _scanned_paths() -> list[Path]:
    paths = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for tree in SCANNED_TREES:
        base = ROOT / tree
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                paths.append(path)
    return paths


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary or oversized file."""
    if path.stat().st_size > MAX_BYTES:
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_patterns_find_labels_and_leave_other_uses_of_the_word():
    word = "s" + "ession"
    labelled = [
        f"measured on an H200 (RESULTS.md, {word} 21)",
        f"as {word}s 17-26 showed",
        f"as {word}s 17\u201326 showed",
        f"{word.capitalize()} 24's variant",
        f"the final tree of\n  {word} 18, then",
        f"as {word}s\n  /// 17-26 showed",
        f"  # measured in this\n  # {word}",
        f"no device-code change this {word}",
        f"as that {word}'s tables",
        "the " + "S" + "21 tables",
    ]
    for text in labelled:
        assert find_labels(text), text
    assert find_labels(f"line one\nthe tree of\n  {word} 18") == [(3, f"{word} 18")]
    unlabelled = [
        f'@pytest.fixture(scope="{word}")',
        f"subprocess.Popen(cmd, start_new_{word}=True)",
        f"for item in request.{word}.items:",
        f"it must fail one test, not the {word}.",
        "the file decode_h100_s26_2026-11-24.txt and the stage count s16",
        "config 64x32 s16 k2 x2 ef",
    ]
    for text in unlabelled:
        assert find_labels(text) == [], text


def test_no_work_labels_in_the_project():
    paths = _scanned_paths()
    assert any(p.name == "RESULTS.md" for p in paths), "benchmarks/RESULTS.md not found"
    found = []
    for path in paths:
        text = _text(path)
        if text is None:
            continue
        for line, content in find_labels(text):
            found.append(f"{path.relative_to(ROOT)}:{line}: {content[:160]}")
    if found:
        pytest.fail("numbered work labels (cite the RESULTS.md entry's date and title instead):\n"
                    + "\n".join(found), pytrace=False)


_HEADING = re.compile(r"(?m)^### (\d{4}-\d\d-\d\d) [^\n]*· ([^·\n]+)$")
_CITATION = re.compile(r"(\d{4}-\d\d-\d\d)(?: \d\d:\d\d(?:-\d\d:\d\d)?)?" + _GAP + "'")


def entry_titles(results: str) -> dict[str, set[str]]:
    """The titles of RESULTS.md's entries by date: the heading's text after its last ' · '."""
    titles: dict[str, set[str]] = {}
    for date, title in _HEADING.findall(results):
        titles.setdefault(date, set()).add(title.strip())
    return titles


def unresolved_citations(text: str, titles: dict[str, set[str]]) -> list[tuple[int, str]]:
    """(line, cited text) of each "<date> '<title>'" in ``text`` whose title is not an entry of that
    date. A title may wrap over lines and comment leaders (blanks, //, #, * are read as one blank)."""
    bad = []
    for m in _CITATION.finditer(text):
        rest = re.sub(_GAP, " ", text[m.end():m.end() + 400])
        if not any(rest.startswith(t + "'") for t in titles.get(m.group(1), ())):
            line = text.count("\n", 0, m.start()) + 1
            bad.append((line, re.sub(_GAP, " ", text[m.start():m.end()]) + rest[:70]))
    return bad


def test_the_citation_check_finds_a_wrong_title():
    day, other_day = "2026-11-" + "24", "2026-11-" + "23"  # split: this file is scanned too
    title = "Decode chain beside the read chain, and its power"
    titles = {day: {title}}
    good = f"(RESULTS.md, {day} 'Decode chain beside the read chain,\n    // and its power')"
    assert unresolved_citations(good, titles) == []
    wrong = f"x\n(RESULTS.md, {day} 'Decode chain beside the read chain')"
    assert [line for line, _ in unresolved_citations(wrong, titles)] == [2]
    assert unresolved_citations(f"on {other_day} '{title}'", titles)
    assert entry_titles(f"## Results\n\n### {day} 20:15-21:20 · H200, H100 · driver 580.159.04 · "
                        f"NVRTC 13.0 · {title}\n\ntext\n") == titles


def test_every_cited_entry_exists():
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    titles = entry_titles(results)
    assert sum(len(t) for t in titles.values()) >= 10, "RESULTS.md headings not recognised"
    found = []
    for path in _scanned_paths():
        text = _text(path)
        if text is None:
            continue
        for line, cited in unresolved_citations(text, titles):
            found.append(f"{path.relative_to(ROOT)}:{line}: {cited}")
    if found:
        pytest.fail("citations of RESULTS.md entries that do not exist (date and title as in the "
                    "entry's heading):\n" + "\n".join(found), pytrace=False)
