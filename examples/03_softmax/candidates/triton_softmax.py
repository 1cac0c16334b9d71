import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_softmax_kernel(
    x_ptr,
    out_ptr,
    x_row_stride,
    out_row_stride,
    n_cols,
    temperature,
    BLOCK_SIZE: tl.constexpr,
):
    # One program per row; the whole row (BLOCK_SIZE >= n_cols) stays in registers.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    z = tl.where(mask, x / temperature, float("-inf"))
    z = z - tl.max(z, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def scaled_softmax(x: torch.Tensor, temperature: float) -> torch.Tensor:
    assert x.is_cuda and x.dtype == torch.float32
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    out = torch.empty_like(x2)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    assert BLOCK_SIZE <= 32768, "row too long to keep in registers"
    num_warps = 4
    if BLOCK_SIZE >= 2048:
        num_warps = 8
    if BLOCK_SIZE >= 8192:
        num_warps = 16
    if BLOCK_SIZE >= 16384:
        num_warps = 32
    scaled_softmax_kernel[(n_rows,)](
        x2,
        out,
        x2.stride(0),
        out.stride(0),
        n_cols,
        float(temperature),
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
    )
    return out.reshape(shape)


class ModelNew(nn.Module):
    """
    Fused Triton softmax: the scaling by 1/temperature, the row max, the exp-sum and
    the normalization happen in one kernel with the row held in registers, so x is
    read once and the output written once. Eager PyTorch also writes and re-reads
    the x / temperature temporary and, for rows this long (64 KiB, too big for its
    shared-memory path), reads each row several times.
    """

    def __init__(self, temperature: float):
        super(ModelNew, self).__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_softmax(x, self.temperature)
