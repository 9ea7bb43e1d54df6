"""PyTorch's word_language_model (LSTM), run on tapegrad by changing its imports.

Embedding -> 2-layer nn.LSTM with dropout -> Linear decoder (optionally tied), trained
by truncated backpropagation through time (``batchify``, ``get_batch``,
``repackage_hidden``, ``clip_grad_norm_``, ``p.data.add_(p.grad, alpha=-lr)``) on
sentences NumPy draws from a fixed grammar. ``TAPEGRAD_EXAMPLE_INIT=<file.npz>``
loads the initial weights; ``TAPEGRAD_EXAMPLE_DTYPE=float64`` works in double.

    python examples/pytorch_lstm_lm.py [--epochs 4] [--tied] [--dropout 0.2]
"""

import argparse
import math
import os

import numpy as np

# --- the only lines that differ from the PyTorch original -----------------------------
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.nn.functional as F

# --- PyTorch code from here on ----------------------------------------------------------

GRAMMAR = {
    "det": ["the", "a", "every"], "adj": ["big", "small", "red", "old"],
    "noun": ["cat", "dog", "bird", "man", "child"], "verb": ["sees", "likes", "chases"],
    "prep": ["near", "under", "with"],
}


class Corpus:
    def __init__(self, seed=0):
        words = ["<eos>"] + [w for kind in GRAMMAR.values() for w in kind]
        self.word2idx = {w: i for i, w in enumerate(words)}
        rng = np.random.default_rng(seed)
        self.train, self.valid = self.tokenize(1200, rng), self.tokenize(200, rng)

    def tokenize(self, n, rng):
        ids = []
        for _ in range(n):  # a sentence: det [adj] noun verb [prep det noun] <eos>
            kinds = ["det"] + ["adj"] * (rng.random() < 0.5) + ["noun", "verb"]
            kinds += ["prep", "det", "noun"] * (rng.random() < 0.6)
            ids += [self.word2idx[str(rng.choice(GRAMMAR[k]))] for k in kinds] + [0]
        return torch.tensor(ids).type(torch.int64)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))             # (seq, batch, ninp)
        output, hidden = self.rnn(emb, hidden)            # (seq, batch, nhid)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()  # (nbatch, bsz)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def evaluate(model, criterion, data_source, bptt):
    model.eval()
    total_loss, hidden = 0.0, model.init_hidden(data_source.size(1))
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train(model, criterion, train_data, args, lr):
    model.train()
    total_loss, nbatches, hidden = 0.0, 0, model.init_hidden(args.batch_size)
    for i in range(0, train_data.size(0) - 1, args.bptt):
        data, targets = get_batch(train_data, i, args.bptt)
        hidden = repackage_hidden(hidden)  # truncate the graph at the batch boundary
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss, nbatches = total_loss + loss.item(), nbatches + 1
    return total_loss / nbatches


def main():
    parser = argparse.ArgumentParser(description="LSTM language model, PyTorch-style")
    for name, default in [("emsize", 32), ("nhid", 32), ("nlayers", 2), ("lr", 10.0),
                          ("clip", 0.25), ("epochs", 4), ("batch_size", 10), ("bptt", 20),
                          ("dropout", 0.2)]:
        parser.add_argument(f"--{name}", type=type(default), default=default)
    parser.add_argument("--tied", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(1111)
    if os.environ.get("TAPEGRAD_EXAMPLE_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)

    corpus = Corpus()
    train_data, val_data = batchify(corpus.train, args.batch_size), batchify(corpus.valid, 10)
    ntokens = len(corpus.word2idx)
    model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied)
    if os.environ.get("TAPEGRAD_EXAMPLE_INIT"):
        init = np.load(os.environ["TAPEGRAD_EXAMPLE_INIT"])
        model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    criterion = nn.NLLLoss()

    lr, best_val_loss = args.lr, None
    for epoch in range(1, args.epochs + 1):
        train_loss = train(model, criterion, train_data, args, lr)
        val_loss = evaluate(model, criterion, val_data, args.bptt)
        print(f"| epoch {epoch} | lr {lr:.4f} | train loss {train_loss:.10f} "
              f"| valid loss {val_loss:.10f} | valid ppl {math.exp(val_loss):.10f}")
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0  # anneal the learning rate when validation stops improving


if __name__ == "__main__":
    main()
