"""Train a digits CNN, export it to ONNX, run it in onnxruntime, import it back
into tapegrad and fine-tune the imported copy for one epoch.

    python examples/onnx_roundtrip.py                # 2 epochs of training, then the round trip
    python examples/onnx_roundtrip.py --epochs 1     # (or TAPEGRAD_EXAMPLE_EPOCHS=1)
    python examples/onnx_roundtrip.py --out lenet.onnx

Needs onnx and onnxruntime (``pip install 'tapegrad[onnx]' onnxruntime``) and
scikit-learn for the digits (``pip install 'tapegrad[train]'``).
"""

import argparse
import os
import tempfile

import numpy as np
import onnxruntime as ort

import tapegrad
import tapegrad.onnx
from tapegrad import nn, optim
from tapegrad.cli.models import build_model
from tapegrad.data import DataLoader, datasets

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int,
                    default=int(os.environ.get("TAPEGRAD_EXAMPLE_EPOCHS", 2)))
parser.add_argument("--out", default=None, help="where to write the .onnx file "
                    "(default: a temporary directory)")
args = parser.parse_args()


def train_epoch(model, loader, optimizer, loss_fn):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def logits_of(model, x):
    model.eval()
    with tapegrad.no_grad():
        return model(tapegrad.tensor(x)).numpy()


def accuracy(logits, labels):
    return 100.0 * float((logits.argmax(axis=1) == labels).mean())


tapegrad.manual_seed(0)
train_set, test_set = datasets.digits()  # (N, 1, 8, 8) float32 images, int64 labels
_, _, x_test, y_test = datasets.digits(as_arrays=True)
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
loss_fn = nn.CrossEntropyLoss()

# 1. train the `tapegrad train --model lenet --data digits` network (conv, batch norm, dropout)
model = build_model("lenet", "digits")
optimizer = optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(1, args.epochs + 1):
    loss = train_epoch(model, train_loader, optimizer, loss_fn)
    print(f"epoch {epoch}: last batch loss {loss:.4f}")
ref = logits_of(model, x_test)
print(f"tapegrad test accuracy {accuracy(ref, y_test):.2f}%")

# 2. export: traced at batch 2, the batch axis stays dynamic
tmp = tempfile.TemporaryDirectory()
path = args.out or os.path.join(tmp.name, "digits_lenet.onnx")
proto = tapegrad.onnx.export(model, tapegrad.randn(2, 1, 8, 8), path,
                             input_names=["images"], output_names=["logits"])
ops = sorted({n.op_type for n in proto.graph.node})
print(f"exported {os.path.basename(path)}: {len(proto.graph.node)} nodes ({', '.join(ops)}), "
      f"{len(proto.graph.initializer)} initializers, opset {proto.opset_import[0].version}")

# 3. run it in onnxruntime on the whole test set (batch 360)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
got = session.run(["logits"], {"images": x_test})[0]
print(f"onnxruntime test accuracy {accuracy(got, y_test):.2f}%, "
      f"max |onnxruntime - tapegrad| = {np.abs(got - ref).max():.2e}")

# 4. import it back: a tapegrad Module whose initializers are Parameters
imported = tapegrad.onnx.load(path)
back = logits_of(imported, x_test)
n_params = sum(p.numel() for p in imported.parameters())
print(f"imported: {n_params} parameters, test accuracy {accuracy(back, y_test):.2f}%, "
      f"max |imported - tapegrad| = {np.abs(back - ref).max():.2e}")

# 5. fine-tune the imported copy for one epoch
optimizer = optim.Adam(imported.parameters(), lr=2e-4)
loss = train_epoch(imported, train_loader, optimizer, loss_fn)
tuned = logits_of(imported, x_test)
print(f"fine-tuned imported model: last batch loss {loss:.4f}, "
      f"test accuracy {accuracy(tuned, y_test):.2f}%")
tmp.cleanup()
