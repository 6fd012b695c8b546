"""``python -m deep_tile warmup``: selector-driven grouping, the CLI, and a real cache fill (no GPU)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compiler_params

from deep_tile import env
from deep_tile.gemm import warmup
from deep_tile.__main__ import main
from deep_tile.errors import CompileError
from deep_tile.jit import cache, compiler
from deep_tile.select import select_config
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.gemm.checks import check_grouped_problem
from deep_tile.kernels import fp8_gemm

ROOT = Path(__file__).resolve().parents[1]
NUM_SMS = 132
# Two shapes with the same (N, K) and different M that select the same kernel, plus one other.
SAME_NK = [(4096, 7168, 2048), (4000, 7168, 2048)]
OTHER = (64, 2112, 7168)
SHAPES = SAME_NK + [OTHER]
LINE = re.compile(r"^(?P<shapes>[\d, ]+) -> (?P<label>.+): (?P<status>cache hit|cache miss), (?P<secs>[\d.]+)s$")

COMPILERS = compiler_params()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No DEEP_TILE_* variable set (except DEEP_TILE_NVCC); the cache in tmp_path."""
    for name in env.REGISTRY:
        if name.startswith("DEEP_TILE_") and name != "DEEP_TILE_NVCC":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "cache"))


def expected_groups(shapes) -> dict:
    """label -> shapes, from the selector itself (so the test follows selector changes)."""
    groups = {}
    for shape in shapes:
        groups.setdefault(select_config(Problem(*shape), NUM_SMS).label, []).append(shape)
    return groups


def run_cli(*args, cache_dir: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not (k.startswith("DEEP_TILE_") and k != "DEEP_TILE_NVCC")}
    environ["DEEP_TILE_CACHE_DIR"] = str(cache_dir)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "deep_tile", "warmup", *args], capture_output=True, text=True,
                          env=environ, timeout=600)


def parse_lines(stdout: str) -> dict:
    """label -> (shapes, status) of the per-kernel lines."""
    found = {}
    for line in stdout.splitlines():
        if match := LINE.match(line):
            shapes = [tuple(int(v) for v in s.split(",")) for s in match["shapes"].split()]
            found[match["label"]] = (shapes, match["status"])
    return found


def test_the_chosen_shapes_exercise_grouping():
    groups = expected_groups(SHAPES)
    assert len(groups) == 2, f"test shapes no longer share/split kernels as intended: {groups}"


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILERS)
def test_warmup_fills_the_cache_then_hits(tmp_path, name):
    cache_dir = tmp_path / f"cache-{name}"
    args = [arg for shape in SHAPES for arg in ("--shape", ",".join(map(str, shape)))]
    args += ["--num-sms", str(NUM_SMS), "--compiler", name]
    groups = expected_groups(SHAPES)

    first = run_cli(*args, cache_dir=cache_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = parse_lines(first.stdout)
    assert {label: shapes for label, (shapes, _) in lines.items()} == groups, first.stdout
    assert {status for _, status in lines.values()} == {"cache miss"}, first.stdout
    assert f"compiler {name} " in first.stdout and str(cache_dir / "kernels") in first.stdout
    assert f"{len(groups)} kernels for {len(SHAPES)} shapes: {len(groups)} compiled, 0 cache hits" in first.stdout
    assert len(list(cache_dir.glob("kernels/*/*/kernel.cubin"))) == len(groups)

    second = run_cli(*args, cache_dir=cache_dir)
    assert second.returncode == 0, second.stdout + second.stderr
    lines = parse_lines(second.stdout)
    assert {label: status for label, (_, status) in lines.items()} == {label: "cache hit" for label in groups}
    assert f"{len(groups)} kernels for {len(SHAPES)} shapes: 0 compiled, {len(groups)} cache hits" in second.stdout
    assert len(list(cache_dir.glob("kernels/*/*/kernel.cubin"))) == len(groups)


# ---- in process: planning, arguments, errors (no compiler needed) ----------------------------

def test_plan_groups_by_kernel_and_drops_repeats():
    kernels = warmup.plan(SHAPES + [SAME_NK[0]], NUM_SMS)
    assert [list(k.shapes) for k in kernels] == list(expected_groups(SHAPES).values())
    for kernel in kernels:
        assert dict(kernel.defines) == kernel.config.defines()


def test_plan_adds_the_watchdog_define_like_get_kernel(monkeypatch):
    monkeypatch.setenv("DEEP_TILE_WATCHDOG", "1")
    (kernel,) = warmup.plan([OTHER], NUM_SMS)
    assert dict(kernel.defines) == {**kernel.config.defines(), "DT_WATCHDOG": 1}


@pytest.mark.parametrize("shape,error,message", [
    ((64, 100, 128), ValueError, "warmup: n must be a positive multiple of 8; got 100"),
    ((64, 128, 100), ValueError, "warmup: k must be a positive multiple of 16; got 100"),
    ((-1, 128, 128), ValueError, "warmup: m must be an int >= 0; got -1"),
    ((64, 128), ValueError, "warmup: a shape must be three ints (m, n, k); got (64, 128)"),
    ((64, 128.0, 128), TypeError, "warmup: n must be an int; got 128.0 (float)"),
])
def test_check_shape_is_fp8_gemms_check(shape, error, message):
    with pytest.raises(error) as info:
        warmup.check_shape(shape)
    assert str(info.value) == message


def test_m_zero_needs_no_kernel():
    assert warmup.check_shape((0, 128, 128)) == (0, 128, 128)
    assert warmup.plan([(0, 2112, 7168)], NUM_SMS) == []
    assert [k.shapes for k in warmup.plan([(0, 2112, 7168), OTHER], NUM_SMS)] == [(OTHER,)]


def test_plan_checks_num_sms():
    with pytest.raises(ValueError, match=r"^warmup: num_sms must be a positive int; got 0$"):
        warmup.plan([OTHER], 0)


def test_cli_rejects_bad_arguments(capsys):
    assert main(["warmup", "--shape", "64,100,128", "--num-sms", "132"]) == 2
    assert capsys.readouterr().err.endswith(": error: warmup: n must be a positive multiple of 8; got 100\n")
    assert main(["warmup", "--shape", "-64,128,128", "--num-sms", "132"]) == 2
    assert "warmup: m must be an int >= 0; got -64" in capsys.readouterr().err
    assert main(["warmup", "--shape", "64,128,128", "--num-sms", "0"]) == 2
    assert "warmup: num_sms must be a positive int; got 0" in capsys.readouterr().err
    assert main(["warmup", "--num-sms", "132"]) == 2
    assert "warmup: give at least one --shape M,N,K or --grouped" in capsys.readouterr().err
    assert main(["warmup", "--grouped", "masked,0,256,4096,7168"]) == 2
    assert "warmup: num_groups must be at least 1; got 0" in capsys.readouterr().err
    assert main(["warmup", "--grouped", "sparse,4,256,4096,7168"]) == 2
    assert "warmup: kind must be one of 'dense', 'contiguous', 'masked', 'offsets', 'k_grouped', 'psum'; got 'sparse'" in capsys.readouterr().err
    assert main(["warmup", "--grouped", "contiguous,4,256,4096,7168,64"]) == 2
    assert "expected_m is the masked kind's hint" in capsys.readouterr().err
    for argv in (["warmup", "--shape", "1,2"], ["warmup", "--shape", "64,128,128", "--compiler", "gcc"],
                 ["warmup", "--shape", "64,128,128", "--num-sms", "many"], ["warmup", "--grouped", "masked,4,256"],
                 ["warmup", "--grouped", "masked,4,256,x,7168"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv


def test_cli_lists_m_zero_shapes_without_building(monkeypatch, capsys):
    monkeypatch.setattr(cache, "get_cubin", lambda *args, **kwargs: pytest.fail("nothing should be built"))
    monkeypatch.setattr(compiler, "compiler_version", lambda name: "1.0")
    assert main(["warmup", "--shape", "0,2112,7168", "--num-sms", "132", "--compiler", "nvrtc"]) == 0
    out = capsys.readouterr().out
    assert "warmup: 1 shape on 132 SMs" in out
    assert "0,2112,7168 -> no kernel: M=0 launches nothing" in out
    assert re.search(r"^0 kernels for 1 shape: 0 compiled, 0 cache hits, 0 errors in ", out, re.M), out


def test_cli_reports_a_failed_build_and_goes_on(monkeypatch, capsys):
    built = []

    def fake_get_cubin(entry, defines, kernel_name, *, compiler=None):
        built.append(defines["DT_BLOCK_M"])
        if len(built) == 1:
            raise CompileError("boom")
        return b"\x7fELF"

    monkeypatch.setattr(cache, "get_cubin", fake_get_cubin)
    monkeypatch.setattr(compiler, "compiler_version", lambda name: "1.0")
    argv = ["warmup", "--num-sms", "132", "--compiler", "nvrtc"]
    argv += [arg for shape in SHAPES for arg in ("--shape", ",".join(map(str, shape)))]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert len(built) == 2
    assert ": error, " in out and "boom" in err
    assert re.search(r"^2 kernels for 3 shapes: \d+ compiled, 0 cache hits, 1 error in ", out, re.M), out


def test_get_cubin_rejects_an_unknown_compiler():
    with pytest.raises(ValueError, match="nvrtc, nvcc.*'gcc'"):
        cache.get_cubin("fp8_gemm_sm90", {}, "deep_tile_fp8_gemm_sm90", compiler="gcc")


def test_unusable_cache_dir_is_reported_once(monkeypatch, capsys, tmp_path):
    """Every kernel fails the same way: one message, every kernel counted as an error, exit 1."""
    (tmp_path / "blocker").write_text("a regular file: even root cannot make a directory below it")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    monkeypatch.setattr(compiler, "compiler_version", lambda name: "1.0")
    monkeypatch.setattr(warmup, "_reported_unusable", set())
    monkeypatch.setattr(compiler, "compile_cubin", lambda *a, **k: pytest.fail("compiled into an unusable cache"))
    argv = ["warmup", "--num-sms", "132", "--compiler", "nvrtc", "--shape", "128,256,512"]
    argv += [arg for shape in SHAPES for arg in ("--shape", ",".join(map(str, shape)))]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert err.count("is not usable") == 1 and err.count("DEEP_TILE_CACHE_DIR") == 1, err
    assert str(tmp_path / "blocker" / "cache") in err
    kernels = len(warmup.plan([(128, 256, 512)] + SHAPES, NUM_SMS))
    assert kernels >= 2 and out.count(": error, ") == kernels, out
    assert re.search(rf"^{kernels} kernels for 4 shapes: 0 compiled, 0 cache hits, {kernels} errors in ", out, re.M), out
    results = [warmup.build(kernel, "nvrtc") for kernel in warmup.plan(SHAPES, NUM_SMS)]
    assert all(r.status == "error" and r.cache_unusable and r.error == "" for r in results)  # said once already


def test_bad_env_value_fails_warmup_before_writing(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("DEEP_TILE_DEBUG", "maybe")
    monkeypatch.setattr(compiler, "compiler_version", lambda name: "1.0")
    # an error of the environment, not of the arguments: status 1, as the command line documents
    assert main(["warmup", "--num-sms", "132", "--compiler", "nvrtc", "--shape", "128,256,512"]) == 1
    assert "environment variable DEEP_TILE_DEBUG must be" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


GROUPED = [check_grouped_problem("warmup", "contiguous", 8192, 4096, 7168, 8),
           check_grouped_problem("warmup", "masked", 256, 6144, 7168, 32, 192),
           check_grouped_problem("warmup", "offsets", 4096, 4096, 7168, 64)]


def test_plan_builds_the_grouped_kernels_the_launcher_runs():
    """Each grouped problem gets the selector's config of its kind, in the a_scale variant the
    launcher builds for the TMA-aligned layout (the offsets kind: row-major, the only one it reads)."""
    kernels = warmup.plan([OTHER] + GROUPED + [GROUPED[1]], NUM_SMS)
    assert [k.shapes for k in kernels] == [(OTHER,)] + [(p,) for p in GROUPED]
    for kernel, problem in zip(kernels[1:], GROUPED):
        config = kernel.config
        assert config.problem_kind is problem.kind
        assert config.a_scale_row_major == (problem.kind is ProblemKind.GROUPED_OFFSETS)
        expected = select_config(problem, NUM_SMS).for_problem(
            problem.with_a_scale_row_major() if config.a_scale_row_major else problem)
        assert config == expected and dict(kernel.defines) == expected.defines()
        assert dict(kernel.defines)["DT_PROBLEM_KIND"] == fp8_gemm.PROBLEM_KIND_CODES[problem.kind]
    empty = check_grouped_problem("warmup", "masked", 0, 4096, 7168, 4, 0)
    assert warmup.plan([empty], NUM_SMS) == []


def test_build_asks_for_the_grouped_symbol(monkeypatch):
    asked = []
    monkeypatch.setattr(cache, "get_cubin", lambda entry, defines, symbol, compiler=None: asked.append(symbol))
    for kernel in warmup.plan([OTHER, GROUPED[0]], NUM_SMS):
        assert warmup.build(kernel).status == "uncached"
    assert asked == [fp8_gemm.SYMBOL, fp8_gemm.GROUPED_SYMBOL]


def test_cli_warms_grouped_problems(monkeypatch, capsys):
    built = []
    monkeypatch.setattr(cache, "get_cubin", lambda entry, defines, symbol, compiler=None: built.append(defines))
    monkeypatch.setattr(compiler, "compiler_version", lambda name: "1.0")
    argv = ["warmup", "--grouped", "masked,32,256,6144,7168,192", "--grouped", "offsets,64,4096,4096,7168",
            "--grouped", "contiguous,4,0,128,128", "--shape", "4096,7168,2048", "--num-sms", "132", "--compiler", "nvrtc"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warmup: 4 shapes on 132 SMs" in out
    assert "contiguous,4,0,128,128 -> no kernel: M=0 launches nothing" in out
    for problem, text in ((GROUPED[1], "masked,32,256,6144,7168,192"), (GROUPED[2], "offsets,64,4096,4096,7168")):
        (kernel,) = warmup.plan([problem], NUM_SMS)
        assert f"{text} -> {kernel.config.label}: compiled, not cached" in out, out
    assert len(built) == 3


def test_plan_takes_each_problem_as_its_call_does():
    """A K-grouped problem gets its own rule's kernel, an output variant its variant's (the configs
    get_problem_config gives the calls), and a plain dense Problem is listed as its shape."""
    from deep_tile.gemm.checks import check_grouped_problem
    from deep_tile.gemm.problem import Problem
    from deep_tile.select.api import get_problem_config

    k_grouped = check_grouped_problem("warmup", "k_grouped", 4096, 7168, 8192, 8).with_output("float32", "out")
    wgrad = Problem(2112, 7168, 4096, b_scale_1d=True).with_output("float32", "out")
    grouped = check_grouped_problem("warmup", "contiguous", 8192, 4096, 7168, 8).with_output("float32", "bfloat16")
    for problem in (k_grouped, wgrad, grouped):
        (kernel,) = warmup.plan([problem], NUM_SMS)
        assert kernel.config == warmup.launched_config(get_problem_config(problem, NUM_SMS), problem)
        assert kernel.shapes == (problem,)
    assert warmup.plan([k_grouped], NUM_SMS)[0].config.staged_epilogue  # the K-grouped rule's, not the model's
    (kernel,) = warmup.plan([Problem(64, 2112, 7168)], NUM_SMS)
    assert kernel.shapes == ((64, 2112, 7168),)


def test_the_command_line_warms_output_variants(tmp_path, monkeypatch, capsys):
    """``--out``, ``--c`` and ``--1d1d`` apply to every shape of the run and are printed with it;
    a bad combination is refused with the selector's message."""
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warmup, "build", lambda kernel, compiler=None: warmup.WarmupResult(kernel, "hit", 0.0))
    assert main(["warmup", "--shape", "2112,7168,4096", "--grouped", "k_grouped,4,4096,7168,8192", "--out", "float32",
                 "--c", "out", "--num-sms", str(NUM_SMS)]) == 0
    out = capsys.readouterr().out
    assert "2112,7168,4096 --out float32 --c out -> " in out and " f32 +=: " in out
    assert "k_grouped,4,4096,7168,8192 --out float32 --c out -> " in out and "staged" in out
    assert main(["warmup", "--grouped", "contiguous,4,512,256,256", "--1d1d", "--num-sms", str(NUM_SMS)]) == 2
    assert "b_scale_1d describes the dense 1D1D GEMM" in capsys.readouterr().err
