"""Vision models: classification families here; detection and generation in subpackages."""

from . import detection, generation, geometry  # noqa: F401  (registers models)
from . import ocr  # noqa: F401  (registers models)
from . import (  # noqa: F401  (registers models)
    alexnet,
    cifar_resnet,
    decorrelated_batch_norm,
    densenet,
    face_recognition,
    mobilenet,
    mri_varnet,
    nfnet,
    quantized,
    regnet,
    resnest,
    resnet,
    segnet,
    shufflenet,
    spatial_transformer,
    squeezenet,
    swin,
    vgg,
    video_resnet,
    vit,
    vovnet,
)
