"""Caffe's MNIST LeNet, trained by Caffe's solver on tapegrad, then exported to ONNX.

The three files in examples/caffe/ are Caffe's own: lenet_train_test.prototxt (Data
layers, scale 0.00390625, batches of 64/100), lenet_solver.prototxt (SGD, base_lr
0.01, momentum 0.9, weight_decay 0.0005, "inv" policy) and lenet.prototxt (the deploy
net; the solver's paths point to examples/caffe/). The Data layers are fed
scikit-learn's digits made MNIST-shaped (28x28, 0..255, as the MNIST LMDB); the test
covers the 360 test digits exactly (3 batches of 120).

    python examples/caffe_lenet.py                  # 600 iterations: 97.5% test accuracy, ~10 s
    python examples/caffe_lenet.py --max-iter 100   # (or TAPEGRAD_EXAMPLE_ITERS=100)

The same training from the command line (from the repository's root, as Caffe runs
from its own): tapegrad caffe train --solver examples/caffe/lenet_solver.prototxt
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import tapegrad
from tapegrad.compat import caffe
from tapegrad.compat.caffe.feeds import digits_mnist_shaped, feed_for

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "caffe")

parser = argparse.ArgumentParser()
parser.add_argument("--max-iter", type=int,
                    default=int(os.environ.get("TAPEGRAD_EXAMPLE_ITERS", 600)))
parser.add_argument("--out", help="folder to keep the snapshot and lenet.onnx in (default: "
                                  "a temporary folder, removed at the end)")
args = parser.parse_args()
out = args.out or tempfile.mkdtemp(prefix="caffe_lenet_")
os.makedirs(out, exist_ok=True)

# Caffe's solver, its paths pointed here and its length cut for a CPU
solver = caffe.read_solver(os.path.join(HERE, "lenet_solver.prototxt"))
solver.net = os.path.join(HERE, "lenet_train_test.prototxt")
solver.max_iter = args.max_iter
solver.snapshot = 0  # snapshot_after_train writes the last iteration's
solver.snapshot_prefix = os.path.join(out, "lenet")
solver.test_interval = min(solver.test_interval, max(args.max_iter, 1))  # 500
solver.test_iter[:] = [3]  # 3 x 120 = the 360 test digits
solver.display = min(solver.display, max(args.max_iter // 5, 1))  # 100
solver.random_seed = 0

train_feed = feed_for(solver.net, "digits", phase="train")
test_feed = feed_for(solver.net, "digits", phase="test", batch_size=120)


def show(info):
    print(f"Iteration {info['iter']}, loss = {info['loss']:.4f}, lr = {info['lr']:.6g}")


def show_test(info):
    print(f"Iteration {info['iter']}, test accuracy {100 * info['outputs']['accuracy']:.2f}%, "
          f"test loss {info['outputs']['loss']:.4f}")


t0 = time.perf_counter()
s = caffe.Solver(solver, train_feed=train_feed, test_feed=test_feed, on_display=show,
                 on_test=show_test)
s.solve()
seconds = time.perf_counter() - t0
result = s.test()
print(f"trained {s.iter} iterations in {seconds:.1f} s: test accuracy "
      f"{100 * result['accuracy']:.2f}%")

# the deploy net with the snapshot's weights: Caffe's lenet.prototxt, softmax out
weights = os.path.join(out, f"lenet_iter_{s.iter}.caffemodel")
deploy = caffe.load(os.path.join(HERE, "lenet.prototxt"), weights)
_, _, images, labels = digits_mnist_shaped()  # the 360 test digits, 0..255
x = images.astype(np.float32) * np.float32(0.00390625)  # the Data layer's transform_param
with tapegrad.no_grad():
    prob = deploy(x).numpy()
acc = float((prob.argmax(1) == labels).mean())
print(f"deploy net (lenet.prototxt + {os.path.basename(weights)}): accuracy {100 * acc:.2f}% "
      f"on the {len(prob)} test digits")

onnx_path = os.path.join(out, "lenet.onnx")
try:
    import onnxruntime
except ImportError:
    onnxruntime = None
if onnxruntime is None:
    print("onnxruntime is not installed: skipping the ONNX check")
else:
    tapegrad.onnx.export(deploy, tapegrad.tensor(x[:64]), onnx_path)
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {session.get_inputs()[0].name: x[:64]})
    diff = float(np.abs(theirs - prob[:64]).max())
    print(f"ONNX export {onnx_path}: onnxruntime's probabilities differ by at most {diff:.2e}")
    assert diff < 1e-5, diff

if not args.out:
    shutil.rmtree(out)
