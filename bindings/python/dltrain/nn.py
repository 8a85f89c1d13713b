"""Modules (include/dltrain/nn.h) with PyTorch's nn.Module protocol.

    model = dltrain.nn.resnet50(num_classes=10)          # a libdltrain module
    out = model(x)                                       # dlt_module_forward
    for name, p in model.named_parameters(): ...         # PyTorch's state_dict names
    print(model)                                         # torchvision's repr

    class Net(dltrain.nn.Module):                        # a Python module
        def __init__(self):
            super().__init__()
            self.body = dltrain.nn.Sequential(dltrain.nn.Linear(4, 8), dltrain.nn.ReLU())
            self.head = dltrain.nn.Linear(8, 2)
        def forward(self, x):
            return self.head(self.body(x))

_module.py holds Module and Parameter (registration by assignment, state, to(), repr,
summary), _layers.py the library's layers, Sequential and the ResNets.
"""

from ._module import Module, Parameter, summary
from ._layers import (Conv2d, BatchNorm2d, Linear, ReLU, MaxPool2d, GlobalAvgPool2d,
                      AdaptiveAvgPool2d, Flatten, Sequential, BasicBlock, Bottleneck, ResNet,
                      resnet18, resnet34, resnet50, resnet101, resnet152)
from .gpt import GPT, GPTConfig  # gptex (issue 17): nanoGPT's model

__all__ = ["Module", "Parameter", "summary", "Conv2d", "BatchNorm2d", "Linear", "ReLU",
           "MaxPool2d", "GlobalAvgPool2d", "AdaptiveAvgPool2d", "Flatten", "Sequential",
           "BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50",
           "resnet101", "resnet152", "GPT", "GPTConfig"]
