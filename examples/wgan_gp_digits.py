"""WGAN-GP on scikit-learn's 8x8 digits (Gulrajani et al., 2017): a small conv
critic trained with the gradient penalty ``(||d critic(x) / dx|| - 1)^2`` on
random interpolates of real and generated images. The penalty is a function of
a gradient, so the critic's update backpropagates through that gradient to the
conv weights: ``tapegrad.grad(..., create_graph=True)`` through conv2d,
leaky ReLU, max pooling and conv_transpose2d.

    python examples/wgan_gp_digits.py             # 200 generator steps, ~15 s
    python examples/wgan_gp_digits.py --steps 20  # (or TAPEGRAD_EXAMPLE_STEPS=20)

It first checks the penalty's gradient with respect to the critic's first conv
weight against central differences (float64), then trains (float32) and
prints the Wasserstein estimate ``E critic(real) - E critic(fake)`` and the
mean gradient norm on the interpolates, which the penalty pulls towards 1;
at the end, a few generated digits as text.
"""

import argparse
import os

import numpy as np

import tapegrad
from tapegrad import nn, optim
from tapegrad.data import datasets

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int,
                    default=int(os.environ.get("TAPEGRAD_EXAMPLE_STEPS", 200)))
steps = parser.parse_args().steps

LATENT, BATCH, N_CRITIC, LAMBDA = 16, 64, 5, 10.0


def make_critic():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.LeakyReLU(0.2), nn.MaxPool2d(2),  # -> (N, 16, 4, 4)
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.LeakyReLU(0.2),        # -> (N, 32, 2, 2)
        nn.Flatten(), nn.Linear(128, 1),
    )


def make_generator():
    return nn.Sequential(
        nn.Linear(LATENT, 128), nn.ReLU(), nn.Unflatten(1, (32, 2, 2)),
        nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1), nn.Sigmoid(),      # -> (N, 1, 8, 8)
    )


def gradient_penalty(critic, real, fake, alpha):
    """Mean of (||d critic(x) / dx|| - 1)^2 over x = alpha real + (1 - alpha) fake, and
    the gradient norms. create_graph=True keeps d critic / dx differentiable."""
    x = (alpha * real + (1 - alpha) * fake).detach().requires_grad_()
    (gx,) = tapegrad.grad(critic(x).sum(), x, create_graph=True)
    norms = (gx.reshape(gx.shape[0], -1) ** 2).sum(axis=1).sqrt()
    return ((norms - 1) ** 2).mean(), norms


def check_penalty_gradient(real):
    """d penalty / d (first conv weight) along a random direction, by double
    backward and by central differences, in float64."""
    critic = make_critic().double()
    rng = np.random.default_rng(0)
    real = tapegrad.tensor(real[:8], dtype="float64")
    fake = tapegrad.tensor(rng.uniform(size=real.shape))
    alpha = tapegrad.tensor(rng.uniform(size=(8, 1, 1, 1)))
    w = critic[0].weight
    penalty, _ = gradient_penalty(critic, real, fake, alpha)
    (gw,) = tapegrad.grad(penalty, w)
    d = rng.standard_normal(w.shape)
    eps, w0 = 1e-6, w.array.copy()
    values = []
    for sign in (1, -1):
        w.array[...] = w0 + sign * eps * d
        values.append(gradient_penalty(critic, real, fake, alpha)[0].item())
    w.array[...] = w0
    analytic, numeric = float((gw.numpy() * d).sum()), (values[0] - values[1]) / (2 * eps)
    rel = abs(analytic - numeric) / max(abs(numeric), 1e-12)
    print(f"penalty gradient check: double backward {analytic:.8f}, "
          f"central differences {numeric:.8f}, relative error {rel:.1e}")
    assert rel < 1e-5, "the gradient penalty's gradient disagrees with central differences"


tapegrad.manual_seed(0)
images = datasets.digits(as_arrays=True)[0]  # (1437, 1, 8, 8) float32 in [0, 1]
check_penalty_gradient(images)

critic, generator = make_critic(), make_generator()
opt_c = optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_g = optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
rng = np.random.default_rng(0)


def batch():
    return tapegrad.tensor(images[rng.integers(0, len(images), BATCH)])


for step in range(1, steps + 1):
    for _ in range(N_CRITIC):
        real = batch()
        with tapegrad.no_grad():
            fake = generator(tapegrad.randn(BATCH, LATENT))
        alpha = tapegrad.rand(BATCH, 1, 1, 1)
        penalty, norms = gradient_penalty(critic, real, fake, alpha)
        w_dist = critic(real).mean() - critic(fake).mean()
        opt_c.zero_grad()
        (LAMBDA * penalty - w_dist).backward()  # through d critic / dx to the conv weights
        opt_c.step()
    opt_g.zero_grad()
    (-critic(generator(tapegrad.randn(BATCH, LATENT))).mean()).backward()
    opt_g.step()
    if step % max(1, steps // 5) == 0 or step == steps:
        print(f"step {step}: Wasserstein estimate {w_dist.item():.4f}, "
              f"gradient penalty {penalty.item():.4f}, "
              f"mean gradient norm {norms.mean().item():.3f}")

generator.eval()
with tapegrad.no_grad():
    samples = generator(tapegrad.randn(6, LATENT)).numpy()[:, 0]  # (6, 8, 8) in [0, 1]
shades = " .:-=+*#%@"
for row in range(8):
    print("   ".join("".join(shades[min(int(v * 10), 9)] * 2 for v in img[row]) for img in samples))
