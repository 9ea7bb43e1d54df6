"""``caffe.proto`` as Python data, and the protobuf message classes built from it at
run time (no ``protoc`` step): :func:`messages` returns ``NetParameter``,
``LayerParameter``, ``V1LayerParameter``, ``BlobProto``, ``SolverParameter``,
``SolverState``, ... as ``google.protobuf`` classes, which read and write Caffe's
text format (``text_format``) and binary format.

The tables below are the facts of Caffe's format (BVLC/caffe ``src/caffe/proto/
caffe.proto``): each message's fields as ``(name, number, type, label[, default])``
and each enum's values. ``type`` is a scalar type, a message name, or an enum name
(looked up inside the message first, as protobuf scopes it). One liberty: the two
``required`` fields of ``ClipParameter`` are optional here (a wire-compatible
change), so a malformed Clip layer is our named error, not protobuf's.

>>> m = messages()
>>> net = m.NetParameter()
>>> text_format.Parse('layer { name: "x" type: "ReLU" }', net)
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from ...errors import ArgumentKeyError, MissingDependencyError

__all__ = ["MESSAGES", "ENUMS", "messages", "require_protobuf"]

OPT, REP, PACKED = "optional", "repeated", "packed"

# fmt: off
MESSAGES = {
    'BlobShape': [('dim', 1, 'int64', PACKED)],
    'BlobProto': [('shape', 7, 'BlobShape', OPT), ('data', 5, 'float', PACKED),
        ('diff', 6, 'float', PACKED), ('double_data', 8, 'double', PACKED),
        ('double_diff', 9, 'double', PACKED), ('num', 1, 'int32', OPT, 0),
        ('channels', 2, 'int32', OPT, 0), ('height', 3, 'int32', OPT, 0),
        ('width', 4, 'int32', OPT, 0)],
    'BlobProtoVector': [('blobs', 1, 'BlobProto', REP)],
    'Datum': [('channels', 1, 'int32', OPT), ('height', 2, 'int32', OPT),
        ('width', 3, 'int32', OPT), ('data', 4, 'bytes', OPT), ('label', 5, 'int32', OPT),
        ('float_data', 6, 'float', REP), ('encoded', 7, 'bool', OPT, False)],
    'FillerParameter': [('type', 1, 'string', OPT, 'constant'), ('value', 2, 'float', OPT, 0.0),
        ('min', 3, 'float', OPT, 0.0), ('max', 4, 'float', OPT, 1.0),
        ('mean', 5, 'float', OPT, 0.0), ('std', 6, 'float', OPT, 1.0),
        ('sparse', 7, 'int32', OPT, -1), ('variance_norm', 8, 'VarianceNorm', OPT, 'FAN_IN')],
    'NetParameter': [('name', 1, 'string', OPT), ('input', 3, 'string', REP),
        ('input_shape', 8, 'BlobShape', REP), ('input_dim', 4, 'int32', REP),
        ('force_backward', 5, 'bool', OPT, False), ('state', 6, 'NetState', OPT),
        ('debug_info', 7, 'bool', OPT, False), ('layer', 100, 'LayerParameter', REP),
        ('layers', 2, 'V1LayerParameter', REP)],
    'SolverParameter': [('net', 24, 'string', OPT), ('net_param', 25, 'NetParameter', OPT),
        ('train_net', 1, 'string', OPT), ('test_net', 2, 'string', REP),
        ('train_net_param', 21, 'NetParameter', OPT), ('test_net_param', 22, 'NetParameter', REP),
        ('train_state', 26, 'NetState', OPT), ('test_state', 27, 'NetState', REP),
        ('test_iter', 3, 'int32', REP), ('test_interval', 4, 'int32', OPT, 0),
        ('test_compute_loss', 19, 'bool', OPT, False),
        ('test_initialization', 32, 'bool', OPT, True), ('base_lr', 5, 'float', OPT),
        ('display', 6, 'int32', OPT), ('average_loss', 33, 'int32', OPT, 1),
        ('max_iter', 7, 'int32', OPT), ('iter_size', 36, 'int32', OPT, 1),
        ('lr_policy', 8, 'string', OPT), ('gamma', 9, 'float', OPT), ('power', 10, 'float', OPT),
        ('momentum', 11, 'float', OPT), ('weight_decay', 12, 'float', OPT),
        ('regularization_type', 29, 'string', OPT, 'L2'), ('stepsize', 13, 'int32', OPT),
        ('stepvalue', 34, 'int32', REP), ('clip_gradients', 35, 'float', OPT, -1.0),
        ('snapshot', 14, 'int32', OPT, 0), ('snapshot_prefix', 15, 'string', OPT),
        ('snapshot_diff', 16, 'bool', OPT, False),
        ('snapshot_format', 37, 'SnapshotFormat', OPT, 'BINARYPROTO'),
        ('solver_mode', 17, 'SolverMode', OPT, 'GPU'), ('device_id', 18, 'int32', OPT, 0),
        ('random_seed', 20, 'int64', OPT, -1), ('type', 40, 'string', OPT, 'SGD'),
        ('delta', 31, 'float', OPT, 1e-08), ('momentum2', 39, 'float', OPT, 0.999),
        ('rms_decay', 38, 'float', OPT, 0.99), ('debug_info', 23, 'bool', OPT, False),
        ('snapshot_after_train', 28, 'bool', OPT, True),
        ('solver_type', 30, 'SolverType', OPT, 'SGD'),
        ('layer_wise_reduce', 41, 'bool', OPT, True), ('weights', 42, 'string', REP)],
    'SolverState': [('iter', 1, 'int32', OPT), ('learned_net', 2, 'string', OPT),
        ('history', 3, 'BlobProto', REP), ('current_step', 4, 'int32', OPT, 0)],
    'NetState': [('phase', 1, 'Phase', OPT, 'TEST'), ('level', 2, 'int32', OPT, 0),
        ('stage', 3, 'string', REP)],
    'NetStateRule': [('phase', 1, 'Phase', OPT), ('min_level', 2, 'int32', OPT),
        ('max_level', 3, 'int32', OPT), ('stage', 4, 'string', REP),
        ('not_stage', 5, 'string', REP)],
    'ParamSpec': [('name', 1, 'string', OPT), ('share_mode', 2, 'DimCheckMode', OPT),
        ('lr_mult', 3, 'float', OPT, 1.0), ('decay_mult', 4, 'float', OPT, 1.0)],
    'LayerParameter': [('name', 1, 'string', OPT), ('type', 2, 'string', OPT),
        ('bottom', 3, 'string', REP), ('top', 4, 'string', REP), ('phase', 10, 'Phase', OPT),
        ('loss_weight', 5, 'float', REP), ('param', 6, 'ParamSpec', REP),
        ('blobs', 7, 'BlobProto', REP), ('propagate_down', 11, 'bool', REP),
        ('include', 8, 'NetStateRule', REP), ('exclude', 9, 'NetStateRule', REP),
        ('transform_param', 100, 'TransformationParameter', OPT),
        ('loss_param', 101, 'LossParameter', OPT),
        ('accuracy_param', 102, 'AccuracyParameter', OPT),
        ('argmax_param', 103, 'ArgMaxParameter', OPT),
        ('batch_norm_param', 139, 'BatchNormParameter', OPT),
        ('bias_param', 141, 'BiasParameter', OPT), ('clip_param', 148, 'ClipParameter', OPT),
        ('concat_param', 104, 'ConcatParameter', OPT),
        ('contrastive_loss_param', 105, 'ContrastiveLossParameter', OPT),
        ('convolution_param', 106, 'ConvolutionParameter', OPT),
        ('crop_param', 144, 'CropParameter', OPT), ('data_param', 107, 'DataParameter', OPT),
        ('dropout_param', 108, 'DropoutParameter', OPT),
        ('dummy_data_param', 109, 'DummyDataParameter', OPT),
        ('eltwise_param', 110, 'EltwiseParameter', OPT), ('elu_param', 140, 'ELUParameter', OPT),
        ('embed_param', 137, 'EmbedParameter', OPT), ('exp_param', 111, 'ExpParameter', OPT),
        ('flatten_param', 135, 'FlattenParameter', OPT),
        ('hdf5_data_param', 112, 'HDF5DataParameter', OPT),
        ('hdf5_output_param', 113, 'HDF5OutputParameter', OPT),
        ('hinge_loss_param', 114, 'HingeLossParameter', OPT),
        ('image_data_param', 115, 'ImageDataParameter', OPT),
        ('infogain_loss_param', 116, 'InfogainLossParameter', OPT),
        ('inner_product_param', 117, 'InnerProductParameter', OPT),
        ('input_param', 143, 'InputParameter', OPT), ('log_param', 134, 'LogParameter', OPT),
        ('lrn_param', 118, 'LRNParameter', OPT),
        ('memory_data_param', 119, 'MemoryDataParameter', OPT),
        ('mvn_param', 120, 'MVNParameter', OPT),
        ('parameter_param', 145, 'ParameterParameter', OPT),
        ('pooling_param', 121, 'PoolingParameter', OPT),
        ('power_param', 122, 'PowerParameter', OPT), ('prelu_param', 131, 'PReLUParameter', OPT),
        ('python_param', 130, 'PythonParameter', OPT),
        ('recurrent_param', 146, 'RecurrentParameter', OPT),
        ('reduction_param', 136, 'ReductionParameter', OPT),
        ('relu_param', 123, 'ReLUParameter', OPT),
        ('reshape_param', 133, 'ReshapeParameter', OPT),
        ('scale_param', 142, 'ScaleParameter', OPT),
        ('sigmoid_param', 124, 'SigmoidParameter', OPT),
        ('softmax_param', 125, 'SoftmaxParameter', OPT), ('spp_param', 132, 'SPPParameter', OPT),
        ('slice_param', 126, 'SliceParameter', OPT), ('swish_param', 147, 'SwishParameter', OPT),
        ('tanh_param', 127, 'TanHParameter', OPT),
        ('threshold_param', 128, 'ThresholdParameter', OPT),
        ('tile_param', 138, 'TileParameter', OPT),
        ('window_data_param', 129, 'WindowDataParameter', OPT)],
    'TransformationParameter': [('scale', 1, 'float', OPT, 1.0),
        ('mirror', 2, 'bool', OPT, False), ('crop_size', 3, 'uint32', OPT, 0),
        ('mean_file', 4, 'string', OPT), ('mean_value', 5, 'float', REP),
        ('force_color', 6, 'bool', OPT, False), ('force_gray', 7, 'bool', OPT, False)],
    'LossParameter': [('ignore_label', 1, 'int32', OPT),
        ('normalization', 3, 'NormalizationMode', OPT, 'VALID'), ('normalize', 2, 'bool', OPT)],
    'AccuracyParameter': [('top_k', 1, 'uint32', OPT, 1), ('axis', 2, 'int32', OPT, 1),
        ('ignore_label', 3, 'int32', OPT)],
    'ArgMaxParameter': [('out_max_val', 1, 'bool', OPT, False), ('top_k', 2, 'uint32', OPT, 1),
        ('axis', 3, 'int32', OPT)],
    'ClipParameter': [('min', 1, 'float', OPT), ('max', 2, 'float', OPT)],
    'ConcatParameter': [('axis', 2, 'int32', OPT, 1), ('concat_dim', 1, 'uint32', OPT, 1)],
    'BatchNormParameter': [('use_global_stats', 1, 'bool', OPT),
        ('moving_average_fraction', 2, 'float', OPT, 0.999), ('eps', 3, 'float', OPT, 1e-05)],
    'BiasParameter': [('axis', 1, 'int32', OPT, 1), ('num_axes', 2, 'int32', OPT, 1),
        ('filler', 3, 'FillerParameter', OPT)],
    'ContrastiveLossParameter': [('margin', 1, 'float', OPT, 1.0),
        ('legacy_version', 2, 'bool', OPT, False)],
    'ConvolutionParameter': [('num_output', 1, 'uint32', OPT),
        ('bias_term', 2, 'bool', OPT, True), ('pad', 3, 'uint32', REP),
        ('kernel_size', 4, 'uint32', REP), ('stride', 6, 'uint32', REP),
        ('dilation', 18, 'uint32', REP), ('pad_h', 9, 'uint32', OPT, 0),
        ('pad_w', 10, 'uint32', OPT, 0), ('kernel_h', 11, 'uint32', OPT),
        ('kernel_w', 12, 'uint32', OPT), ('stride_h', 13, 'uint32', OPT),
        ('stride_w', 14, 'uint32', OPT), ('group', 5, 'uint32', OPT, 1),
        ('weight_filler', 7, 'FillerParameter', OPT), ('bias_filler', 8, 'FillerParameter', OPT),
        ('engine', 15, 'Engine', OPT, 'DEFAULT'), ('axis', 16, 'int32', OPT, 1),
        ('force_nd_im2col', 17, 'bool', OPT, False)],
    'CropParameter': [('axis', 1, 'int32', OPT, 2), ('offset', 2, 'uint32', REP)],
    'DataParameter': [('source', 1, 'string', OPT), ('batch_size', 4, 'uint32', OPT),
        ('rand_skip', 7, 'uint32', OPT, 0), ('backend', 8, 'DB', OPT, 'LEVELDB'),
        ('scale', 2, 'float', OPT, 1.0), ('mean_file', 3, 'string', OPT),
        ('crop_size', 5, 'uint32', OPT, 0), ('mirror', 6, 'bool', OPT, False),
        ('force_encoded_color', 9, 'bool', OPT, False), ('prefetch', 10, 'uint32', OPT, 4)],
    'DropoutParameter': [('dropout_ratio', 1, 'float', OPT, 0.5)],
    'DummyDataParameter': [('data_filler', 1, 'FillerParameter', REP),
        ('shape', 6, 'BlobShape', REP), ('num', 2, 'uint32', REP), ('channels', 3, 'uint32', REP),
        ('height', 4, 'uint32', REP), ('width', 5, 'uint32', REP)],
    'EltwiseParameter': [('operation', 1, 'EltwiseOp', OPT, 'SUM'), ('coeff', 2, 'float', REP),
        ('stable_prod_grad', 3, 'bool', OPT, True)],
    'ELUParameter': [('alpha', 1, 'float', OPT, 1.0)],
    'EmbedParameter': [('num_output', 1, 'uint32', OPT), ('input_dim', 2, 'uint32', OPT),
        ('bias_term', 3, 'bool', OPT, True), ('weight_filler', 4, 'FillerParameter', OPT),
        ('bias_filler', 5, 'FillerParameter', OPT)],
    'ExpParameter': [('base', 1, 'float', OPT, -1.0), ('scale', 2, 'float', OPT, 1.0),
        ('shift', 3, 'float', OPT, 0.0)],
    'FlattenParameter': [('axis', 1, 'int32', OPT, 1), ('end_axis', 2, 'int32', OPT, -1)],
    'HDF5DataParameter': [('source', 1, 'string', OPT), ('batch_size', 2, 'uint32', OPT),
        ('shuffle', 3, 'bool', OPT, False)],
    'HDF5OutputParameter': [('file_name', 1, 'string', OPT)],
    'HingeLossParameter': [('norm', 1, 'Norm', OPT, 'L1')],
    'ImageDataParameter': [('source', 1, 'string', OPT), ('batch_size', 4, 'uint32', OPT, 1),
        ('rand_skip', 7, 'uint32', OPT, 0), ('shuffle', 8, 'bool', OPT, False),
        ('new_height', 9, 'uint32', OPT, 0), ('new_width', 10, 'uint32', OPT, 0),
        ('is_color', 11, 'bool', OPT, True), ('scale', 2, 'float', OPT, 1.0),
        ('mean_file', 3, 'string', OPT), ('crop_size', 5, 'uint32', OPT, 0),
        ('mirror', 6, 'bool', OPT, False), ('root_folder', 12, 'string', OPT, '')],
    'InfogainLossParameter': [('source', 1, 'string', OPT), ('axis', 2, 'int32', OPT, 1)],
    'InnerProductParameter': [('num_output', 1, 'uint32', OPT),
        ('bias_term', 2, 'bool', OPT, True), ('weight_filler', 3, 'FillerParameter', OPT),
        ('bias_filler', 4, 'FillerParameter', OPT), ('axis', 5, 'int32', OPT, 1),
        ('transpose', 6, 'bool', OPT, False)],
    'InputParameter': [('shape', 1, 'BlobShape', REP)],
    'LogParameter': [('base', 1, 'float', OPT, -1.0), ('scale', 2, 'float', OPT, 1.0),
        ('shift', 3, 'float', OPT, 0.0)],
    'LRNParameter': [('local_size', 1, 'uint32', OPT, 5), ('alpha', 2, 'float', OPT, 1.0),
        ('beta', 3, 'float', OPT, 0.75), ('norm_region', 4, 'NormRegion', OPT, 'ACROSS_CHANNELS'),
        ('k', 5, 'float', OPT, 1.0), ('engine', 6, 'Engine', OPT, 'DEFAULT')],
    'MemoryDataParameter': [('batch_size', 1, 'uint32', OPT), ('channels', 2, 'uint32', OPT),
        ('height', 3, 'uint32', OPT), ('width', 4, 'uint32', OPT)],
    'MVNParameter': [('normalize_variance', 1, 'bool', OPT, True),
        ('across_channels', 2, 'bool', OPT, False), ('eps', 3, 'float', OPT, 1e-09)],
    'ParameterParameter': [('shape', 1, 'BlobShape', OPT)],
    'PoolingParameter': [('pool', 1, 'PoolMethod', OPT, 'MAX'), ('pad', 4, 'uint32', OPT, 0),
        ('pad_h', 9, 'uint32', OPT, 0), ('pad_w', 10, 'uint32', OPT, 0),
        ('kernel_size', 2, 'uint32', OPT), ('kernel_h', 5, 'uint32', OPT),
        ('kernel_w', 6, 'uint32', OPT), ('stride', 3, 'uint32', OPT, 1),
        ('stride_h', 7, 'uint32', OPT), ('stride_w', 8, 'uint32', OPT),
        ('engine', 11, 'Engine', OPT, 'DEFAULT'), ('global_pooling', 12, 'bool', OPT, False),
        ('round_mode', 13, 'RoundMode', OPT, 'CEIL')],
    'PowerParameter': [('power', 1, 'float', OPT, 1.0), ('scale', 2, 'float', OPT, 1.0),
        ('shift', 3, 'float', OPT, 0.0)],
    'PythonParameter': [('module', 1, 'string', OPT), ('layer', 2, 'string', OPT),
        ('param_str', 3, 'string', OPT, ''), ('share_in_parallel', 4, 'bool', OPT, False)],
    'RecurrentParameter': [('num_output', 1, 'uint32', OPT, 0),
        ('weight_filler', 2, 'FillerParameter', OPT), ('bias_filler', 3, 'FillerParameter', OPT),
        ('debug_info', 4, 'bool', OPT, False), ('expose_hidden', 5, 'bool', OPT, False)],
    'ReductionParameter': [('operation', 1, 'ReductionOp', OPT, 'SUM'),
        ('axis', 2, 'int32', OPT, 0), ('coeff', 3, 'float', OPT, 1.0)],
    'ReLUParameter': [('negative_slope', 1, 'float', OPT, 0.0),
        ('engine', 2, 'Engine', OPT, 'DEFAULT')],
    'ReshapeParameter': [('shape', 1, 'BlobShape', OPT), ('axis', 2, 'int32', OPT, 0),
        ('num_axes', 3, 'int32', OPT, -1)],
    'ScaleParameter': [('axis', 1, 'int32', OPT, 1), ('num_axes', 2, 'int32', OPT, 1),
        ('filler', 3, 'FillerParameter', OPT), ('bias_term', 4, 'bool', OPT, False),
        ('bias_filler', 5, 'FillerParameter', OPT)],
    'SigmoidParameter': [('engine', 1, 'Engine', OPT, 'DEFAULT')],
    'SliceParameter': [('axis', 3, 'int32', OPT, 1), ('slice_point', 2, 'uint32', REP),
        ('slice_dim', 1, 'uint32', OPT, 1)],
    'SoftmaxParameter': [('engine', 1, 'Engine', OPT, 'DEFAULT'), ('axis', 2, 'int32', OPT, 1)],
    'SwishParameter': [('beta', 1, 'float', OPT, 1.0)],
    'TanHParameter': [('engine', 1, 'Engine', OPT, 'DEFAULT')],
    'TileParameter': [('axis', 1, 'int32', OPT, 1), ('tiles', 2, 'int32', OPT)],
    'ThresholdParameter': [('threshold', 1, 'float', OPT, 0.0)],
    'WindowDataParameter': [('source', 1, 'string', OPT), ('scale', 2, 'float', OPT, 1.0),
        ('mean_file', 3, 'string', OPT), ('batch_size', 4, 'uint32', OPT),
        ('crop_size', 5, 'uint32', OPT, 0), ('mirror', 6, 'bool', OPT, False),
        ('fg_threshold', 7, 'float', OPT, 0.5), ('bg_threshold', 8, 'float', OPT, 0.5),
        ('fg_fraction', 9, 'float', OPT, 0.25), ('context_pad', 10, 'uint32', OPT, 0),
        ('crop_mode', 11, 'string', OPT, 'warp'), ('cache_images', 12, 'bool', OPT, False),
        ('root_folder', 13, 'string', OPT, '')],
    'SPPParameter': [('pyramid_height', 1, 'uint32', OPT), ('pool', 2, 'PoolMethod', OPT, 'MAX'),
        ('engine', 6, 'Engine', OPT, 'DEFAULT')],
    'V1LayerParameter': [('bottom', 2, 'string', REP), ('top', 3, 'string', REP),
        ('name', 4, 'string', OPT), ('include', 32, 'NetStateRule', REP),
        ('exclude', 33, 'NetStateRule', REP), ('type', 5, 'LayerType', OPT),
        ('blobs', 6, 'BlobProto', REP), ('param', 1001, 'string', REP),
        ('blob_share_mode', 1002, 'DimCheckMode', REP), ('blobs_lr', 7, 'float', REP),
        ('weight_decay', 8, 'float', REP), ('loss_weight', 35, 'float', REP),
        ('accuracy_param', 27, 'AccuracyParameter', OPT),
        ('argmax_param', 23, 'ArgMaxParameter', OPT), ('concat_param', 9, 'ConcatParameter', OPT),
        ('contrastive_loss_param', 40, 'ContrastiveLossParameter', OPT),
        ('convolution_param', 10, 'ConvolutionParameter', OPT),
        ('data_param', 11, 'DataParameter', OPT), ('dropout_param', 12, 'DropoutParameter', OPT),
        ('dummy_data_param', 26, 'DummyDataParameter', OPT),
        ('eltwise_param', 24, 'EltwiseParameter', OPT), ('exp_param', 41, 'ExpParameter', OPT),
        ('hdf5_data_param', 13, 'HDF5DataParameter', OPT),
        ('hdf5_output_param', 14, 'HDF5OutputParameter', OPT),
        ('hinge_loss_param', 29, 'HingeLossParameter', OPT),
        ('image_data_param', 15, 'ImageDataParameter', OPT),
        ('infogain_loss_param', 16, 'InfogainLossParameter', OPT),
        ('inner_product_param', 17, 'InnerProductParameter', OPT),
        ('lrn_param', 18, 'LRNParameter', OPT),
        ('memory_data_param', 22, 'MemoryDataParameter', OPT),
        ('mvn_param', 34, 'MVNParameter', OPT), ('pooling_param', 19, 'PoolingParameter', OPT),
        ('power_param', 21, 'PowerParameter', OPT), ('relu_param', 30, 'ReLUParameter', OPT),
        ('sigmoid_param', 38, 'SigmoidParameter', OPT),
        ('softmax_param', 39, 'SoftmaxParameter', OPT),
        ('slice_param', 31, 'SliceParameter', OPT), ('tanh_param', 37, 'TanHParameter', OPT),
        ('threshold_param', 25, 'ThresholdParameter', OPT),
        ('window_data_param', 20, 'WindowDataParameter', OPT),
        ('transform_param', 36, 'TransformationParameter', OPT),
        ('loss_param', 42, 'LossParameter', OPT), ('layer', 1, 'V0LayerParameter', OPT)],
    'V0LayerParameter': [('name', 1, 'string', OPT), ('type', 2, 'string', OPT),
        ('num_output', 3, 'uint32', OPT), ('biasterm', 4, 'bool', OPT, True),
        ('weight_filler', 5, 'FillerParameter', OPT), ('bias_filler', 6, 'FillerParameter', OPT),
        ('pad', 7, 'uint32', OPT, 0), ('kernelsize', 8, 'uint32', OPT),
        ('group', 9, 'uint32', OPT, 1), ('stride', 10, 'uint32', OPT, 1),
        ('pool', 11, 'PoolMethod', OPT, 'MAX'), ('dropout_ratio', 12, 'float', OPT, 0.5),
        ('local_size', 13, 'uint32', OPT, 5), ('alpha', 14, 'float', OPT, 1.0),
        ('beta', 15, 'float', OPT, 0.75), ('k', 22, 'float', OPT, 1.0),
        ('source', 16, 'string', OPT), ('scale', 17, 'float', OPT, 1.0),
        ('meanfile', 18, 'string', OPT), ('batchsize', 19, 'uint32', OPT),
        ('cropsize', 20, 'uint32', OPT, 0), ('mirror', 21, 'bool', OPT, False),
        ('blobs', 50, 'BlobProto', REP), ('blobs_lr', 51, 'float', REP),
        ('weight_decay', 52, 'float', REP), ('rand_skip', 53, 'uint32', OPT, 0),
        ('det_fg_threshold', 54, 'float', OPT, 0.5), ('det_bg_threshold', 55, 'float', OPT, 0.5),
        ('det_fg_fraction', 56, 'float', OPT, 0.25), ('det_context_pad', 58, 'uint32', OPT, 0),
        ('det_crop_mode', 59, 'string', OPT, 'warp'), ('new_num', 60, 'int32', OPT, 0),
        ('new_channels', 61, 'int32', OPT, 0), ('new_height', 62, 'int32', OPT, 0),
        ('new_width', 63, 'int32', OPT, 0), ('shuffle_images', 64, 'bool', OPT, False),
        ('concat_dim', 65, 'uint32', OPT, 1),
        ('hdf5_output_param', 1001, 'HDF5OutputParameter', OPT)],
    'PReLUParameter': [('filler', 1, 'FillerParameter', OPT),
        ('channel_shared', 2, 'bool', OPT, False)],
}
ENUMS = {
    'FillerParameter.VarianceNorm': {'FAN_IN': 0, 'FAN_OUT': 1, 'AVERAGE': 2},
    'SolverParameter.SnapshotFormat': {'HDF5': 0, 'BINARYPROTO': 1},
    'SolverParameter.SolverMode': {'CPU': 0, 'GPU': 1},
    'SolverParameter.SolverType': {'SGD': 0, 'NESTEROV': 1, 'ADAGRAD': 2, 'RMSPROP': 3,
        'ADADELTA': 4, 'ADAM': 5},
    'Phase': {'TRAIN': 0, 'TEST': 1},
    'ParamSpec.DimCheckMode': {'STRICT': 0, 'PERMISSIVE': 1},
    'LossParameter.NormalizationMode': {'FULL': 0, 'VALID': 1, 'BATCH_SIZE': 2, 'NONE': 3},
    'ConvolutionParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'DataParameter.DB': {'LEVELDB': 0, 'LMDB': 1},
    'EltwiseParameter.EltwiseOp': {'PROD': 0, 'SUM': 1, 'MAX': 2},
    'HingeLossParameter.Norm': {'L1': 1, 'L2': 2},
    'LRNParameter.NormRegion': {'ACROSS_CHANNELS': 0, 'WITHIN_CHANNEL': 1},
    'LRNParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'PoolingParameter.PoolMethod': {'MAX': 0, 'AVE': 1, 'STOCHASTIC': 2},
    'PoolingParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'PoolingParameter.RoundMode': {'CEIL': 0, 'FLOOR': 1},
    'ReductionParameter.ReductionOp': {'SUM': 1, 'ASUM': 2, 'SUMSQ': 3, 'MEAN': 4},
    'ReLUParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'SigmoidParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'SoftmaxParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'TanHParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'SPPParameter.PoolMethod': {'MAX': 0, 'AVE': 1, 'STOCHASTIC': 2},
    'SPPParameter.Engine': {'DEFAULT': 0, 'CAFFE': 1, 'CUDNN': 2},
    'V1LayerParameter.LayerType': {'NONE': 0, 'ABSVAL': 35, 'ACCURACY': 1, 'ARGMAX': 30,
        'BNLL': 2, 'CONCAT': 3, 'CONTRASTIVE_LOSS': 37, 'CONVOLUTION': 4, 'DATA': 5,
        'DECONVOLUTION': 39, 'DROPOUT': 6, 'DUMMY_DATA': 32, 'EUCLIDEAN_LOSS': 7, 'ELTWISE': 25,
        'EXP': 38, 'FLATTEN': 8, 'HDF5_DATA': 9, 'HDF5_OUTPUT': 10, 'HINGE_LOSS': 28,
        'IM2COL': 11, 'IMAGE_DATA': 12, 'INFOGAIN_LOSS': 13, 'INNER_PRODUCT': 14, 'LRN': 15,
        'MEMORY_DATA': 29, 'MULTINOMIAL_LOGISTIC_LOSS': 16, 'MVN': 34, 'POOLING': 17, 'POWER': 26,
        'RELU': 18, 'SIGMOID': 19, 'SIGMOID_CROSS_ENTROPY_LOSS': 27, 'SILENCE': 36, 'SOFTMAX': 20,
        'SOFTMAX_LOSS': 21, 'SPLIT': 22, 'SLICE': 33, 'TANH': 23, 'WINDOW_DATA': 24,
        'THRESHOLD': 31},
    'V1LayerParameter.DimCheckMode': {'STRICT': 0, 'PERMISSIVE': 1},
    'V0LayerParameter.PoolMethod': {'MAX': 0, 'AVE': 1, 'STOCHASTIC': 2},
}
# fmt: on

_SCALARS = {  # protobuf's FieldDescriptorProto.Type numbers
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "bool": 8, "string": 9,
    "bytes": 12, "uint32": 13,
}
_MESSAGE, _ENUM = 11, 14
_PACKAGE = "caffe"


def require_protobuf(what: str = "tapegrad.compat.caffe"):
    """Import ``google.protobuf`` or say how to install it."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(
            f"{what} reads Caffe's files with the 'protobuf' package, which is not "
            "installed; run: pip install 'tapegrad[caffe]'") from e


def _resolve(scope: str, typ: str) -> tuple[int, str | None]:
    """(protobuf type number, fully qualified type name) of a field's ``typ``."""
    if typ in _SCALARS:
        return _SCALARS[typ], None
    for name in (f"{scope}.{typ}", typ):  # protobuf looks inside the message first
        if name in ENUMS:
            return _ENUM, f".{_PACKAGE}.{name}"
        if name in MESSAGES:
            return _MESSAGE, f".{_PACKAGE}.{name}"
    raise ArgumentKeyError(f"caffe schema: {scope} refers to an unknown type {typ!r}")


def _default_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _file_descriptor():
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name="tapegrad_caffe.proto", package=_PACKAGE,
                                             syntax="proto2")
    nested_enums: dict[str, list] = {}
    for name, values in ENUMS.items():
        owner, _, short = name.rpartition(".")
        nested_enums.setdefault(owner, []).append((short, values))
    for short, values in nested_enums.get("", []):
        e = fdp.enum_type.add(name=short)
        for k, v in values.items():
            e.value.add(name=k, number=v)
    for name, fields in MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        for short, values in nested_enums.get(name, []):
            e = msg.enum_type.add(name=short)
            for k, v in values.items():
                e.value.add(name=k, number=v)
        for fname, number, typ, label, *default in fields:
            kind, type_name = _resolve(name, typ)
            f = msg.field.add(name=fname, number=number, type=kind,
                              label=1 if label == OPT else 3)
            if type_name:
                f.type_name = type_name
            if label == PACKED:
                f.options.packed = True
            if default:
                f.default_value = _default_text(default[0])
    return fdp


@functools.lru_cache(maxsize=1)
def messages() -> SimpleNamespace:
    """Every message of the schema as a protobuf class, by its Caffe name
    (``messages().NetParameter``), built once per process."""
    require_protobuf()
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    if hasattr(message_factory, "GetMessageClass"):
        get = message_factory.GetMessageClass
    else:  # protobuf < 4.21
        get = message_factory.MessageFactory(pool).GetPrototype
    return SimpleNamespace(**{name: get(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
                              for name in MESSAGES})
