"""``torch.hub`` for scripts that import its ``tqdm``; nothing is ever downloaded.

``tqdm`` is the tqdm package's (``pip install tqdm``; in ``tapegrad[train]``);
``load``, ``load_state_dict_from_url`` and ``download_url_to_file`` raise: tapegrad
reads local files only (``tapegrad.load``, ``tapegrad.onnx.load``).
"""

from __future__ import annotations

from .errors import ArgumentError, MissingDependencyError

__all__ = ["tqdm", "load", "load_state_dict_from_url", "download_url_to_file"]

try:
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover - tqdm is in the test extra
    def tqdm(*args, **kwargs):
        raise MissingDependencyError("tapegrad.hub.tqdm is the tqdm package's progress bar: "
                          "pip install tqdm (or 'tapegrad[train]')")


def _no_download(name):
    def refuse(*args, **kwargs):
        raise ArgumentError(f"hub.{name}: tapegrad downloads nothing; fetch the file yourself "
                            "and read it with tapegrad.load (a tapegrad .npz), "
                            "tapegrad.onnx.load or tapegrad.compat.matconvnet.load_simplenn")
    refuse.__name__ = name
    return refuse


load = _no_download("load")
load_state_dict_from_url = _no_download("load_state_dict_from_url")
download_url_to_file = _no_download("download_url_to_file")
