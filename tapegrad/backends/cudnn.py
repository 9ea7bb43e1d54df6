"""``torch.backends.cudnn``: tapegrad's GPU ops run on CuPy's own kernels and cuBLAS,
never cuDNN, so these flags are kept as a script sets them and have no effect.

>>> import tapegrad.backends.cudnn as cudnn
>>> cudnn.benchmark = True
"""

benchmark = False
deterministic = False
enabled = True
allow_tf32 = True  # PyTorch's default; tapegrad's kernels compute in the tensor's dtype


def is_available() -> bool:
    return False


def version():
    return None
