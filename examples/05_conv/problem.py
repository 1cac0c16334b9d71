import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Depthwise 2D convolution (one filter per channel, stride 1, "same" padding, with
    bias) followed by ReLU, as in MobileNet-style blocks.
    """

    def __init__(self, channels: int, kernel_size: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(
            channels,
            channels,
            kernel_size,
            stride=1,
            padding=kernel_size // 2,
            groups=channels,
            bias=True,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


batch_size = 32
channels = 128
height = 128
width = 128
kernel_size = 3


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size]
