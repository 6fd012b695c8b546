"""deep_tile.gemm.plan_index: stored launch plans are checked before use; a damaged record (truncated,
garbage, empty, missing, wrong types, a flipped value) is ignored by a fresh process and rewritten."""
import json
import os
from pathlib import Path

import pytest

from deep_tile import env, json_records
from deep_tile.gemm import plan_index
from deep_tile.kernels import fp8_gemm as family
from deep_tile.native import bridge
from deep_tile.gemm.problem import Problem
from deep_tile.select import select_config
from conftest import run_python

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (64, 2112, 7168)
NUM_SMS = 132


class _FakePlan:
    """What deep_tile.gemm.planner.plan returns, without a device (no kernel, no cluster fitting)."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.config = select_config(problem, NUM_SMS)
        self.grid, self.block = family.launch_grid(self.config, problem.m, problem.n), self.config.num_threads
        self.smem, self.cluster = self.config.smem_bytes, family.cluster_size(self.config)
        self.args = family.argument_specs(self.config, problem)


def real_record() -> dict:
    """The record the native bridge stores for :data:`SHAPE`."""
    return bridge._record(_FakePlan(Problem(*SHAPE)))


# A fresh process: look the plan up; when absent or damaged, store it (as bridge.plan does).
FRESH = r"""
import json
from deep_tile.gemm import plan_index
from deep_tile.gemm.problem import Problem
plan_index._fingerprint = lambda device_index: ("ab" * 32, 0)  # no device here
record = json.loads({record!r})
found = plan_index.lookup(0, Problem(64, 2112, 7168), 132)
if found is None:
    plan_index.store(0, Problem(64, 2112, 7168), 132, record)
print(json.dumps({{"found": found is not None, "equal": found == record or found is None}}))
"""


@pytest.fixture
def plans(tmp_path, monkeypatch):
    """An empty cache in tmp_path/cache and the fingerprint a fresh process uses; yields the
    record's path."""
    for name in env.REGISTRY:
        if name.startswith("DEEP_TILE_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(plan_index, "_fingerprint", lambda device_index: ("ab" * 32, 0))
    path, _ = plan_index._path(0, Problem(*SHAPE), NUM_SMS)
    return path


def test_every_problem_field_that_picks_a_kernel_names_its_own_record(plans):
    """Problems that differ only in what selects another kernel (a_scale variant, output and C
    types, 1D1D, kind, groups) are stored apart: a record of one is never found for the other (the
    native path of the training ops looks their plans up here)."""
    from deep_tile.gemm.problem import ProblemKind

    base = Problem(*SHAPE)
    problems = [base, base.with_a_scale_row_major(), base.with_output("float32"),
                base.with_output("float32", "out"), base.with_output("float32", "bfloat16"),
                base.with_output("bfloat16", "float32"), base.with_output("float32").with_b_scale_1d(),
                base.with_b_scale_1d(),
                Problem(*SHAPE, kind=ProblemKind.K_GROUPED, num_groups=4, b_scale_1d=True, out_dtype="float32"),
                Problem(*SHAPE, kind=ProblemKind.K_GROUPED, num_groups=4, b_scale_1d=True, out_dtype="float32",
                        c_dtype="out"),
                Problem(*SHAPE, kind=ProblemKind.K_GROUPED, num_groups=8, b_scale_1d=True, out_dtype="float32")]
    assert len({p.key() for p in problems}) == len(problems)
    assert len({plan_index._path(0, p, NUM_SMS)[0] for p in problems}) == len(problems)
    assert plan_index._path(0, base, NUM_SMS)[0] == plans  # the default problem keeps its name


def run_fresh(cache_dir: Path) -> dict:
    child_env = dict(os.environ, DEEP_TILE_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    result = run_python(FRESH.format(record=json.dumps(real_record())), timeout=60, env=child_env)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_real_records_are_valid_and_round_trip(plans):
    record = real_record()
    assert plan_index.valid_record(record)
    assert plan_index.lookup(0, Problem(*SHAPE), NUM_SMS) is None
    plan_index.store(0, Problem(*SHAPE), NUM_SMS, record)
    assert plan_index.lookup(0, Problem(*SHAPE), NUM_SMS) == record
    assert json.loads(plans.read_text())[json_records.CHECKSUM]


@pytest.mark.parametrize("change", [
    {"grid": "132"}, {"grid": 0}, {"smem": -1}, {"cluster": 1.5}, {"args": []}, {"args": [[0, 0, 0]]},
    {"args": [[2, "4"]]}, {"args": [[9, 1]]}, {"args": [[5, True]]}, {"args": None},
    {"defines": {}}, {"defines": {"DT_BLOCK_M": [64]}}, {"label": None}, {"grid": None},
])
def test_records_of_the_wrong_types_are_refused(change):
    record = {**real_record(), **change}
    if change.get("grid", 1) is None:
        del record["grid"]
    assert not plan_index.valid_record(record)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty", "missing", "directory", "wrong_types",
                                 "flipped_value", "no_checksum", "folder_is_a_file"])
def test_damaged_plan_record_is_ignored_and_rewritten_by_a_fresh_process(plans, how):
    record = real_record()
    plan_index.store(0, Problem(*SHAPE), NUM_SMS, record)
    text = plans.read_text()
    stored = json.loads(text)
    if how == "truncated":
        plans.write_text(text[: len(text) // 2])
    elif how == "garbage":
        plans.write_bytes(os.urandom(len(text)))
    elif how == "empty":
        plans.write_text("")
    elif how == "missing":
        plans.unlink()
    elif how == "directory":
        plans.unlink()
        (plans / "child").mkdir(parents=True)
    elif how == "wrong_types":
        body = {**record, "grid": "132"}
        plans.write_text(json.dumps({**body, json_records.CHECKSUM: json_records._digest(body)}))
    elif how == "flipped_value":
        plans.write_text(json.dumps({**stored, "grid": stored["grid"] + 1}))  # valid JSON, valid types
    elif how == "no_checksum":
        plans.write_text(json.dumps(record))  # as an older deep_tile wrote it
    else:
        plans.unlink()
        plans.parent.rmdir()
        plans.parent.write_text("a file where the fingerprint's folder belongs")
    assert run_fresh(plans.parents[2]) == {"found": False, "equal": True}
    assert plan_index.lookup(0, Problem(*SHAPE), NUM_SMS) == record  # rewritten whole
    assert run_fresh(plans.parents[2]) == {"found": True, "equal": True}


def test_unusable_cache_dir_only_costs_speed(plans, monkeypatch, tmp_path):
    (tmp_path / "blocker").write_text("x")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    assert plan_index.lookup(0, Problem(*SHAPE), NUM_SMS) is None
    plan_index.store(0, Problem(*SHAPE), NUM_SMS, real_record())  # not raised
    assert plan_index.lookup(0, Problem(*SHAPE), NUM_SMS) is None
