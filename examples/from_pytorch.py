"""A PyTorch training script, run on tapegrad by changing its imports only.

This is PyTorch's own MNIST example (model class, DataLoader, train/test loops,
StepLR, a checkpoint, ``output.argmax(dim=1)`` accuracy) on scikit-learn's
bundled 8x8 digits. Every line below the import block is PyTorch code as it
stands; ``tests/examples`` runs the script on tapegrad and, with the import
block swapped back, on torch.

    python examples/from_pytorch.py [--epochs 8] [--save-model]
"""

import argparse
import os
import tempfile

import numpy as np
from sklearn.datasets import load_digits

# --- the only lines that differ from the PyTorch original -----------------------------
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.nn.functional as F
import tapegrad.optim as optim
from tapegrad.data import DataLoader, TensorDataset
from tapegrad.optim.lr_scheduler import StepLR

# --- PyTorch code from here on ----------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(576, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))   # (N, 32, 8, 8)
        x = F.relu(self.conv2(x))             # (N, 64, 6, 6)
        x = F.max_pool2d(x, 2)                # (N, 64, 3, 3)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(model, train_loader, optimizer, epoch):
    model.train()
    total = 0.0
    for data, target in train_loader:
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        total += loss.item() * data.size(0)
    return total / len(train_loader.dataset)


def test(model, test_loader):
    model.eval()
    test_loss = 0.0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
            _, top = output.max(1)
            assert top.eq(pred.view(-1)).all()
    n = len(test_loader.dataset)
    return test_loss / n, 100.0 * correct / n


def main():
    parser = argparse.ArgumentParser(description="digits, PyTorch-style")
    parser.add_argument("--epochs", type=int,
                        default=int(os.environ.get("TAPEGRAD_EXAMPLE_EPOCHS", 8)))
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--save-model", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(1)

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    train_idx, test_idx = order[:1437], order[1437:]
    train_set = TensorDataset(torch.tensor(images[train_idx]), torch.tensor(labels[train_idx]))
    test_set = TensorDataset(torch.tensor(images[test_idx]), torch.tensor(labels[test_idx]))
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=1000)

    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train_loss = train(model, train_loader, optimizer, epoch)
        test_loss, acc = test(model, test_loader)
        print(f"epoch {epoch}: train loss {train_loss:.4f}, test loss {test_loss:.4f}, "
              f"test accuracy {acc:.2f}%, lr {scheduler.get_last_lr()[0]:.4f}")
        scheduler.step()

    path = "digits_cnn.pt" if args.save_model else os.path.join(tempfile.mkdtemp(), "m.pt")
    torch.save(model.state_dict(), path)
    restored = Net()
    restored.load_state_dict(torch.load(path))
    print(f"checkpoint {path}: restored test accuracy {test(restored, test_loader)[1]:.2f}%")


if __name__ == "__main__":
    main()
