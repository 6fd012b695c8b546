"""Accuracy metrics for GEMM outputs against a (float64) reference, and the bar they are held to."""
import torch

DIFF_TOL, REL_TOL = 1e-3, 1e-2
"""The accuracy bar of the GPU tests and the benchmarks' checks against the float64 reference:
calc_diff below DIFF_TOL, the largest relative error below REL_TOL."""


def _as_f64_flat(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64).reshape(-1)


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepGEMM's similarity metric ``1 - 2 * sum(x*y) / sum(x^2 + y^2)``, computed in float64.

    0 for identical tensors, about ``mean(rel_err^2) / 2`` for close ones, 1 for orthogonal and 2
    for ``y = -x``. Two all-zero tensors give 0. Shapes must match.
    """
    if x.shape != y.shape:
        raise ValueError(
            f"calc_diff: x and y must have the same shape; got {tuple(x.shape)} and {tuple(y.shape)}."
        )
    xf, yf = _as_f64_flat(x), _as_f64_flat(y)
    if xf.device != yf.device:
        yf = yf.to(xf.device)
    denom = (torch.dot(xf, xf) + torch.dot(yf, yf)).item()
    if denom == 0.0:
        return 0.0
    return 1.0 - 2.0 * torch.dot(xf, yf).item() / denom


def max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|`` in float64 (a norm-wise relative error).

    When ``ref`` is all zeros the result is 0 if ``out`` is too, and ``inf`` otherwise; empty
    tensors give 0. NaN in either input gives NaN.
    """
    if out.shape != ref.shape:
        raise ValueError(
            f"max_rel_error: out and ref must have the same shape; got {tuple(out.shape)} and "
            f"{tuple(ref.shape)}."
        )
    if out.numel() == 0:
        return 0.0
    ref64 = ref.to(torch.float64)
    err = (out.to(device=ref64.device, dtype=torch.float64) - ref64).abs().max().item()
    scale = ref64.abs().max().item()
    if scale == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    return err / scale


def assert_gemm_close(
    out: torch.Tensor, ref: torch.Tensor, diff_tol: float = DIFF_TOL, rel_tol: float = REL_TOL
) -> None:
    """Raise AssertionError unless ``out`` is finite and close to ``ref``.

    Close means ``calc_diff(out, ref) < diff_tol`` and ``max_rel_error(out, ref) < rel_tol``;
    the message carries both numbers (and the count of non-finite values, if any).
    """
    if out.shape != ref.shape:
        raise AssertionError(
            f"assert_gemm_close: shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}"
        )
    num_bad = int((~torch.isfinite(out)).sum().item()) if out.numel() else 0
    num_bad_ref = int((~torch.isfinite(ref)).sum().item()) if ref.numel() else 0
    if num_bad or num_bad_ref:
        raise AssertionError(
            f"assert_gemm_close: {num_bad} non-finite value(s) in out and {num_bad_ref} in ref "
            f"(shape {tuple(out.shape)})"
        )
    diff = calc_diff(out, ref)
    rel = max_rel_error(out, ref)
    if not (diff < diff_tol and rel < rel_tol):
        raise AssertionError(
            f"assert_gemm_close: calc_diff = {diff:.3e} (tol {diff_tol:.1e}), "
            f"max_rel_error = {rel:.3e} (tol {rel_tol:.1e}), shape {tuple(out.shape)}"
        )
