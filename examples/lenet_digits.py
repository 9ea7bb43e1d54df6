"""Train a LeNet-style CNN on scikit-learn's 8x8 digits, PyTorch-style.

    python examples/lenet_digits.py            # 10 epochs, about 97-98% test accuracy
    python examples/lenet_digits.py --epochs 1 # (or TAPEGRAD_EXAMPLE_EPOCHS=1)
"""

import argparse
import os

import tapegrad
from tapegrad import nn, optim
from tapegrad.data import DataLoader, datasets

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int,
                    default=int(os.environ.get("TAPEGRAD_EXAMPLE_EPOCHS", 10)))
epochs = parser.parse_args().epochs

tapegrad.manual_seed(0)
train_set, test_set = datasets.digits()  # (N, 1, 8, 8) float32 images, int64 labels
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
test_loader = DataLoader(test_set, batch_size=360)

model = nn.Sequential(
    nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # -> (N, 32, 4, 4)
    nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # -> (N, 64, 2, 2)
    nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10),
)
loss_fn = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=2e-3)

for epoch in range(1, epochs + 1):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    model.eval()
    with tapegrad.no_grad():
        correct = sum(int((model(x).argmax(axis=1) == y).sum()) for x, y in test_loader)
    print(f"epoch {epoch}: last batch loss {loss.item():.4f}, "
          f"test accuracy {100 * correct / len(test_set):.2f}%")
