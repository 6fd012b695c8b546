"""The least a small-M GEMM can take under the benchmarks' timer (GPU): beside deep_tile, DeepGEMM
and cuBLAS per-tensor, an empty kernel and a kernel that only reads B's bytes once.

    python benchmarks/probes/read_floor.py                          # M=64 x the six DeepSeek (N, K) pairs
    python benchmarks/probes/read_floor.py --shapes 64,2112,7168 --flush write read --json f.json

Both probes (benchmarks/probes/read_floor.cu) are launched through the driver like deep_tile's kernels.
`stream_read` reads the N x K bytes of B once with 4 CTAs of 512 threads per SM, four 16-byte
loads in flight per thread, and writes nothing: the weight stream without the GEMM's work, a
floor for a GEMM of that shape (which must read all of B) as far as this plain read kernel
reaches the memory's rate. Timed by testing.timing.bench_round_robin (shuffled round-robin,
sleep pad, CUDA events, median), with the L2 flush of ``--flush``: ``write`` (the
benchmarks' 256 MB write, which leaves the L2 full of dirty lines that the next kernel's misses
must write back) and/or ``read`` (a 256 MB read: a cold but clean L2).
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the user benchmarks
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/probes/

from bench_fp8_gemm import library_fns  # noqa: E402
from deep_tile.jit import compiler, runtime  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.shapes import MODEL_NK  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth  # noqa: E402

PROBE_SOURCE = Path(__file__).resolve().parent / "read_floor.cu"
READ_CTAS_PER_SM, READ_THREADS = 4, 512


PROBE_SYMBOLS = ("deep_tile_empty", "deep_tile_stream_read")
READ_KEY = 0x9E3779B9 - (1 << 32)
"""The probes' ``key`` (int32): the XOR fold of random FP8 data equals it with probability 2^-32
per CTA, and a store would only touch ``sink``."""


def load_probes() -> dict:
    """name -> the loaded probe kernel (one cubin, deep_tile's default compiler)."""
    cubin = compiler.compile_cubin(PROBE_SOURCE, {}, PROBE_SYMBOLS[1]).cubin
    return {name: runtime.load_kernel(cubin, name) for name in PROBE_SYMBOLS}


def probe_fns(probes: dict, b: torch.Tensor) -> dict:
    """The two probes as zero-argument callables on the current stream: ``empty``, and
    ``read_b``, which reads b once."""
    device = b.device.index
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    sink = torch.zeros(sms * READ_CTAS_PER_SM, dtype=torch.int32, device=b.device)
    args = read_args(b, sink)

    def empty():
        probes["deep_tile_empty"].launch(grid=1, block=32, smem_bytes=0, stream=torch.cuda.current_stream().cuda_stream,
                                         args=runtime.KernelArgs([]), device=device)

    def read():
        probes["deep_tile_stream_read"].launch(grid=sms * READ_CTAS_PER_SM, block=READ_THREADS, smem_bytes=0,
                                               stream=torch.cuda.current_stream().cuda_stream,
                                               args=args, device=device)

    return {"empty": empty, "read_b": read}


def read_args(b: torch.Tensor, sink: torch.Tensor, wait: bool = False) -> runtime.KernelArgs:
    """(src, n16 (64-bit), key, sink, wait) in the read kernel's layout, for ``b`` (16-byte aligned,
    a multiple of 16 bytes)."""
    if b.numel() * b.element_size() % 16 or b.data_ptr() % 16:
        raise ValueError("read_args: the buffer must be 16-byte aligned and a multiple of 16 bytes")
    n16 = b.numel() * b.element_size() // 16
    return runtime.KernelArgs([("ptr", b.data_ptr()), ("ptr", n16), ("i32", READ_KEY), ("ptr", sink.data_ptr()),
                               ("i32", int(wait))])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=[f"64,{n},{k}" for n, k in MODEL_NK])
    p.add_argument("--flush", nargs="+", choices=("write", "read"), default=["write", "read"])
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("read_floor: needs a CUDA GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    copy_rate = copy_bandwidth()
    print(f"GPU: {props.name} ({props.multi_processor_count} SMs); HBM copy rate (read + write of 1 GiB) "
          f"{copy_rate / 1e12:.2f} TB/s")
    probes = load_probes()
    rows = []
    for text in args.shapes:
        m, n, k = (int(v) for v in text.split(","))
        a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=args.seed, a_scale_layout="tma")
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        fns = {name: fn for name, fn in library_fns(a, a_scale, b, b_scale, out, True).items()
               if callable(fn) and name != "cublas_bw"}
        fns.update(probe_fns(probes, b))
        for flush in args.flush:
            times = bench_round_robin(fns, warmup=1, iters=args.iters, shuffle_seed=args.seed, flush_kind=flush)
            row = {"m": m, "n": n, "k": k, "flush": flush, "b_bytes": n * k, **times}
            rows.append(row)
            cells = "  ".join(f"{name} {us:6.1f}" for name, us in times.items())
            print(f"{m}x{n}x{k} {flush:>5} flush: {cells} us; read_b {n * k / times['read_b'] / 1e6:.2f} TB/s")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": props.name, "copy_bytes_per_s": copy_rate, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
