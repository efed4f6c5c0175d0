"""ResNets (our own code, torchvision's layout and parameter names), untrained: asking for
pretrained weights is an error, as there is nothing to download."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ResNet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]


def _no_weights(weights, pretrained) -> None:
    if weights is not None or pretrained:
        raise RuntimeError("the torchvision shim has no pretrained weights")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = norm_layer(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = norm_layer(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = norm_layer(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False,
                 norm_layer=None, **kwargs):  # fmt: skip
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        self._norm_layer = norm_layer
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = norm_layer(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                last = getattr(m, "bn3", None) or getattr(m, "bn2", None)
                if isinstance(m, (BasicBlock, Bottleneck)) and last is not None:
                    nn.init.constant_(last.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                self._norm_layer(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, self._norm_layer)]
        self.inplanes = planes * block.expansion
        layers += [
            block(self.inplanes, planes, norm_layer=self._norm_layer) for _ in range(1, blocks)
        ]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _resnet(block, layers, weights, pretrained, kwargs):
    _no_weights(weights, pretrained)
    kwargs.pop("progress", None)
    return ResNet(block, layers, **kwargs)


def resnet18(weights=None, pretrained=False, **kwargs):
    return _resnet(BasicBlock, [2, 2, 2, 2], weights, pretrained, kwargs)


def resnet34(weights=None, pretrained=False, **kwargs):
    return _resnet(BasicBlock, [3, 4, 6, 3], weights, pretrained, kwargs)


def resnet50(weights=None, pretrained=False, **kwargs):
    return _resnet(Bottleneck, [3, 4, 6, 3], weights, pretrained, kwargs)


def resnet101(weights=None, pretrained=False, **kwargs):
    return _resnet(Bottleneck, [3, 4, 23, 3], weights, pretrained, kwargs)


def resnet152(weights=None, pretrained=False, **kwargs):
    return _resnet(Bottleneck, [3, 8, 36, 3], weights, pretrained, kwargs)
