"""The structure and values of a batch, comparable between tapegrad and torch."""

import tapegrad as tg


def sig(obj):
    """The structure of a batch, the same for tapegrad's and torch's: a Tensor is its
    shape and dtype name; tuples and lists are both 'seq' (torch gives lists for tuples)."""
    if isinstance(obj, tg.Tensor):
        return ("T", tuple(obj.shape), str(obj.dtype))
    if type(obj).__module__.startswith("torch") and hasattr(obj, "dtype"):
        return ("T", tuple(obj.shape), str(obj.dtype).replace("torch.", ""))
    if isinstance(obj, dict):
        return ("dict", {k: sig(v) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return (type(obj).__name__, [sig(v) for v in obj])
    if isinstance(obj, (tuple, list)):
        return ("seq", [sig(v) for v in obj])
    return (type(obj).__name__, obj)


def values(obj):
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: values(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [values(v) for v in obj]
    return obj
