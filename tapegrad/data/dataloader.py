"""``torch.utils.data.dataloader``'s names, for scripts that import from there:
``from tapegrad.data.dataloader import default_collate``."""

from .collate import default_collate, default_convert
from .loader import DataLoader, get_worker_info

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]
