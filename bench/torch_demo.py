"""The benchmark model of the design in torch, with the same state-dict keys as the demo graph.

``torch_demo(graph)`` returns an eval-mode torch module loaded (strictly: every key must match)
from the demo graph's tensors, so that the project and torch run the same weights. Used by the
benchmark and by the tests as the reference implementation.
"""

from __future__ import annotations

import torch
from torch import nn


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, padding: int, bn: bool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding)
        self.bn = nn.BatchNorm2d(cout) if bn else None

    def forward(self, x):
        x = self.conv(x)
        return torch.relu(self.bn(x)) if self.bn is not None else x


class TorchDemo(nn.Module):
    def __init__(self):
        super().__init__()
        chans = (12, 32, 64, 128, 256)
        blocks = [_Block(a, b, 3, 2, 1, True) for a, b in zip(chans, chans[1:])]
        self.vision = nn.ModuleList(blocks + [_Block(256, 32, 1, 1, 0, False)])
        self.fc = nn.Linear(4096, 512)
        self.desire_emb = nn.Embedding(8, 32)
        self.ln = nn.LayerNorm(544)
        self.lstm = nn.LSTMCell(544, 512)
        self.plan = nn.Linear(512, 66)

    def forward(self, img, desire, h, c):
        x = img
        for block in self.vision:
            x = block(x)
        x = torch.relu(self.fc(torch.flatten(x, 1)))
        x = self.ln(torch.cat([x, self.desire_emb(desire)], dim=1))
        h, c = self.lstm(x, (h, c))
        return self.plan(h), h, c


def torch_demo(graph) -> TorchDemo:
    model = TorchDemo().eval()
    state = {k: torch.from_numpy(v.copy()) for k, v in graph.tensors.items()}
    model.load_state_dict(state, strict=True)
    return model
