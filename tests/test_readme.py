"""README.md and .ci/run agree with the code: the API table, the main job, the one test command."""
import os
import re
from pathlib import Path

import deep_tile

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = ROOT / ".ci" / "run"
MAIN_JOB = ("pip install torch==2.13.0 && pip install -e . && "
            "python -m deep_tile explain 4096,7168,2048 --num-sms 132")
TEST_COMMAND = "python -m pytest -q tests"


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


def test_main_job_is_one_command_line():
    assert code_blocks(section("Main job")) == [MAIN_JOB]
    assert "`python benchmarks/bench_fp8_gemm.py`" in section("Main job")


def test_tests_section_has_one_command_and_ci_runs_it():
    assert code_blocks(section("Tests")) == [TEST_COMMAND]
    commands = [line.strip() for line in CI.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert TEST_COMMAND in commands, ".ci/run must run the README's test command verbatim"
    assert os.access(CI, os.X_OK), ".ci/run must be executable"
    assert "set -euo pipefail" in commands


def test_readme_commands_name_real_things():
    assert (ROOT / "benchmarks" / "bench_fp8_gemm.py").is_file()
    assert (ROOT / "tools" / "device_run.sh").is_file()
    assert (ROOT / "benchmarks" / "RESULTS.md").is_file()
    for name in re.findall(r"python -m deep_tile (\w+)", README):
        assert name in ("explain", "warmup"), name
