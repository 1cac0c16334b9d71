import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """
    Algebraic folding plus epilogue fusion:

        relu((x W^T + b) * s) == relu(x (diag(s) W)^T + b * s)

    The per-feature scale is folded into the (small, out_features x in_features)
    weight and into the bias on every call, the bias is then added inside the GEMM
    (F.linear -> addmm, which uses the BLAS bias epilogue / beta=1 accumulate), and
    ReLU runs in place on the GEMM output. That removes two full passes over the
    (batch_size, out_features) output and two temporaries.
    """

    def __init__(self, in_features: int, out_features: int):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.gemm.weight * self.scale.unsqueeze(1)
        bias = self.bias * self.scale
        y = F.linear(x, weight, bias)
        return y.relu_()
