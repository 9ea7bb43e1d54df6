"""Where a Caffe net's data comes from: ``Input`` layers, and the data layers
(Data, ImageData, HDF5Data, MemoryData, WindowData, DummyData), which tapegrad
replaces by an Input with the same tops: they read databases, image lists and HDF5
files and apply ``transform_param`` (scale, mean, crop, mirror), none of which
tapegrad runs. Feed their tops yourself, already transformed, as you would feed an
Input (``net.forward(data=x, label=y)``, ``model(data=x, label=y)``). Shapes are
taken from the layer's parameters where they say them (``batch_size``,
``crop_size``, ``new_height``/``new_width``, MemoryData's and DummyData's shapes),
otherwise from the first feed. DummyData, when not fed, produces its fillers'
values as Caffe does."""

from __future__ import annotations

from .base import Layer, fill, register

__all__ = ["Source", "Input", "DATA_LAYERS"]

DATA_LAYERS = ("Data", "ImageData", "HDF5Data", "MemoryData", "WindowData", "DummyData")


class Source(Layer):
    """A layer whose tops are fed: ``shapes`` (one per top, None where unknown)."""

    bottoms = (0, 0)
    tops = (1, None)

    def parse(self, lp):
        self.top_names = list(lp.top)
        self.shapes = self.source_shapes(lp)
        self.note = ""

    def source_shapes(self, lp):
        return [None] * self.n_top

    def forward(self, *fed):
        return fed


@register
class Input(Source):
    """Caffe's Input: ``input_param { shape }`` once for every top, or once per top,
    or not at all (shapes from the first feed)."""

    type = "Input"

    def source_shapes(self, lp):
        shapes = [tuple(s.dim) for s in lp.input_param.shape]
        if len(shapes) not in (0, 1, self.n_top):
            raise self.error(f"{len(shapes)} input_param shapes for {self.n_top} tops (give "
                             "one for all, or one per top)")
        if any(d < 0 for s in shapes for d in s):
            raise self.error(f"negative dimension in input shapes {shapes}")
        return shapes * self.n_top if len(shapes) == 1 else shapes or [None] * self.n_top


class _DataLayer(Source):
    """A data layer, run as an Input with the same tops (see the module notes)."""

    def parse(self, lp):
        super().parse(lp)
        transform = lp.transform_param
        what = [f for f in ("scale", "mean_file", "mean_value", "crop_size", "mirror",
                            "force_color", "force_gray") if transform.ListFields() and
                any(fd.name == f for fd, _ in transform.ListFields())]
        self.note = (f"{self.type} layer {self.name!r} is an Input of tops {self.top_names}: "
                     "feed them (net.forward(" + ", ".join(f"{t}=..." for t in self.top_names)
                     + ")) with the data already prepared"
                     + (f"; its transform_param ({', '.join(what)}) is not applied"
                        if what else ""))

    def source_shapes(self, lp):
        batch, chw = self.batch_and_image(lp)
        data = (batch,) + chw if batch and chw else None
        label = (batch,) if batch else None
        return ([data, label] + [None] * self.n_top)[:self.n_top]

    def batch_and_image(self, lp):
        return None, None


@register
class Data(_DataLayer):
    type = "Data"

    def batch_and_image(self, lp):
        return lp.data_param.batch_size or None, None


@register
class HDF5Data(_DataLayer):
    type = "HDF5Data"


@register
class ImageData(_DataLayer):
    type = "ImageData"

    def batch_and_image(self, lp):
        p = lp.image_data_param
        c = 3 if p.is_color else 1
        crop = lp.transform_param.crop_size or p.crop_size
        hw = (crop, crop) if crop else (p.new_height, p.new_width) \
            if p.new_height and p.new_width else None
        return p.batch_size, (c,) + hw if hw else None


@register
class WindowData(_DataLayer):
    type = "WindowData"

    def batch_and_image(self, lp):
        p = lp.window_data_param
        crop = lp.transform_param.crop_size or p.crop_size
        return p.batch_size or None, (3, crop, crop) if crop else None


@register
class MemoryData(_DataLayer):
    type = "MemoryData"

    def batch_and_image(self, lp):
        p = lp.memory_data_param
        dims = (p.channels, p.height, p.width)
        return p.batch_size or None, dims if all(dims) else None


@register
class DummyData(_DataLayer):
    """Caffe's DummyData: tops of the given shapes filled by ``data_filler``
    (constant 0 by default) when not fed."""

    type = "DummyData"

    def parse(self, lp):
        super().parse(lp)
        fillers = list(lp.dummy_data_param.data_filler)
        if len(fillers) not in (0, 1, self.n_top):
            raise self.error(f"{len(fillers)} data_filler for {self.n_top} tops")
        self.fillers = fillers * self.n_top if len(fillers) == 1 else fillers or \
            [None] * self.n_top
        self.note = ""

    def source_shapes(self, lp):
        p = lp.dummy_data_param
        if len(p.shape):
            shapes = [tuple(s.dim) for s in p.shape]
        else:
            legacy = [list(getattr(p, f)) for f in ("num", "channels", "height", "width")]
            n = max(len(v) for v in legacy)
            if n == 0:
                raise self.error("needs shape (or num, channels, height, width)")
            if any(len(v) not in (1, n) for v in legacy):
                raise self.error("num, channels, height and width need 1 value or one per "
                                 "top each")
            shapes = [tuple(v[i] if len(v) > 1 else v[0] for v in legacy) for i in range(n)]
        if len(shapes) not in (1, self.n_top):
            raise self.error(f"{len(shapes)} shapes for {self.n_top} tops")
        return shapes * self.n_top if len(shapes) == 1 else shapes

    def generate(self, i):
        return fill(self.fillers[i], self.shapes[i])
