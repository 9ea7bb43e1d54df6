"""PyTorch's word_language_model TransformerModel, run on tapegrad by changing its imports.

``PositionalEncoding`` as a buffer, ``nn.TransformerEncoderLayer`` stacked by
``nn.TransformerEncoder``, the causal ``_generate_square_subsequent_mask`` and Adam, on
NumPy's runs of arithmetic progressions mod 16: the next term depends on the two before
it, so only attention over the past predicts it. ``TAPEGRAD_EXAMPLE_INIT=<file.npz>``
loads the initial weights; ``TAPEGRAD_EXAMPLE_DTYPE=float64`` works in double.

    python examples/pytorch_transformer.py [--epochs 4] [--dropout 0.1]
"""

import argparse
import math
import os

import numpy as np

# --- the only lines that differ from the PyTorch original -----------------------------
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.nn.functional as F
import tapegrad.optim as optim

# --- PyTorch code from here on ----------------------------------------------------------

NTOKENS = 17  # the residues 0..15 and <eos> = 16


def progressions(n, rng):
    """n runs of 8 terms of (start + k * step) mod 16, each followed by <eos>."""
    starts, steps = rng.integers(0, 16, n), rng.integers(1, 4, n)
    runs = (starts[:, None] + steps[:, None] * np.arange(8)) % 16
    return np.concatenate([runs, np.full((n, 1), 16)], axis=1).reshape(-1)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)  # (max_len, 1, d_model)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def _generate_square_subsequent_mask(self, sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)

    def forward(self, src):
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        src = self.encoder(src) * math.sqrt(self.ninp)   # (seq, batch, ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)  # (seq, batch, ntoken)


def batchify(data, bsz):
    data = torch.tensor(data).type(torch.int64)
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()  # (nbatch, bsz)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def evaluate(model, criterion, data_source, bptt):
    model.eval()
    total_loss = 0.0
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            output = model(data).view(-1, NTOKENS)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def main():
    parser = argparse.ArgumentParser(description="Transformer language model, PyTorch-style")
    for name, default in [("emsize", 32), ("nhid", 64), ("nlayers", 2), ("nhead", 2),
                          ("lr", 3e-3), ("epochs", 4), ("batch_size", 16), ("bptt", 18),
                          ("dropout", 0.1)]:
        parser.add_argument(f"--{name}", type=type(default), default=default)
    args = parser.parse_args()
    torch.manual_seed(1111)
    if os.environ.get("TAPEGRAD_EXAMPLE_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)

    rng = np.random.default_rng(0)
    train_data = batchify(progressions(400, rng), args.batch_size)
    val_data = batchify(progressions(80, rng), 10)
    model = TransformerModel(NTOKENS, args.emsize, args.nhead, args.nhid, args.nlayers,
                             args.dropout)
    if os.environ.get("TAPEGRAD_EXAMPLE_INIT"):
        init = np.load(os.environ["TAPEGRAD_EXAMPLE_INIT"])
        model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    criterion = nn.NLLLoss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(1, args.epochs + 1):
        model.train()
        losses = []
        for i in range(0, train_data.size(0) - 1, args.bptt):
            data, targets = get_batch(train_data, i, args.bptt)
            optimizer.zero_grad()
            output = model(data)
            loss = criterion(output.view(-1, NTOKENS), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            losses.append(loss.item())
        val_loss = evaluate(model, criterion, val_data, args.bptt)
        print(f"| epoch {epoch} | {len(losses)} batches | first loss {losses[0]:.10f} "
              f"| last loss {losses[-1]:.10f} | valid loss {val_loss:.10f} "
              f"| valid ppl {math.exp(val_loss):.10f}")


if __name__ == "__main__":
    main()
