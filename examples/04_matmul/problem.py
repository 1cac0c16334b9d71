import torch
import torch.nn as nn


class Model(nn.Module):
    """
    GEMM (no bias) followed by a bias add, a per-feature scale and ReLU:

        relu((x @ W^T + bias) * scale)

    Eager PyTorch runs the GEMM and then three separate elementwise kernels over the
    full (batch_size, out_features) output.
    """

    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        x = x * self.scale
        x = torch.relu(x)
        return x


batch_size = 8192
in_features = 256
out_features = 4096


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
