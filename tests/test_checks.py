"""One shape contract: deep_tile.gemm.checks.check_problem_shape, as fp8_gemm, get_config, explain, warmup
and the command line see it; the num_sms check; deep_tile.common."""

import numpy as np
import pytest
import torch

from deep_tile import arch, device
from deep_tile.gemm import warmup
from deep_tile.__main__ import main
from deep_tile.gemm.checks import check_fp8_gemm_args, check_problem_shape
from deep_tile.common import SCALE_GROUP, align4, align_up, ceil_div
from deep_tile.select.api import explain, get_config
from conftest import run_python


# (m, n, k) -> the message after "<function>: "
BAD_SHAPES = [
    ((-1, 8, 16), "m must be an int >= 0; got -1"),
    ((10, 12, 128), "n must be a positive multiple of 8; got 12"),
    ((64, 2112, 7170), "k must be a positive multiple of 16; got 7170"),
    ((64, 0, 128), "n must be a positive multiple of 8; got 0"),
    ((64, 2112, 0), "k must be a positive multiple of 16; got 0"),
    ((64, -8, 128), "n must be a positive multiple of 8; got -8"),
]


def fp8_gemm_message(m: int, n: int, k: int) -> str:
    """The message of fp8_gemm's argument check for CPU tensors of problem m x n x k (m, n >= 0)."""
    g = SCALE_GROUP
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    b = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    a_scale = torch.ones(m, ceil_div(k, g))
    b_scale = torch.ones(ceil_div(n, g), ceil_div(k, g))
    with pytest.raises(ValueError) as info:
        check_fp8_gemm_args(a, a_scale, b, b_scale, None)
    return str(info.value)


@pytest.mark.parametrize("shape,message", BAD_SHAPES)
def test_check_problem_shape_messages(shape, message):
    with pytest.raises(ValueError) as info:
        check_problem_shape("f", *shape)
    assert str(info.value) == f"f: {message}"


@pytest.mark.parametrize("shape,message", [s for s in BAD_SHAPES if min(s[0][:2]) >= 0])
def test_fp8_gemm_gives_the_same_message(shape, message):
    assert fp8_gemm_message(*shape) == f"fp8_gemm: {message}"


@pytest.mark.parametrize("shape,message", BAD_SHAPES)
def test_every_entry_point_rejects_with_the_same_message(shape, message, capsys):
    for name, call in (("get_config", lambda: get_config(*shape)), ("explain", lambda: explain(*shape)),
                       ("warmup", lambda: warmup.check_shape(shape))):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == f"{name}: {message}"
    assert main(["explain", ",".join(map(str, shape))]) == 2
    assert capsys.readouterr().err.endswith(f": error: explain: {message}\n")


@pytest.mark.parametrize("bad,message", [(1.5, "m must be an int; got 1.5 (float)"),
                                         (True, "m must be an int; got True (bool)"),
                                         ("4", "m must be an int; got '4' (str)"),
                                         (None, "m must be an int; got None (NoneType)")])
def test_non_ints_are_type_errors(bad, message):
    with pytest.raises(TypeError) as info:
        check_problem_shape("f", bad, 8, 16)
    assert str(info.value) == f"f: {message}"


def test_accepted_shapes_come_back_as_ints():
    assert check_problem_shape("f", 0, 8, 16) == (0, 8, 16)
    shape = check_problem_shape("f", np.int64(64), torch.tensor(2112).item(), np.int32(7168))
    assert shape == (64, 2112, 7168) and all(type(v) is int for v in shape)


def test_fp8_gemm_accepts_m_zero_up_to_the_device_check():
    a = torch.zeros(0, 128, dtype=torch.float8_e4m3fn)
    b = torch.zeros(8, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="^fp8_gemm: a must be a CUDA tensor; got a tensor on cpu$"):
        check_fp8_gemm_args(a, torch.ones(0, 1), b, torch.ones(1, 1), None)


@pytest.fixture
def fake_h100(monkeypatch):
    """Pretend a 132-SM H100 is the current CUDA device."""
    facts = device.DeviceFacts(index=0, name="NVIDIA H100 80GB HBM3", num_sms=132, capability=(9, 0),
                               max_smem_per_block=arch.MAX_SMEM_PER_BLOCK, chip=arch.chip_facts("NVIDIA H100"))
    monkeypatch.setattr(device, "has_cuda", lambda: True)
    monkeypatch.setattr(device, "device_facts", lambda index=None: facts)
    return facts


def test_num_sms_is_bounded_by_the_device(fake_h100, capsys):
    assert device.check_num_sms("explain", 132) == 132
    message = "num_sms must be at most 132, the SM count of cuda:0 (NVIDIA H100 80GB HBM3); got 500"
    for func in (get_config, explain):
        with pytest.raises(ValueError) as info:
            func(64, 2112, 7168, num_sms=500)
        assert str(info.value) == f"{func.__name__}: {message}"
    assert main(["explain", "64,2112,7168", "--num-sms", "500"]) == 2
    assert capsys.readouterr().err.endswith(f": error: explain: {message}\n")
    assert main(["explain", "64,2112,7168", "--num-sms", "114"]) == 0
    assert "device: NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_without_a_device_num_sms_is_any_positive_int(monkeypatch):
    monkeypatch.setattr(device, "has_cuda", lambda: False)  # as on a CPU machine, also on a GPU one
    assert device.check_num_sms("f", 500) == 500
    with pytest.raises(ValueError, match=r"^f: num_sms must be a positive int; got 0$"):
        device.check_num_sms("f", 0)


def test_common_arithmetic():
    assert SCALE_GROUP == 128  # the DeepSeek-V3 format: 1x128 activation and 128x128 weight scales
    assert [ceil_div(v, 128) for v in (1, 128, 129, 7168)] == [1, 1, 2, 56]
    assert [align_up(v, 16) for v in (0, 1, 16, 17)] == [0, 16, 16, 32]
    assert [align4(v) for v in (0, 1, 4, 5, 4097)] == [0, 4, 4, 8, 4100]


def test_selection_modules_import_no_torch():
    code = ("import sys, deep_tile.gemm.checks, deep_tile.device, deep_tile.select.api\n"
            "deep_tile.gemm.checks.check_problem_shape('f', 4096, 7168, 2048)\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'cuda'))\n"
            "print(bad)\nsys.exit(1 if bad else 0)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_data_checks_off_skips_addresses_and_devices_only():
    """The fake implementations of the ops check meta/fake tensors with data_checks=False: the
    same messages for types, shapes and strides; no address, device or GPU check."""
    k = 256
    a = torch.empty(64, k + 8, dtype=torch.float8_e4m3fn, device="meta")[:, 1:k + 1]  # misaligned, odd stride
    b = torch.empty(128, k, dtype=torch.float8_e4m3fn, device="meta")
    a_scale, b_scale = torch.empty(64, 2, device="meta"), torch.empty(1, 2, device="meta")
    with pytest.raises(ValueError, match=r"^fp8_gemm: a row stride must be a multiple of 16 elements"):
        check_fp8_gemm_args(a, a_scale, b, b_scale, None, data_checks=False)
    a = torch.empty(64, k, dtype=torch.float8_e4m3fn, device="meta")
    assert check_fp8_gemm_args(a, a_scale, b, b_scale, None, data_checks=False).shape == (64, 128, 256)
    with pytest.raises(ValueError, match=r"^fp8_gemm: b_scale must have shape"):
        check_fp8_gemm_args(a, a_scale, b, b_scale[:, :1], None, data_checks=False)
    cpu = [torch.empty_like(t, device="cpu") for t in (a, a_scale, b, b_scale)]
    with pytest.raises(ValueError, match="^fp8_gemm: a must be a CUDA tensor; got a tensor on cpu$"):
        check_fp8_gemm_args(*cpu, None)
    assert check_fp8_gemm_args(*cpu, None, data_checks=False).shape == (64, 128, 256)


def test_layout_messages_are_unchanged():
    a = torch.zeros(64, 256, dtype=torch.float8_e4m3fn).t().contiguous().t()  # column-major
    b = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError) as info:
        check_fp8_gemm_args(a, torch.ones(64, 2), b, torch.ones(1, 2), None)
    assert str(info.value) == ("fp8_gemm: a must be contiguous along its last dimension (k); "
                               "got strides (1, 64)")


def symbolic_rows(tensors: dict, dynamic: set):
    """Fake tensors of ``tensors`` (name -> tensor) on one ShapeEnv: the first dimension of those
    named in ``dynamic`` symbolic (one symbol each, no duck sizing), every other size static."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = {}
    for name, t in tensors.items():
        sizes = [DimDynamic.DYNAMIC if i == 0 and name in dynamic else DimDynamic.STATIC for i in range(t.dim())]
        fakes[name] = mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes))
    return mode, fakes


@pytest.mark.parametrize("layout", ["row", "tma"])
def test_symbolic_m_is_not_specialised(layout):
    """A symbolic m (torch.compile / torch.export) comes back symbolic: the checks add no guard but
    equalities between the row counts, and make none of them a constant; n and k become ints."""
    a_scale = torch.empty(96, 5) if layout == "row" else torch.empty(5, align4(96)).t()[:96]
    tensors = {"a": torch.empty(96, 640, dtype=torch.float8_e4m3fn), "a_scale": a_scale,
               "b": torch.empty(384, 640, dtype=torch.float8_e4m3fn), "b_scale": torch.empty(3, 5),
               "out": torch.empty(96, 384, dtype=torch.bfloat16)}
    mode, fake = symbolic_rows(tensors, {"a", "a_scale", "out"})
    env = mode.shape_env
    rows = {t.shape[0].node.expr for name, t in fake.items() if name in ("a", "a_scale", "out")}
    assert all(s.is_symbol for s in rows) and len(rows) == 3  # before the checks: three symbols
    with mode:
        m, n, k = check_fp8_gemm_args(*fake.values(), data_checks=False).shape
    assert isinstance(m, torch.SymInt) and (n, k) == (384, 640) and type(n) is type(k) is int
    for guard in env.guards:  # only "these two row counts are equal"
        assert len(guard.expr.free_symbols) == 2 and guard.expr.free_symbols <= rows, guard
    assert not any(value.is_number for value in env.replacements.values()), env.replacements
    assert not env.var_to_range[next(iter(m.node.expr.free_symbols))].is_singleton()


def test_symbolic_m_shape_errors_keep_their_messages():
    tensors = {"a": torch.empty(96, 640, dtype=torch.float8_e4m3fn), "a_scale": torch.empty(95, 5),
               "b": torch.empty(384, 640, dtype=torch.float8_e4m3fn), "b_scale": torch.empty(3, 5)}
    expected = ("fp8_gemm: a_scale must have shape (m, ceil(k/128)) for a of shape (96, 640) = (96, 5); "
                "got (95, 5)")
    with pytest.raises(ValueError) as info:
        check_fp8_gemm_args(*tensors.values(), None)
    assert str(info.value) == expected  # the eager message
    mode, fake = symbolic_rows(tensors, {"a", "a_scale"})
    with mode, pytest.raises(ValueError) as info:
        check_fp8_gemm_args(*fake.values(), None, data_checks=False)
    assert str(info.value) == expected  # symbolic sizes shown as the values traced with
