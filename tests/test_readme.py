"""README.md, docs/ and .ci/run agree with the code: the API table, the main job, the test command,
the links, the project layout (docs/layout.md).

.ci/run must run the README's one-line commands -- "Main job", "Tests", "Full kernel sweep" and
"CUDA 12 check" -- verbatim, in that order, inside a fresh virtual environment it activates first
(as a newcomer runs them: a test that needs the system interpreter's packages fails there), and
install nothing else: what CI installs is what a newcomer following the README installs.
"""
import os
import re
from pathlib import Path

import deep_tile

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = ROOT / ".ci" / "run"
MAIN_JOB = ('pip install torch==2.13.0 && pip install -e ".[cu13]" && '
            "python -m deep_tile explain 4096,7168,2048 --num-sms 132")
TEST_COMMAND = 'pip install -e ".[cu13,test]" && python -m pytest -q -n auto --maxprocesses 8 --dist loadfile tests'
SWEEP_COMMAND = 'python -m pytest -q tests --kernel-sweep -k "test_kernel_build or nvcc"'
CI_SECTIONS = ("Main job", "Tests", "Full kernel sweep", "CUDA 12 check")
"""The README sections whose one-line command .ci/run runs, in this order."""
_INSTALLS = re.compile(r"\b(pip3?|conda|mamba|apt|apt-get|uv|brew)\b.*\binstall\b|\bsetup\.py\b")


def section(title: str) -> str:
    """The body of README's ``## <title>`` section."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def code_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)]


def test_api_table_lists_every_public_name():
    rows = [line for line in section("API").splitlines() if line.startswith("| `")]
    names = {re.match(r"\| `([A-Za-z_][A-Za-z0-9_]*)", row).group(1) for row in rows}
    assert names == set(deep_tile.__all__)


def one_line(title: str) -> str:
    """The single one-line code block of README's ``## <title>`` section."""
    blocks = code_blocks(section(title))
    assert len(blocks) == 1 and "\n" not in blocks[0], f"'## {title}' must hold one one-line code block; got {blocks}"
    return blocks[0]


def ci_commands() -> list[str]:
    """The non-empty, non-comment lines of .ci/run, stripped."""
    return [line.strip() for line in CI.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_main_job_is_one_command_line():
    assert one_line("Main job") == MAIN_JOB
    assert "`python benchmarks/bench_fp8_gemm.py`" in section("Main job")


def test_tests_section_installs_the_test_extra_then_runs_pytest():
    assert one_line("Tests") == TEST_COMMAND


def test_the_sweep_and_the_cuda12_check_are_one_line_each():
    assert one_line("Full kernel sweep") == SWEEP_COMMAND
    cu12 = one_line("CUDA 12 check")
    assert '".[cu12]"' in cu12 and "cu13" not in cu12 and "[test]" not in cu12, cu12
    assert "tools/cuda_stack_check.py 12" in cu12 and "test_kernel_build.py -k nvrtc" in cu12, cu12
    assert cu12.startswith("python -m venv "), "the CUDA 12 check must run in a fresh environment"


def test_ci_runs_exactly_the_readme_lines():
    lines = [one_line(title) for title in CI_SECTIONS]
    commands = ci_commands()
    for title, line in zip(CI_SECTIONS, lines):
        assert line in commands, f".ci/run must run the README's '{title}' line verbatim"
    assert [commands.index(line) for line in lines] == sorted(commands.index(line) for line in lines), \
        f".ci/run must run the README's lines in the order {CI_SECTIONS}"
    installs = [line for line in commands if _INSTALLS.search(line)]
    assert installs == [line for line in lines if _INSTALLS.search(line)], \
        f".ci/run installs something the README does not: {installs}"
    assert os.access(CI, os.X_OK), ".ci/run must be executable"
    assert "set -euo pipefail" in commands


def test_ci_runs_the_readme_lines_inside_a_fresh_activated_venv():
    commands = ci_commands()
    first = commands.index(one_line("Main job"))
    made = [i for i, line in enumerate(commands) if re.match(r"python3 -m venv (--clear )?\S+$", line)]
    activated = [i for i, line in enumerate(commands) if re.match(r"(\.|source) \S+/bin/activate\"?$", line)]
    assert made and activated and made[0] < activated[0] < first, \
        ".ci/run must make a fresh venv with `python3 -m venv` and activate it before the README's lines"
    venv = commands[made[0]].split()[-1].strip('"')
    assert commands[activated[0]].split()[1].strip('"') == f"{venv}/bin/activate", "activate the venv just made"
    # `pip` and `python` are the venv's: no wrapper scripts on PATH, no other interpreter named
    text = CI.read_text()
    assert "PATH=" not in text and "exec " not in text, ".ci/run must not put its own pip/python on PATH"
    readme_lines = [one_line(title) for title in CI_SECTIONS]
    for line in readme_lines[:3]:
        assert not re.search(r"(^|[\s/])(python3|/usr/bin/python\S*)\b", line), line


def test_the_readme_says_to_use_a_venv():
    install = section("Install")
    assert "python3 -m venv .venv && . .venv/bin/activate" in install


def test_install_check_catches_extra_installs():
    """The pattern that guards .ci/run sees the usual ways of installing something."""
    for line in ("python3 -m pip install pytest", "pip3 install nvidia-cuda-nvdisasm", "apt-get install -y cuda",
                 "uv pip install -e .", "python setup.py develop"):
        assert _INSTALLS.search(line), line
    for line in ('echo "== tests"', "python -m pytest -q tests", "python -m deep_tile explain 1,8,16"):
        assert not _INSTALLS.search(line), line


def layout_paths() -> list[str]:
    """The paths named in docs/layout.md's block (nesting by two-space indent)."""
    [block] = code_blocks((ROOT / "docs" / "layout.md").read_text())
    stack: list[tuple[int, str]] = []
    found = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(parent for _, parent in stack) + name
        found.append(path.rstrip("/"))
        if name.endswith("/"):
            stack.append((indent, name))
    return found


def test_project_layout_names_real_files():
    paths = layout_paths()
    for path in ("deep_tile/common.py", "deep_tile/select/api.py", "deep_tile/jit/loader.py"):
        assert path in paths, path
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, f"docs/layout.md names paths that do not exist: {missing}"
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "deep_tile").glob("*.py") if p.name != "__init__.py"}
    assert not modules - set(paths), f"modules missing from docs/layout.md: {sorted(modules - set(paths))}"


def test_links_of_the_readme_and_docs_resolve():
    """Every relative link and image of README.md and docs/*.md names an existing file, and every
    in-page anchor of the README a section of it."""
    anchors = {re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")
               for title in re.findall(r"^#+ (.*)$", README, re.M)}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            if target.startswith("#"):
                assert page.name != "README.md" or target[1:] in anchors, f"{page.name}: no section {target}"
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_the_readme_links_every_docs_page():
    for page in (ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in README, f"README.md does not link docs/{page.name}"


def test_readme_commands_name_real_things():
    assert (ROOT / "benchmarks" / "bench_fp8_gemm.py").is_file()
    assert (ROOT / "tools" / "device_run.sh").is_file()
    assert (ROOT / "benchmarks" / "RESULTS.md").is_file()
    for name in re.findall(r"python -m deep_tile (\w+)", README):
        assert name in ("explain", "warmup"), name
