"""Hessian-vector products of a LeNet loss on scikit-learn's 8x8 digits.

``H v`` for all parameters at once, without ever forming ``H``: the gradient
is built with ``create_graph=True`` (so it is a function of the parameters,
recorded through conv2d, tanh, max pooling, linear and cross entropy), and
the gradient of ``<grad, v>`` is ``H v``. The script trains the net briefly,
checks ``H v`` against central differences of gradients in float64, and runs
a few power iterations for the loss curvature's largest eigenvalue.

    python examples/hvp_lenet.py            # 5 epochs, ~5 s
    python examples/hvp_lenet.py --epochs 1 # (or TAPEGRAD_EXAMPLE_EPOCHS=1)
"""

import argparse
import os

import numpy as np

import tapegrad
from tapegrad import nn, optim
from tapegrad.data import DataLoader, datasets

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int,
                    default=int(os.environ.get("TAPEGRAD_EXAMPLE_EPOCHS", 5)))
parser.add_argument("--power-iterations", type=int, default=20)
args = parser.parse_args()

tapegrad.manual_seed(0)
train_set, test_set = datasets.digits()  # (N, 1, 8, 8) float32 images, int64 labels
model = nn.Sequential(
    nn.Conv2d(1, 6, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),   # -> (N, 6, 4, 4)
    nn.Conv2d(6, 16, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),  # -> (N, 16, 2, 2)
    nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10),
)
loss_fn = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(1, args.epochs + 1):
    for x, y in DataLoader(train_set, batch_size=32, shuffle=True):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
with tapegrad.no_grad():
    x_te, y_te = test_set.tensors
    acc = (model(tapegrad.tensor(x_te)).numpy().argmax(axis=1) == y_te).mean()
print(f"test accuracy {100 * acc:.2f}%")

# the curvature of the loss on 200 training images, in float64
model.double()
params = list(model.parameters())
x_np, y_np = datasets.digits(as_arrays=True)[:2]
x, y = tapegrad.tensor(x_np[:200], dtype="float64"), tapegrad.tensor(y_np[:200])


def gradient(create_graph=False):
    return tapegrad.grad(loss_fn(model(x), y), params, create_graph=create_graph)


def hvp(vs):
    """H v by double backward: the gradient of <grad(theta), v>."""
    grads = gradient(create_graph=True)
    dot = sum(((g * v).sum() for g, v in zip(grads[1:], vs[1:])), (grads[0] * vs[0]).sum())
    return tapegrad.grad(dot, params)


def shifted_gradient(vs, eps):
    """grad(theta + eps v), the parameters put back afterwards."""
    saved = [p.array.copy() for p in params]
    for p, v in zip(params, vs):
        p.array += eps * v.array
    g = [t.numpy() for t in gradient()]
    for p, s in zip(params, saved):
        p.array[...] = s
    return g


def normalized(arrays):
    norm = np.sqrt(sum(float((a ** 2).sum()) for a in arrays))
    return [tapegrad.tensor(a / norm) for a in arrays]


rng = np.random.default_rng(0)
vs = normalized([rng.standard_normal(p.shape) for p in params])
hv = [h.numpy() for h in hvp(vs)]
# max pooling makes the loss smooth only between argmax switches: a unit direction
# and a small step keep both differences between the same switches
eps = 1e-5
fd = [(a - b) / (2 * eps) for a, b in zip(shifted_gradient(vs, eps), shifted_gradient(vs, -eps))]
err = max(float(np.abs(h - f).max()) for h, f in zip(hv, fd))
scale = max(float(np.abs(f).max()) for f in fd)
print(f"H v against central differences of gradients: max abs error {err:.2e} "
      f"(largest entry {scale:.3f}), relative error {err / scale:.1e}")
assert err / scale < 1e-6, "the Hessian-vector product disagrees with central differences"

# power iteration: v <- H v / ||H v|| converges to the eigenvector of the largest |eigenvalue|
for _ in range(args.power_iterations):
    vs = normalized([v.array for v in vs])
    hvs = hvp(vs)
    rayleigh = sum(float((h.array * v.array).sum()) for h, v in zip(hvs, vs))
    vs = [tapegrad.tensor(h.array) for h in hvs]
print(f"largest Hessian eigenvalue (power iteration, {args.power_iterations} steps): "
      f"{rayleigh:.4f}")
