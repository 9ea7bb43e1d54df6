"""Optimizers and learning-rate schedules (PyTorch's ``torch.optim`` API).

>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
>>> sched = optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
>>> for x, y in loader:
...     opt.zero_grad()
...     loss_fn(model(x), y).backward()
...     opt.step()
>>> sched.step()

Caffe's per-layer ``lr_mult`` / ``decay_mult`` are param groups; see
:func:`mult_param_groups`. Gradient accumulation (Caffe's ``iter_size``,
MatConvNet's ``accumulate``): call ``backward()`` on several sub-batch losses
(each divided by the number of sub-batches) before one ``step()``; leaf
gradients add up.
"""

from . import lr_scheduler
from .adadelta import Adadelta
from .adam import Adam, AdamW
from .lbfgs import LBFGS
from .optimizer import Optimizer, mult_param_groups, required
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adadelta", "LBFGS",
           "lr_scheduler", "mult_param_groups", "required"]
