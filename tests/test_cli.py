"""The command line (python -m deep_tile, deep-tile): shapes and SM counts checked as fp8_gemm checks
them, negative values taken as values, exit codes, its own name, plurals."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deep_tile.__main__ import BROKEN_PIPE_STATUS, main, plural, prog_name
from deep_tile.checks import check_fp8_gemm_args
from deep_tile.common import SCALE_GROUP, ceil_div

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "deep-tile"


def run(*argv: str, script=None) -> subprocess.CompletedProcess:
    """Run the command line in a child process (``python -m deep_tile``, or ``script``)."""
    command = [str(script)] if script else [sys.executable, "-m", "deep_tile"]
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(command + list(argv), cwd=ROOT, capture_output=True, text=True, timeout=120, env=environ)


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
