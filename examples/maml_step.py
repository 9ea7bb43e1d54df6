"""MAML (Finn et al., 2017) on 5-way digit tasks: one inner gradient step
through conv2d + batch norm + max pooling + cross entropy, differentiated
through by the meta-gradient.

A task is 5 digit classes with 5 labelled "support" images each and 10
"query" images each. The inner step adapts the shared parameters to the
support set, ``theta' = theta - alpha * grad L_support(theta)``, built with
``create_graph=True`` so that ``theta'`` stays a function of ``theta``; the
meta-loss is ``L_query(theta')`` and its gradient with respect to ``theta``
goes through the inner gradient (second derivatives of every op above).

    python examples/maml_step.py              # 300 meta-iterations, ~10 s
    python examples/maml_step.py --iters 10   # (or TAPEGRAD_EXAMPLE_ITERS=10)

It first checks the meta-gradient against central differences of the
meta-loss (float64), then meta-trains (float32) and prints the query accuracy
on tasks of held-out test images: without adaptation (chance: the labels are
per task), and after the inner step from the initial and the meta-learned
parameters.
"""

import argparse
import os

import numpy as np

import tapegrad
from tapegrad import ops
from tapegrad.data import datasets

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=int(os.environ.get("TAPEGRAD_EXAMPLE_ITERS", 300)))
iters = parser.parse_args().iters

WAYS, SHOTS, QUERIES, INNER_LR, META_LR, META_BATCH = 5, 5, 10, 0.4, 3e-3, 4


def init_params(rng, dtype):
    """conv 1 -> 16 (3x3), batch norm affine, linear 16*4*4 -> 5."""
    shapes_scales = [((16, 1, 3, 3), 1 / 3), ((16,), 0.0), ((16,), None), ((16,), 0.0),
                     ((WAYS, 256), 1 / 16), ((WAYS,), 0.0)]
    out = []
    for shape, scale in shapes_scales:
        a = np.ones(shape) if scale is None else rng.standard_normal(shape) * scale
        out.append(tapegrad.tensor(a, dtype=dtype, requires_grad=True))
    return out


def net(params, x):
    """(N, 1, 8, 8) -> (N, 5) logits; batch norm uses the batch's statistics
    (no running ones), as MAML does."""
    w, b, gamma, beta, wl, bl = params
    y = ops.conv2d(x, w, b, padding=1)                                  # (N, 16, 8, 8)
    y = ops.relu(ops.batch_norm(y, None, None, gamma, beta, training=True))
    y = ops.max_pool2d(y, 2)                                            # (N, 16, 4, 4)
    return ops.linear(ops.flatten(y, 1), wl, bl)


def adapted(params, xs, ys):
    """One inner SGD step on the support set, kept differentiable in params."""
    grads = tapegrad.grad(ops.cross_entropy(net(params, xs), ys), params, create_graph=True)
    return [p - INNER_LR * g for p, g in zip(params, grads)]


def meta_loss(params, task):
    xs, ys, xq, yq = task
    return ops.cross_entropy(net(adapted(params, xs, ys), xq), yq)


def sample_task(rng, images, labels, dtype="float32"):
    classes = rng.choice(10, WAYS, replace=False)
    parts = [[], [], [], []]
    for k, c in enumerate(classes):
        idx = rng.choice(np.flatnonzero(labels == c), SHOTS + QUERIES, replace=False)
        parts[0].append(images[idx[:SHOTS]])
        parts[2].append(images[idx[SHOTS:]])
        parts[1].append(np.full(SHOTS, k))
        parts[3].append(np.full(QUERIES, k))
    xs, ys, xq, yq = (np.concatenate(p) for p in parts)
    return (tapegrad.tensor(xs, dtype=dtype), tapegrad.tensor(ys), tapegrad.tensor(xq, dtype=dtype),
            tapegrad.tensor(yq))


def check_meta_gradient(images, labels):
    """d meta-loss / d theta by double backward, against central differences of
    the meta-loss along random directions, in float64."""
    rng = np.random.default_rng(1)
    params = init_params(rng, "float64")
    task = sample_task(rng, images, labels, "float64")
    grads = tapegrad.grad(meta_loss(params, task), params)
    worst = 0.0
    for _ in range(3):
        ds = [rng.standard_normal(p.shape) for p in params]
        norm = np.sqrt(sum(float((d ** 2).sum()) for d in ds))  # a unit step: max pooling is
        ds = [d / norm for d in ds]  # smooth only between argmax switches
        analytic = sum(float((g.numpy() * d).sum()) for g, d in zip(grads, ds))
        values = []
        for sign in (1, -1):
            shifted = [tapegrad.tensor(p.array + sign * 1e-6 * d) for p, d in zip(params, ds)]
            values.append(meta_loss([s.requires_grad_() for s in shifted], task).item())
        numeric = (values[0] - values[1]) / 2e-6
        worst = max(worst, abs(analytic - numeric) / max(abs(numeric), 1e-12))
    print(f"meta-gradient check (3 random directions): worst relative error {worst:.1e}")
    assert worst < 1e-5, "the meta-gradient disagrees with central differences"


def query_accuracy(params, tasks, adapt):
    correct = total = 0
    for xs, ys, xq, yq in tasks:
        p = adapted(params, xs, ys) if adapt else params
        pred = net(p, xq).numpy().argmax(axis=1)
        correct += int((pred == yq.numpy()).sum())
        total += len(pred)
    return 100.0 * correct / total


x_train, y_train, x_test, y_test = datasets.digits(as_arrays=True)
check_meta_gradient(x_train, y_train)

tapegrad.manual_seed(0)
rng = np.random.default_rng(0)
params = init_params(rng, "float32")
opt = tapegrad.optim.Adam(params, lr=META_LR)
test_tasks = [sample_task(np.random.default_rng(100 + i), x_test, y_test) for i in range(20)]
initial = query_accuracy(params, test_tasks, True)
window = []
for it in range(1, iters + 1):
    opt.zero_grad()
    loss = sum((meta_loss(params, sample_task(rng, x_train, y_train))
                for _ in range(META_BATCH - 1)),
               meta_loss(params, sample_task(rng, x_train, y_train))) / META_BATCH
    loss.backward()  # through the inner gradient: second derivatives of every op
    opt.step()
    window.append(loss.item())
    if it % max(1, iters // 5) == 0 or it == iters:
        print(f"iteration {it}: mean meta-loss {np.mean(window):.4f}")
        window = []
print(f"test tasks, query accuracy: {query_accuracy(params, test_tasks, False):.1f}% without "
      f"the inner step, {initial:.1f}% after it from the initial parameters, "
      f"{query_accuracy(params, test_tasks, True):.1f}% after it from the meta-learned ones")
