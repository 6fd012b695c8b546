"""The command line (python -m deep_tile, deep-tile): shapes and SM counts checked as fp8_gemm checks
them, negative values taken as values, exit codes, its own name, plurals, and errors of the
environment (no CUDA stack, a bad DEEP_TILE_* value, an unusable cache directory, no usable GPU)
reported in one line with exit status 1, their traceback only with DEEP_TILE_DEBUG=1."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deep_tile.__main__ import BROKEN_PIPE_STATUS, main, plural, prog_name
from deep_tile.errors import CompileError, LaunchError
from deep_tile.gemm.checks import check_fp8_gemm_args
from deep_tile.common import SCALE_GROUP, ceil_div

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "deep-tile"


# Runs ``python -m deep_tile`` (argv from the command line) with ``import cuda`` failing as it does
# where no CUDA stack is installed (ModuleNotFoundError), whether or not one is installed here.
WITHOUT_CUDA = """
import importlib.abc, runpy, sys

class NoCuda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "cuda" or name.startswith("cuda."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoCuda())
runpy.run_module("deep_tile", run_name="__main__", alter_sys=True)
"""


def run(*argv: str, script=None, without_cuda=False, env=None) -> subprocess.CompletedProcess:
    """Run the command line in a child process (``python -m deep_tile``, or ``script``), with
    ``env`` added to this environment (its DEEP_TILE_* variables left out), optionally as if no
    CUDA stack were installed."""
    if script:
        command = [str(script)]
    elif without_cuda:
        command = [sys.executable, "-c", WITHOUT_CUDA]
    else:
        command = [sys.executable, "-m", "deep_tile"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEEP_TILE_")}
    environ.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {}))
    return subprocess.run(command + list(argv), cwd=ROOT, capture_output=True, text=True, timeout=120, env=environ)


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    """``result`` exited 1 with exactly one line on stderr, ``python -m deep_tile: error: ...``,
    holding each of ``words``, and no traceback. Returns that line."""
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1, f"exit {result.returncode}, stderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout
    assert lines[0].startswith("python -m deep_tile") and ": error" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def assert_traceback(result: subprocess.CompletedProcess, error: str) -> None:
    """``result`` failed (exit 1) with a traceback that ends in ``error`` (DEEP_TILE_DEBUG=1)."""
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last):" in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(error), result.stderr


def fp8_gemm_error(m: int, n: int, k: int) -> str:
    """What fp8_gemm's argument check says about CPU operands of problem ``m x n x k``."""
    a, b = torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    a_scale = torch.ones(m, ceil_div(k, SCALE_GROUP))
    b_scale = torch.ones(ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP))
    with pytest.raises(ValueError) as info:
        check_fp8_gemm_args(a, a_scale, b, b_scale, None)
    return str(info.value)


@pytest.mark.parametrize("shape", ["10,12,100", "64,2112,7170"])
def test_explain_rejects_what_fp8_gemm_rejects_with_its_message(shape):
    result = run("explain", shape)
    assert result.returncode == 2 and result.stdout == ""
    expected = fp8_gemm_error(*map(int, shape.split(","))).replace("fp8_gemm: ", "explain: ", 1)
    assert result.stderr == f"python -m deep_tile: error: {expected}\n"


def test_a_negative_shape_is_a_value_not_an_option():
    result = run("explain", "-1,8,16")
    assert result.returncode == 2
    assert result.stderr == "python -m deep_tile: error: explain: m must be an int >= 0; got -1\n"
    result = run("explain", "-1,8,16", "--num-sms", "132")
    assert result.returncode == 2 and "explain: m must be an int >= 0; got -1" in result.stderr


def test_explain_m_zero_succeeds():
    result = run("explain", "0,2112,7168")
    assert result.returncode == 0, result.stderr
    assert "M=0 N=2112 K=7168" in result.stdout and "without launching a kernel" in result.stdout


def test_num_sms_errors_exit_2_with_the_librarys_message(capsys):
    assert main(["explain", "64,2112,7168", "--num-sms", "0"]) == 2
    assert capsys.readouterr().err.endswith(": error: explain: num_sms must be a positive int; got 0\n")
    assert main(["explain", "64,2112,7168", "--num-sms", "-3"]) == 2
    assert "explain: num_sms must be a positive int; got -3" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["explain", "64,2112,7168", "--num-sms", "lots"])
    assert info.value.code == 2
    assert "argument --num-sms: expected an int; got 'lots'" in capsys.readouterr().err


def test_malformed_shapes_are_usage_errors(capsys):
    for shape in ("64,2112", "64,2112,7168,1", "64,x,7168", "1.5,8,16"):
        with pytest.raises(SystemExit) as info:
            main(["explain", shape])
        assert info.value.code == 2, shape
        err = capsys.readouterr().err
        assert "usage: " in err and "shape must be M,N,K with three ints" in err, err


def test_prog_name_follows_the_console_script(monkeypatch, capsys):
    assert prog_name("/venv/bin/deep-tile") == "deep-tile"
    assert prog_name("/x/deep_tile/__main__.py") == "python -m deep_tile"
    monkeypatch.setattr(sys, "argv", ["/venv/bin/deep-tile", "explain", "8,12,16"])
    assert main() == 2
    assert capsys.readouterr().err == "deep-tile: error: explain: n must be a positive multiple of 8; got 12\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: deep-tile ")


@pytest.mark.skipif(not SCRIPT.is_file(), reason="the deep-tile console script is not installed (pip install -e .)")
def test_console_script_names_itself():
    result = run("--help", script=SCRIPT)
    assert result.returncode == 0 and result.stdout.startswith("usage: deep-tile "), result.stdout
    result = run("explain", "10,12,100", script=SCRIPT)
    assert result.returncode == 2
    assert result.stderr == "deep-tile: error: explain: n must be a positive multiple of 8; got 12\n"


def test_plural():
    assert [plural(n, "shape") for n in (0, 1, 2)] == ["0 shapes", "1 shape", "2 shapes"]
    assert plural(1, "cache hit") == "1 cache hit" and plural(3, "error") == "3 errors"


def test_a_closed_pipe_ends_quietly():
    """`python -m deep_tile explain ... | head -2`: the reader has gone before the command writes;
    it exits with 128 + SIGPIPE and no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "deep_tile", "explain", "4096,7168,2048"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child has written anything
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == BROKEN_PIPE_STATUS == 141, stderr.decode()
    assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr, stderr.decode()


WARMUP = ("warmup", "--shape", "64,2112,7168", "--num-sms", "132")


@pytest.mark.parametrize("command", [WARMUP, ("warmup", "--grouped", "masked,4,256,4096,7168,192")])
def test_no_cuda_stack_is_one_line_that_names_the_install(command):
    line = assert_one_line_error(run(*command, without_cuda=True), "No module named 'cuda'",
                                 'pip install "deep_tile[cu13]"', 'pip install "deep_tile[cu12]"')
    assert "MissingCudaStackError" not in line  # the message, not the exception's repr


def test_no_cuda_stack_leaves_explain_working():
    """explain needs no CUDA stack: the selector is plain Python."""
    result = run("explain", "64,2112,7168", "--num-sms", "132", without_cuda=True)
    assert result.returncode == 0 and "M=64 N=2112 K=7168" in result.stdout, result.stderr


def test_no_cuda_stack_with_debug_shows_the_traceback():
    result = run(*WARMUP, without_cuda=True, env={"DEEP_TILE_DEBUG": "1"})
    assert_traceback(result, "deep_tile.cuda_stack.MissingCudaStackError: deep_tile needs cuda-bindings")


@pytest.mark.parametrize("name, value", [("DEEP_TILE_COMPILER", "clang"), ("DEEP_TILE_DISABLE_CACHE", "maybe"),
                                         ("DEEP_TILE_DEBUG", "loud")])
def test_a_bad_environment_value_is_one_line_that_names_the_variable(tmp_path, name, value):
    env = {"DEEP_TILE_CACHE_DIR": str(tmp_path / "cache"), name: value}
    assert_one_line_error(run(*WARMUP, env=env), f"environment variable {name} must be", repr(value))
    assert not (tmp_path / "cache").exists()  # nothing written


def test_a_bad_environment_value_with_debug_shows_the_traceback(tmp_path):
    env = {"DEEP_TILE_CACHE_DIR": str(tmp_path / "cache"), "DEEP_TILE_COMPILER": "clang", "DEEP_TILE_DEBUG": "1"}
    assert_traceback(run(*WARMUP, env=env), "deep_tile.env.EnvValueError: environment variable DEEP_TILE_COMPILER")


@pytest.mark.parametrize("command", [WARMUP, WARMUP + ("--shape", "4096,7168,2048", "--shape", "128,4096,7168")])
def test_an_unusable_cache_directory_is_one_line_that_names_the_variable(tmp_path, command):
    """A file where the cache directory belongs (root may write anywhere, so a read-only directory
    would not fail here): one line however many kernels, naming DEEP_TILE_CACHE_DIR."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run(*command, env={"DEEP_TILE_CACHE_DIR": str(blocker / "cache")})
    line = assert_one_line_error(result, "DEEP_TILE_CACHE_DIR", str(blocker / "cache"))
    assert "kernel cache directory" in line and "Not a directory" in line
    assert " 0 compiled" in result.stdout  # the summary still says what happened
    assert blocker.read_text() == ""


def test_environment_errors_in_process(monkeypatch, capsys):
    """A deep_tile error of the GPU or driver (here from the SM count), a multi-line one (a compiler
    log) and an OSError: one line each, exit 1; with DEEP_TILE_DEBUG=1 they propagate."""
    from deep_tile import device

    for error in (LaunchError("device_facts: no CUDA device is available"),
                  CompileError("NVRTC failed", command="nvrtc -arch=sm_90a", log="line 1\nline 2"),
                  PermissionError(13, "Permission denied", "/cache/kernels")):
        def fail():
            raise error
        monkeypatch.setattr(device, "get_num_sms", fail)
        monkeypatch.delenv("DEEP_TILE_DEBUG", raising=False)
        assert main(["warmup", "--shape", "64,2112,7168"]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("python -m deep_tile: error: "), err
        assert str(error).splitlines()[0] in err
        multi_line = len(str(error).splitlines()) > 1
        assert ("DEEP_TILE_DEBUG=1 prints the rest" in err) == multi_line, err
        monkeypatch.setenv("DEEP_TILE_DEBUG", "1")
        with pytest.raises(type(error)):
            main(["warmup", "--shape", "64,2112,7168"])


def test_a_bug_keeps_its_traceback(monkeypatch):
    """An error that is not the environment's (here a KeyError) is a bug: it is not swallowed."""
    from deep_tile import device

    def fail():
        raise KeyError("bug")
    monkeypatch.setattr(device, "get_num_sms", fail)
    with pytest.raises(KeyError):
        main(["warmup", "--shape", "64,2112,7168"])


def test_explain_describes_the_output_variant():
    """``--out``, ``--c`` and ``--1d1d`` pick the config the training calls get (the in-place
    weight gradient's one-sub-tile rule) and the account names the variant."""
    result = run("explain", "2112,7168,4096", "--out", "float32", "--c", "out", "--1d1d", "--num-sms", "132")
    assert result.returncode == 0, result.stderr
    assert "out[M, N] (fp32) = A[M, K] @ B[N, K]^T (fp8 e4m3), accumulated in place" in result.stdout
    assert "B scaled per row (1D1D)" in result.stdout and "f32 1d1d +=" in result.stdout
    result = run("explain", "8192,4096,7168", "--kind", "contiguous", "--groups", "8", "--out", "float32", "--c",
                 "bfloat16", "--num-sms", "132")
    assert result.returncode == 0 and "out (fp32), plus C (bf16)" in result.stdout and "f32 +c16" in result.stdout
    result = run("explain", "64,2112,7168", "--c", "half")
    assert result.returncode == 2 and "invalid choice: 'half'" in result.stderr
