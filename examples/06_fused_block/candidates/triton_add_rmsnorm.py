import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_rmsnorm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    n_cols,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    # One program per row; the row (BLOCK_SIZE >= n_cols) stays in registers.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    offs = row * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0)
    h = x + r
    mean_sq = tl.sum(h * h, axis=0) / n_cols
    inv_rms = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, (h * inv_rms) * w, mask=mask)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    assert x.is_cuda and x.dtype == torch.float32
    assert residual.shape == x.shape and weight.numel() == x.shape[-1]
    shape = x.shape
    n_cols = shape[-1]
    x2 = x.reshape(-1, n_cols).contiguous()
    r2 = residual.reshape(-1, n_cols).contiguous()
    w = weight.contiguous()
    out = torch.empty_like(x2)
    n_rows = x2.shape[0]
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    assert BLOCK_SIZE <= 32768, "row too long to keep in registers"
    num_warps = 4
    if BLOCK_SIZE >= 2048:
        num_warps = 8
    if BLOCK_SIZE >= 8192:
        num_warps = 16
    add_rmsnorm_kernel[(n_rows,)](
        x2, r2, w, out, n_cols, float(eps), BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps
    )
    return out.reshape(shape)


class ModelNew(nn.Module):
    """
    Residual add + RMSNorm in one Triton kernel: each row of x and residual is read
    once, the sum of squares is reduced in registers, and the scaled row is written
    once (3 tensor-sized transfers instead of about 10 in eager PyTorch).
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return add_rmsnorm(x, residual, self.weight, self.eps)
