"""PyTorch's dcgan example, run on tapegrad by changing its imports.

``weights_init`` (``m.weight.data.normal_(0.0, 0.02)``, BatchNorm ``fill_``), a
ConvTranspose2d generator, a Conv2d discriminator, BCELoss against labels set with
``fill_``, two Adams with ``betas=(0.5, 0.999)``; on scikit-learn's 8x8 digits, with
the noise ``z`` from NumPy. ``TAPEGRAD_EXAMPLE_INIT=<file.npz>`` loads the initial
weights (keys ``netG.*``, ``netD.*``); ``TAPEGRAD_EXAMPLE_DTYPE=float64`` works in double.

    python examples/pytorch_dcgan.py [--niter 1] [--batchSize 64]
"""

import argparse
import os

import numpy as np
from sklearn.datasets import load_digits

# --- the only lines that differ from the PyTorch original -----------------------------
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.optim as optim
import tapegrad.utils.data

# --- PyTorch code from here on ----------------------------------------------------------


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class Generator(nn.Module):
    def __init__(self, nz, ngf):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),   # (N, nz, 1, 1) -> 4x4
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 1, 4, 2, 1, bias=False),   # -> (N, 1, 8, 8)
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False),                # (N, 1, 8, 8) -> 4x4
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),          # -> 2x2
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 2, 1, 0, bias=False),            # -> 1x1
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main():
    parser = argparse.ArgumentParser(description="DCGAN on 8x8 digits, PyTorch-style")
    for name, default in [("batchSize", 64), ("nz", 16), ("ngf", 32), ("ndf", 32),
                          ("niter", 1), ("lr", 0.0002), ("beta1", 0.5)]:
        parser.add_argument(f"--{name}", type=type(default), default=default)
    opt = parser.parse_args()
    torch.manual_seed(999)
    if os.environ.get("TAPEGRAD_EXAMPLE_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)
    device = torch.device("cpu")

    images = load_digits().images[:, None] / 8.0 - 1.0          # (1797, 1, 8, 8) in [-1, 1]
    rng = np.random.default_rng(0)
    images = images[rng.permutation(len(images))]
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(images, dtype=torch.get_default_dtype()))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize, shuffle=False)

    netG = Generator(opt.nz, opt.ngf).to(device)
    netG.apply(weights_init)
    netD = Discriminator(opt.ndf).to(device)
    netD.apply(weights_init)
    if os.environ.get("TAPEGRAD_EXAMPLE_INIT"):
        init = np.load(os.environ["TAPEGRAD_EXAMPLE_INIT"])
        for prefix, net in (("netG.", netG), ("netD.", netD)):
            net.load_state_dict({k[len(prefix):]: torch.from_numpy(v)
                                 for k, v in init.items() if k.startswith(prefix)})

    criterion = nn.BCELoss()
    real_label, fake_label = 1, 0
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    for epoch in range(opt.niter):
        for i, data in enumerate(dataloader, 0):
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)
            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            z = rng.standard_normal((batch_size, opt.nz, 1, 1))
            noise = torch.tensor(z, dtype=real_cpu.dtype, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            # (2) Update G network: maximize log(D(G(z)))
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            print(f"[{epoch}/{opt.niter}][{i}/{len(dataloader)}] Loss_D: {errD.item():.10f} "
                  f"Loss_G: {errG.item():.10f} D(x): {D_x:.10f} "
                  f"D(G(z)): {D_G_z1:.10f} / {D_G_z2:.10f}")


if __name__ == "__main__":
    main()
