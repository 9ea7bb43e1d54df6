"""The examples/pytorch_*.py scripts: PyTorch code below a swapped import block.

Each script runs on tapegrad in float32 and learns. In float64, from the same
initial weights (built by torch here, saved as .npz, loaded by both runs) and the
same NumPy data, it prints the same numbers under tapegrad as its import-swapped
original does under torch, to 1e-8 relative.
"""

import contextlib
import importlib.util
import io
import os
import pathlib
import re
import subprocess
import sys
import types

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
BEGIN = "# --- the only lines that differ from the PyTorch original"
END = "# --- PyTorch code from here on"
FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
# one thread a process: the runs go side by side, and BLAS threads would only fight
ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

pytest.importorskip("sklearn")


def torch_original(script):
    """The script's text with its import block swapped to torch's (the only lines that
    may differ: every one of them an import of tapegrad)."""
    src = (EXAMPLES / script).read_text()
    a, b = src.index(BEGIN), src.index(END)
    block = src[a:b].splitlines()[1:]
    assert all(re.match(r"(import|from) tapegrad[ .]", ln) for ln in block if ln), block
    swapped = src[a:b].replace("import tapegrad as torch", "import torch")
    return src[:a] + swapped.replace("tapegrad", "torch") + src[b:]


def _lstm(m):
    return {"": m.RNNModel(len(m.Corpus().word2idx), 32, 32, 2, dropout=0.0, tie_weights=True)}


def _transformer(m):
    return {"": m.TransformerModel(m.NTOKENS, 32, 2, 64, 2, dropout=0.0)}


def _dcgan(m):
    nets = {"netG.": m.Generator(16, 32), "netD.": m.Discriminator(32)}
    for net in nets.values():
        net.apply(m.weights_init)
    return nets


def _mlp(m):
    return {"": m.Net()}


# script: (its models as torch builds them, arguments of the float64 comparison)
CASES = {
    "pytorch_lstm_lm.py": (_lstm, ["--epochs", "3", "--dropout", "0", "--tied"]),
    "pytorch_transformer.py": (_transformer, ["--epochs", "3", "--dropout", "0"]),
    "pytorch_dcgan.py": (_dcgan, []),
    "pytorch_cuda_fallback.py": (_mlp, ["--no-shuffle"]),
}


def _start(path, args, env):
    return subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **ENV, **env})


def _finish(*procs):
    """Each run's stdout, once every one has ended without an error."""
    results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, results):
        assert proc.returncode == 0, err[-3000:]
    return [out for out, _ in results]


def _floats(pattern, out):
    return [float(v) for v in re.findall(pattern, out)]


def _learns(script, out):
    if script == "pytorch_lstm_lm.py":
        losses = _floats(r"train loss ([\d.]+)", out)
        assert losses[-1] < losses[0] - 0.3, out
    elif script == "pytorch_transformer.py":
        losses = _floats(r"valid loss ([\d.]+)", out)
        assert losses[-1] < losses[0] - 0.3, out
    elif script == "pytorch_dcgan.py":
        loss_d, d_x = _floats(r"Loss_D: ([\d.]+)", out), _floats(r"D\(x\): ([\d.]+)", out)
        assert len(loss_d) == 29 and np.mean(loss_d[-5:]) < np.mean(loss_d[:5]), out
        assert np.mean(d_x[-5:]) > np.mean(d_x[:5]), out  # D tells digits from noise
    else:
        losses = _floats(r"train loss ([\d.]+)", out)
        correct = [int(c) for c in re.findall(r"accuracy (\d+)/397", out)]
        assert losses[-1] < losses[0] and correct[-2] > 0.9 * 397, out
        last, restored = out.splitlines()[-2:]  # the checkpoint restores the same model
        assert last.split("test loss")[1] == restored.split("test loss")[1], out


@contextlib.contextmanager
def _torch_settings(torch):
    """One thread (the tapegrad runs go side by side), and the global settings a
    script changes put back afterwards."""
    saved = torch.get_default_dtype(), torch.get_num_threads(), torch.backends.cudnn.benchmark
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_default_dtype(saved[0])
        torch.set_num_threads(saved[1])
        torch.backends.cudnn.benchmark = saved[2]


def _save_init(torch, script, original, path):
    """Build the script's models with torch, in float64, and save their state_dicts."""
    namespace = {"__name__": script[:-3]}
    exec(compile(original, script, "exec"), namespace)  # defines, does not run main
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    nets = CASES[script][0](types.SimpleNamespace(**namespace))
    np.savez(path, **{prefix + k: v.detach().numpy() for prefix, net in nets.items()
                      for k, v in net.state_dict().items()})


def _run_here(original, script, args):
    """Run the script's torch original in this process (torch is imported once)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", [script, *args])
        exec(compile(original, script, "exec"), {"__name__": "__main__", "__file__": script})
    return out.getvalue()


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("script", list(CASES))
def test_learns_on_tapegrad_and_prints_the_same_numbers_as_torch(script, tmp_path,
                                                                 monkeypatch):
    float32 = _start(EXAMPLES / script, [], {})  # tapegrad, the default dtype, learns
    if importlib.util.find_spec("torch") is None:
        _learns(script, *_finish(float32))
        pytest.skip("torch is not installed: the float64 comparison did not run")
    import torch

    original = torch_original(script)
    init = tmp_path / "init.npz"
    env = {"TAPEGRAD_EXAMPLE_INIT": str(init), "TAPEGRAD_EXAMPLE_DTYPE": "float64"}
    args = CASES[script][1]
    with _torch_settings(torch):
        _save_init(torch, script, original, init)
        ours = _start(EXAMPLES / script, args, env)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        theirs = _run_here(original, script, args)
    float32, ours = _finish(float32, ours)
    _learns(script, float32)
    assert FLOAT.sub("#", ours) == FLOAT.sub("#", theirs), (ours, theirs)  # all but floats
    a, b = np.array(_floats(FLOAT, ours)), np.array(_floats(FLOAT, theirs))
    assert len(a) >= 5
    worst = np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-2))
    assert worst < 1e-8, (worst, ours, theirs)
    _learns(script, ours)
