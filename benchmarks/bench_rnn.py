"""Forward + backward time of the recurrent layers, tapegrad against PyTorch.

Rows: one nn.LSTM / nn.GRU / nn.RNN over a sequence (loss = out.sum() + h_n.sum()),
and one training step of PyTorch's word language model example (embedding 200,
2-layer LSTM 200, decoder to a 1000-word vocabulary, bptt 35, batch 20, cross
entropy, clip_grad_norm_ 0.25, plain SGD), the same weights on both sides, in
float32. Median and min of many repeats in the same process, the two libraries
alternating in blocks; ``ratio`` is tapegrad / PyTorch (below 1 is faster).

    python benchmarks/bench_rnn.py [--repeats 30] [--threads N] [--only lstm]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_layers import _blas, _machine, _time_pair

import tapegrad as tg
from tapegrad import nn as tnn

# (label, kind, T, B, I, H, layers, bidirectional)
LAYERS = [
    ("LSTM T35 B20 200->200 x2", "LSTM", 35, 20, 200, 200, 2, False),
    ("LSTM T35 B20 200->200 bi", "LSTM", 35, 20, 200, 200, 1, True),
    ("GRU T35 B20 200->200 x2", "GRU", 35, 20, 200, 200, 2, False),
    ("RNN T100 B32 64->128", "RNN", 100, 32, 64, 128, 1, False),
    ("LSTM T28 B64 28->128 (mnist_rnn)", "LSTM", 28, 64, 28, 128, 1, False),
]


def _same(torch, tm, gm):
    gm.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


def case_layer(kind, t, b, i, h, layers, bi, rng, torch):
    kw = dict(num_layers=layers, bidirectional=bi)
    gm = getattr(tnn, kind)(i, h, **kw)
    x = rng.standard_normal((t, b, i)).astype(np.float32)
    gx = tg.tensor(x, requires_grad=True)

    def ours():
        out, hn = gm(gx)
        hn = hn[0] if kind == "LSTM" else hn
        (out.sum() + hn.sum()).backward()
        gx.grad = None
        gm.zero_grad()

    theirs = None
    if torch is not None:
        tm = getattr(torch.nn, kind)(i, h, **kw)
        _same(torch, tm, gm)
        tx = torch.tensor(x, requires_grad=True)

        def theirs():
            out, hn = tm(tx)
            hn = hn[0] if kind == "LSTM" else hn
            (out.sum() + hn.sum()).backward()
            tx.grad = None
            tm.zero_grad()
    return ours, theirs


def _lm(nn, ntoken, ninp, nhid, nlayers):
    class RNNModel(nn.Module):  # the word_language_model example's LSTM model
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.2)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, x, hidden):
            emb = self.encoder(x)
            output, hidden = self.rnn(emb, hidden)
            return self.decoder(output).view(-1, ntoken), hidden
    return RNNModel()


def case_lm(rng, torch, ntoken=1000, bptt=35, batch=20):
    gm = _lm(tnn, ntoken, 200, 200, 2)
    data = rng.integers(0, ntoken, (bptt + 1, batch))

    def step(lib, model, x, y):
        model.train()
        model.zero_grad()
        hidden = tuple(lib.zeros(2, batch, 200) for _ in range(2))
        out, hidden = model(x, hidden)
        loss = lib.nn.functional.cross_entropy(out, y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with lib.no_grad():
            for p in model.parameters():
                p -= 20 * p.grad

    gx, gy = tg.tensor(data[:-1]), tg.tensor(data[1:].reshape(-1))
    ours = lambda: step(tg, gm, gx, gy)  # noqa: E731
    theirs = None
    if torch is not None:
        tm = _lm(torch.nn, ntoken, 200, 200, 2)
        _same(torch, tm, gm)
        tx, ty = torch.tensor(data[:-1]), torch.tensor(data[1:].reshape(-1))
        theirs = lambda: step(torch, tm, tx, ty)  # noqa: E731
    return ours, theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=tg.get_num_threads())
    args = ap.parse_args()
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    tg.set_num_threads(args.threads)
    print(f"machine: {_machine()}")
    print(f"BLAS: {_blas()}")
    print(f"threads: {args.threads}; float32; fwd+bwd; {args.repeats} repeats; ms")
    print(f"{'row':38s} {'tapegrad med [min]':>20s} {'torch med [min]':>18s} "
          f"{'ratio med [min]':>16s}")
    rng = np.random.default_rng(0)
    rows = [(label, lambda r=r: case_layer(*r[1:], rng, torch)) for r in LAYERS
            for label in [r[0]]]
    rows.append(("word LM train step (LSTM 2x200, V 1000)", lambda: case_lm(rng, torch)))
    for label, make in rows:
        if args.only.lower() not in label.lower():
            continue
        ours, theirs = make()
        res = _time_pair(ours, theirs, args.repeats, lambda: None, lambda: None)
        (om, omin), rest = res[0], res[1:]
        if rest:
            tm, tmin = rest[0]
            print(f"{label:38s} {om:9.2f} [{omin:7.2f}] {tm:8.2f} [{tmin:7.2f}] "
                  f"{om / tm:7.2f} [{omin / tmin:5.2f}]")
        else:
            print(f"{label:38s} {om:9.2f} [{omin:7.2f}] {'n/a':>18s}")


if __name__ == "__main__":
    main()
