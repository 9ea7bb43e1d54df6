"""Deploy prototxts of real Caffe architectures (written here from the published
definitions, at small inputs so the tests run fast) and random weights for them.

Each function returns prototxt text. ``random_weights(model)`` fills a built
CaffeModel's blobs with random values of a sensible scale (BatchNorm: positive
variances and a scale factor other than 1)."""

from __future__ import annotations

import numpy as np

_P = []


def net(name, shape):
    dims = " ".join(f"dim: {d}" for d in shape)
    return [f'name: "{name}"',
            f'layer {{ name: "data" type: "Input" top: "data" '
            f'input_param {{ shape {{ {dims} }} }} }}']


def layer(name, type_, bottoms, tops, body=""):
    bottoms = [bottoms] if isinstance(bottoms, str) else bottoms
    tops = [tops] if isinstance(tops, str) else tops
    b = " ".join(f'bottom: "{x}"' for x in bottoms)
    t = " ".join(f'top: "{x}"' for x in tops)
    return f'layer {{ name: "{name}" type: "{type_}" {b} {t} {body} }}'


def conv(name, bottom, n, k, s=1, p=0, group=1, top=None, bias=True, dilation=1):
    extra = "" if bias else " bias_term: false"
    extra += f" group: {group}" if group != 1 else ""
    extra += f" dilation: {dilation}" if dilation != 1 else ""
    return layer(name, "Convolution", bottom, top or name,
                 f"convolution_param {{ num_output: {n} kernel_size: {k} stride: {s} "
                 f"pad: {p}{extra} }}")


def relu(name, blob):
    return layer(name, "ReLU", blob, blob)


def pool(name, bottom, k, s, method="MAX", p=0, top=None):
    return layer(name, "Pooling", bottom, top or name,
                 f"pooling_param {{ pool: {method} kernel_size: {k} stride: {s} pad: {p} }}")


def gpool(name, bottom, method="AVE"):
    return layer(name, "Pooling", bottom, name,
                 f"pooling_param {{ pool: {method} global_pooling: true }}")


def ip(name, bottom, n):
    return layer(name, "InnerProduct", bottom, name, f"inner_product_param {{ num_output: {n} }}")


def lrn(name, bottom, size=5, alpha=1e-4, beta=0.75, k=1.0):
    return layer(name, "LRN", bottom, name,
                 f"lrn_param {{ local_size: {size} alpha: {alpha} beta: {beta} k: {k} }}")


def softmax(bottom):
    return layer("prob", "Softmax", bottom, "prob")


def text(lines):
    return "\n".join(lines) + "\n"


def lenet():
    n = net("LeNet", (2, 1, 28, 28))
    n += [conv("conv1", "data", 20, 5), pool("pool1", "conv1", 2, 2),
          conv("conv2", "pool1", 50, 5), pool("pool2", "conv2", 2, 2),
          ip("ip1", "pool2", 500), relu("relu1", "ip1"), ip("ip2", "ip1", 10),
          softmax("ip2")]
    return text(n)


def cifar10_quick():
    n = net("CIFAR10_quick", (2, 3, 32, 32))
    n += [conv("conv1", "data", 32, 5, p=2), pool("pool1", "conv1", 3, 2),
          relu("relu1", "pool1"), conv("conv2", "pool1", 32, 5, p=2), relu("relu2", "conv2"),
          pool("pool2", "conv2", 3, 2, "AVE"), conv("conv3", "pool2", 64, 5, p=2),
          relu("relu3", "conv3"), pool("pool3", "conv3", 3, 2, "AVE"), ip("ip1", "pool3", 64),
          ip("ip2", "ip1", 10), softmax("ip2")]
    return text(n)


def caffenet(fc=1024):
    """CaffeNet (BVLC's AlexNet variant: pool before LRN, grouped conv2/4/5) at a
    99x99 input; fc6/fc7 have ``fc`` units (4096 in the published net)."""
    n = net("CaffeNet", (1, 3, 99, 99))
    n += [conv("conv1", "data", 96, 11, s=4), relu("relu1", "conv1"),
          pool("pool1", "conv1", 3, 2), lrn("norm1", "pool1"),
          conv("conv2", "norm1", 256, 5, p=2, group=2), relu("relu2", "conv2"),
          pool("pool2", "conv2", 3, 2), lrn("norm2", "pool2"),
          conv("conv3", "norm2", 384, 3, p=1), relu("relu3", "conv3"),
          conv("conv4", "conv3", 384, 3, p=1, group=2), relu("relu4", "conv4"),
          conv("conv5", "conv4", 256, 3, p=1, group=2), relu("relu5", "conv5"),
          pool("pool5", "conv5", 3, 2), ip("fc6", "pool5", fc), relu("relu6", "fc6"),
          layer("drop6", "Dropout", "fc6", "fc6", "dropout_param { dropout_ratio: 0.5 }"),
          ip("fc7", "fc6", fc), relu("relu7", "fc7"),
          layer("drop7", "Dropout", "fc7", "fc7", "dropout_param { dropout_ratio: 0.5 }"),
          ip("fc8", "fc7", 1000), softmax("fc8")]
    return text(n)


def _inception(n, name, bottom, c1, r3, c3, r5, c5, pp):
    p = f"{name}/"
    n += [conv(p + "1x1", bottom, c1, 1), relu(p + "relu_1x1", p + "1x1"),
          conv(p + "3x3_reduce", bottom, r3, 1), relu(p + "relu_3x3_reduce", p + "3x3_reduce"),
          conv(p + "3x3", p + "3x3_reduce", c3, 3, p=1), relu(p + "relu_3x3", p + "3x3"),
          conv(p + "5x5_reduce", bottom, r5, 1), relu(p + "relu_5x5_reduce", p + "5x5_reduce"),
          conv(p + "5x5", p + "5x5_reduce", c5, 5, p=2), relu(p + "relu_5x5", p + "5x5"),
          pool(p + "pool", bottom, 3, 1, p=1), conv(p + "pool_proj", p + "pool", pp, 1),
          relu(p + "relu_pool_proj", p + "pool_proj"),
          layer(p + "output", "Concat", [p + "1x1", p + "3x3", p + "5x5", p + "pool_proj"],
                p + "output")]
    return p + "output"


def googlenet():
    """GoogLeNet's stem and inception modules 3a, 3b and 4a (published widths) at a
    64x64 input, then global average pooling and the classifier."""
    n = net("GoogleNet", (1, 3, 64, 64))
    n += [conv("conv1/7x7_s2", "data", 64, 7, s=2, p=3), relu("conv1/relu_7x7", "conv1/7x7_s2"),
          pool("pool1/3x3_s2", "conv1/7x7_s2", 3, 2), lrn("pool1/norm1", "pool1/3x3_s2"),
          conv("conv2/3x3_reduce", "pool1/norm1", 64, 1),
          relu("conv2/relu_3x3_reduce", "conv2/3x3_reduce"),
          conv("conv2/3x3", "conv2/3x3_reduce", 192, 3, p=1), relu("conv2/relu_3x3", "conv2/3x3"),
          lrn("conv2/norm2", "conv2/3x3"), pool("pool2/3x3_s2", "conv2/norm2", 3, 2)]
    top = _inception(n, "inception_3a", "pool2/3x3_s2", 64, 96, 128, 16, 32, 32)
    top = _inception(n, "inception_3b", top, 128, 128, 192, 32, 96, 64)
    n += [pool("pool3/3x3_s2", top, 3, 2)]
    top = _inception(n, "inception_4a", "pool3/3x3_s2", 192, 96, 208, 16, 48, 64)
    n += [gpool("pool5/global", top),
          layer("pool5/drop", "Dropout", "pool5/global", "pool5/global",
                "dropout_param { dropout_ratio: 0.4 }"),
          ip("loss3/classifier", "pool5/global", 1000), softmax("loss3/classifier")]
    return text(n)


def _bn_scale(n, name, blob):
    n += [layer(f"bn{name}", "BatchNorm", blob, blob,
                "batch_norm_param { use_global_stats: true }"),
          layer(f"scale{name}", "Scale", blob, blob, "scale_param { bias_term: true }")]


def _bottleneck(n, name, bottom, c, out, stride, project):
    if project:
        n.append(conv(f"res{name}_branch1", bottom, out, 1, s=stride, bias=False))
        _bn_scale(n, f"{name}_branch1", f"res{name}_branch1")
        short = f"res{name}_branch1"
    else:
        short = bottom
    a, b, cc = f"res{name}_branch2a", f"res{name}_branch2b", f"res{name}_branch2c"
    n.append(conv(a, bottom, c, 1, s=stride, bias=False))
    _bn_scale(n, f"{name}_branch2a", a)
    n.append(relu(f"{a}_relu", a))
    n.append(conv(b, a, c, 3, p=1, bias=False))
    _bn_scale(n, f"{name}_branch2b", b)
    n.append(relu(f"{b}_relu", b))
    n.append(conv(cc, b, out, 1, bias=False))
    _bn_scale(n, f"{name}_branch2c", cc)
    n += [layer(f"res{name}", "Eltwise", [short, cc], f"res{name}"),
          relu(f"res{name}_relu", f"res{name}")]
    return f"res{name}"


def resnet():
    """ResNet-50's stem and stages 2 and 3 (a projection and an identity bottleneck
    each, published widths, in-place BatchNorm + Scale + ReLU) at a 64x64 input."""
    n = net("ResNet-50-head", (1, 3, 64, 64))
    n.append(conv("conv1", "data", 64, 7, s=2, p=3))
    _bn_scale(n, "_conv1", "conv1")
    n += [relu("conv1_relu", "conv1"), pool("pool1", "conv1", 3, 2)]
    top = _bottleneck(n, "2a", "pool1", 64, 256, 1, True)
    top = _bottleneck(n, "2b", top, 64, 256, 1, False)
    top = _bottleneck(n, "3a", top, 128, 512, 2, True)
    top = _bottleneck(n, "3b", top, 128, 512, 1, False)
    n += [gpool("pool5", top), ip("fc1000", "pool5", 1000), softmax("fc1000")]
    return text(n)


def _fire(n, name, bottom, s, e):
    n += [conv(f"{name}/squeeze1x1", bottom, s, 1), relu(f"{name}/relu_squeeze1x1",
                                                           f"{name}/squeeze1x1"),
          conv(f"{name}/expand1x1", f"{name}/squeeze1x1", e, 1),
          relu(f"{name}/relu_expand1x1", f"{name}/expand1x1"),
          conv(f"{name}/expand3x3", f"{name}/squeeze1x1", e, 3, p=1),
          relu(f"{name}/relu_expand3x3", f"{name}/expand3x3"),
          layer(f"{name}/concat", "Concat", [f"{name}/expand1x1", f"{name}/expand3x3"],
                f"{name}/concat")]
    return f"{name}/concat"


def squeezenet():
    """SqueezeNet v1.1 (all eight fire modules, published widths) at a 64x64 input."""
    n = net("SqueezeNet_v1.1", (1, 3, 64, 64))
    n += [conv("conv1", "data", 64, 3, s=2), relu("relu_conv1", "conv1"),
          pool("pool1", "conv1", 3, 2)]
    top = _fire(n, "fire2", "pool1", 16, 64)
    top = _fire(n, "fire3", top, 16, 64)
    n.append(pool("pool3", top, 3, 2))
    top = _fire(n, "fire4", "pool3", 32, 128)
    top = _fire(n, "fire5", top, 32, 128)
    n.append(pool("pool5", top, 3, 2))
    for i, (s, e) in zip(range(6, 10), ((48, 192), (48, 192), (64, 256), (64, 256))):
        top = _fire(n, f"fire{i}", top if i > 6 else "pool5", s, e)
    n += [layer("drop9", "Dropout", top, top, "dropout_param { dropout_ratio: 0.5 }"),
          conv("conv10", top, 1000, 1), relu("relu_conv10", "conv10"), gpool("pool10", "conv10"),
          softmax("pool10")]
    return text(n)


def fcn():
    """An FCN-16s-shaped net: a small VGG-like encoder, score layers, a stride-2
    Deconvolution fused with a skip score (Crop + Eltwise SUM), a stride-16
    Deconvolution and a Crop back to the input (FCN's offsets)."""
    n = net("FCN-16s-small", (1, 3, 48, 48))
    n += [conv("conv1_1", "data", 16, 3, p=33), relu("relu1_1", "conv1_1"),
          pool("pool1", "conv1_1", 2, 2), conv("conv2_1", "pool1", 32, 3, p=1),
          relu("relu2_1", "conv2_1"), pool("pool2", "conv2_1", 2, 2),
          conv("conv3_1", "pool2", 32, 3, p=1), relu("relu3_1", "conv3_1"),
          pool("pool3", "conv3_1", 2, 2), conv("conv4_1", "pool3", 64, 3, p=1),
          relu("relu4_1", "conv4_1"), pool("pool4", "conv4_1", 2, 2),
          conv("conv5_1", "pool4", 64, 3, p=1), relu("relu5_1", "conv5_1"),
          pool("pool5", "conv5_1", 2, 2), conv("fc6", "pool5", 128, 3), relu("relu6", "fc6"),
          conv("score_fr", "fc6", 5, 1),
          layer("upscore2", "Deconvolution", "score_fr", "upscore2",
                "convolution_param { num_output: 5 kernel_size: 4 stride: 2 bias_term: false }"),
          conv("score_pool4", "pool4", 5, 1),
          layer("score_pool4c", "Crop", ["score_pool4", "upscore2"], "score_pool4c",
                "crop_param { axis: 2 offset: 1 }"),
          layer("fuse_pool4", "Eltwise", ["upscore2", "score_pool4c"], "fuse_pool4",
                "eltwise_param { operation: SUM }"),
          layer("upscore16", "Deconvolution", "fuse_pool4", "upscore16",
                "convolution_param { num_output: 5 kernel_size: 32 stride: 16 "
                "bias_term: false }"),
          layer("score", "Crop", ["upscore16", "data"], "score",
                "crop_param { axis: 2 offset: 27 }")]
    return text(n)


def assorted():
    """The remaining layer types in one small net: PReLU, ELU, TanH, Sigmoid, AbsVal,
    Power, BNLL, Exp, Log, LRN within channel, Eltwise PROD/MAX and coefficients,
    Slice, Flatten, Scale with bias, dilated and (h, w) convolutions. (OpenCV has no
    Bias layer; tests of Bias are against formulas.)"""
    n = net("assorted", (2, 4, 12, 12))
    n += [conv("c1", "data", 8, 3, p=1), layer("prelu", "PReLU", "c1", "c1"),
          layer("c1_slice", "Slice", "c1", ["sa", "sb"], "slice_param { axis: 1 slice_point: 4 }"),
          layer("elu", "ELU", "sa", "sa", "elu_param { alpha: 0.7 }"),
          layer("tanh", "TanH", "sb", "tb"),
          layer("prod", "Eltwise", ["sa", "tb"], "prod", "eltwise_param { operation: PROD }"),
          layer("max", "Eltwise", ["sa", "tb"], "mx", "eltwise_param { operation: MAX }"),
          layer("sum", "Eltwise", ["prod", "mx"], "sm",
                "eltwise_param { operation: SUM coeff: 0.5 coeff: -2 }"),
          layer("sig", "Sigmoid", "sm", "sig"), layer("absv", "AbsVal", "sm", "absv"),
          layer("pow", "Power", "absv", "pow", "power_param { power: 2 scale: 0.5 shift: 1 }"),
          layer("bnll", "BNLL", "sig", "bnll"),
          layer("cat", "Concat", ["bnll", "pow"], "cat"),
          lrn("lrn_w", "cat", 3, 0.5, 0.75).replace("k: 1.0", "norm_region: WITHIN_CHANNEL"),
          layer("c2", "Convolution", "lrn_w", "c2",
                "convolution_param { num_output: 6 kernel_h: 3 kernel_w: 1 pad_h: 2 pad_w: 0 "
                "dilation: 2 stride_h: 1 stride_w: 2 }"),
          layer("scale", "Scale", "c2", "c2b", "scale_param { bias_term: true }"),
          layer("flat", "Flatten", "c2b", "flat"),
          ip("fc", "flat", 10)]
    return text(n)


NETS = {"LeNet": lenet, "CIFAR-10 quick": cifar10_quick, "CaffeNet": caffenet,
        "GoogLeNet": googlenet, "ResNet": resnet, "SqueezeNet": squeezenet, "FCN": fcn}


def random_weights(model, seed=0):
    """Random blobs for a built CaffeModel, in place."""
    rng = np.random.default_rng(seed)
    for layer in model._layers:
        for name, p in zip(layer.blob_names, layer.blobs()):
            shape = tuple(p.shape)
            if layer.type == "BatchNorm":
                s = 0.5
                v = {"mean": rng.normal(0, 0.2, shape) * s,
                     "variance": rng.uniform(0.5, 1.5, shape) * s,
                     "scale_factor": np.full(shape, s)}[name]
            elif name == "bias":
                v = rng.normal(0, 0.1, shape)
            elif name == "scale":
                v = rng.uniform(0.5, 1.5, shape)
            elif name == "slope":
                v = rng.uniform(0.05, 0.3, shape)
            else:
                fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
                if layer.type == "Deconvolution":
                    fan_in = shape[0] * shape[2] * shape[3] // (layer.stride[0] ** 2)
                v = rng.normal(0, np.sqrt(2.0 / max(fan_in, 1)), shape)
            p.array[...] = v.astype(np.float32)
