"""Small training loops in the styles real programs use, for test_mutate.py."""

PLAIN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = self.act(x)
        x = self.fc1(x)
        x = self.drop(self.act(x))
        return self.fc2(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
X = torch.randn(256, 8)
Y = (X[:, 0] > 0).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)
model.train()
for x, y in loader:
    optimizer.zero_grad()
    output = model(x)
    loss = criterion(output, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""

EPOCHS = """\
import torch
from torch import nn, optim


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return x + self.lin(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(2)])
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        h = self.norm(h)
        return self.head(h).squeeze(1)


def main():
    model = Model()
    opt = optim.Adam(model.parameters(), lr=1e-3)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    loss_fn = nn.MSELoss()
    data = [(torch.randn(16, 4), torch.randn(16)) for _ in range(8)]
    for epoch in range(3):
        model.train()
        for i, (x, y) in enumerate(data):
            pred = model(x)
            loss = loss_fn(pred, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        scheduler.step()
        model.eval()
        with torch.no_grad():
            for x, y in data:
                loss_fn(model(x), y)


if __name__ == "__main__":
    main()
"""

TRAIN_FN = """\
import torch
import torch.nn.functional as F


def get_batch(split):
    x = torch.randn(8, 4)
    return x, x.sum(1)


def train(model, optimizer, steps, accum=4):
    X, Y = get_batch("train")
    for it in range(steps):
        for micro in range(accum):
            out = model(X)
            loss = F.mse_loss(out.squeeze(1), Y) / accum
            X, Y = get_batch("train")
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
train(model, torch.optim.AdamW(model.parameters(), lr=3e-4), 10)
"""

TRAINER = """\
import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(
            [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": lr}],
            lr=lr,
        )
        self.scaler = torch.cuda.amp.GradScaler(enabled=False)

    def step(self, batch):
        x, y = batch
        logits = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()

    def fit(self, loader, epochs):
        for _ in range(epochs):
            for batch in loader:
                self.step(batch)


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
Trainer(model, 0.1).fit([(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 4, 2)
"""

GAN = """\
import torch
import torch.nn as nn

netG = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
netD = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCEWithLogitsLoss()
real_data = [torch.randn(8, 4) for _ in range(4)]
for epoch in range(2):
    for i, real in enumerate(real_data):
        netD.zero_grad()
        label = torch.ones(8, 1)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        fake = netG(torch.randn(8, 2))
        errD_fake = criterion(netD(fake.detach()), torch.zeros(8, 1))
        errD_fake.backward()
        optD.step()
        netG.zero_grad()
        errG = criterion(netD(fake), label)
        errG.backward()
        optG.step()
"""

NO_OPT = """\
import torch

w = torch.zeros(3, requires_grad=True)
for i in range(10):
    loss = (w - 1).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
"""

FUNCS = """\
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR


def train(model, loader, optimizer):
    model.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()


def main():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LogSoftmax(dim=1))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    loader = [(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 4
    for epoch in range(1, 3):
        train(model, loader, optimizer)
        scheduler.step()


main()
"""

ALL = {
    "plain": PLAIN,
    "epochs": EPOCHS,
    "train_fn": TRAIN_FN,
    "trainer": TRAINER,
    "gan": GAN,
    "funcs": FUNCS,
}
