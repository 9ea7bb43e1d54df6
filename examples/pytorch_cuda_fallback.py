"""A PyTorch script written for a GPU that falls back to the CPU, run on tapegrad
by changing its imports.

``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")``,
``torch.cuda.manual_seed``, ``cudnn.benchmark = True``, model and batches moved with
``.to(device, non_blocking=True)``, DataLoader worker options for CUDA, a checkpoint
saved with ``torch.save(model.state_dict(), ...)`` and restored with
``torch.load(..., map_location=device, weights_only=True)``, and accuracy counted as
``(pred == target).sum().item()``; an MLP on scikit-learn's 8x8 digits.
``TAPEGRAD_EXAMPLE_INIT=<file.npz>`` loads the initial weights and
``TAPEGRAD_EXAMPLE_DTYPE=float64`` builds everything in double precision.

    python examples/pytorch_cuda_fallback.py [--epochs 3] [--no-shuffle]
"""

import argparse
import os
import tempfile

import numpy as np
from sklearn.datasets import load_digits

# --- the only lines that differ from the PyTorch original -----------------------------
import tapegrad as torch
import tapegrad.backends.cudnn as cudnn
import tapegrad.nn as nn
import tapegrad.nn.functional as F
import tapegrad.optim as optim
from tapegrad.utils.data import DataLoader, TensorDataset

# --- PyTorch code from here on ----------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.bn1 = nn.BatchNorm1d(128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)                # (N, 1, 8, 8) -> (N, 64)
        x = F.relu(self.bn1(self.fc1(x)))
        return self.fc2(x)


def train(model, device, loader, optimizer):
    model.train()
    total = 0.0
    for data, target in loader:
        data = data.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        total += loss.item() * data.size(0)
    return total / len(loader.dataset)


def test(model, device, loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            pred = output.argmax(dim=1)
            correct += (pred == target).sum().item()
    return test_loss / len(loader.dataset), correct


def main():
    parser = argparse.ArgumentParser(description="digits MLP that prefers CUDA")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--no-shuffle", action="store_true",
                        help="keep the training order (the same under any RNG)")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(1)
    torch.cuda.manual_seed(1)
    cudnn.benchmark = True
    if os.environ.get("TAPEGRAD_EXAMPLE_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)

    digits = load_digits()
    images = torch.from_numpy(digits.images[:, None] / 16.0).to(torch.get_default_dtype())
    labels = torch.from_numpy(digits.target.astype(np.int64))
    order = np.random.default_rng(0).permutation(len(labels))
    train_idx, test_idx = torch.from_numpy(order[:1400]), torch.from_numpy(order[1400:])
    kwargs = {"num_workers": 1, "pin_memory": True} if use_cuda else {}
    train_loader = DataLoader(TensorDataset(images[train_idx], labels[train_idx]),
                              batch_size=args.batch_size, shuffle=not args.no_shuffle, **kwargs)
    test_loader = DataLoader(TensorDataset(images[test_idx], labels[test_idx]),
                             batch_size=500, **kwargs)

    model = Net().to(device)
    if os.environ.get("TAPEGRAD_EXAMPLE_INIT"):
        init = np.load(os.environ["TAPEGRAD_EXAMPLE_INIT"])
        model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        train_loss = train(model, device, train_loader, optimizer)
        test_loss, correct = test(model, device, test_loader)
        print(f"epoch {epoch} on {device.type}: train loss {train_loss:.10f}, "
              f"test loss {test_loss:.10f}, accuracy {correct}/{len(test_loader.dataset)}")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "digits_mlp.pt")
        torch.save(model.state_dict(), path)
        restored = Net().to(device)
        restored.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    test_loss, correct = test(restored, device, test_loader)
    print(f"restored from {os.path.basename(path)}: test loss {test_loss:.10f}, "
          f"accuracy {correct}/{len(test_loader.dataset)}")


if __name__ == "__main__":
    main()
