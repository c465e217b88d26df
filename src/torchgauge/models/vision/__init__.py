"""Vision models: classification families here; detection and generation in subpackages."""

from . import (  # noqa: F401  (registers models)  # noqa: F401  (registers models)
    alexnet,
    cifar_resnet,
    decorrelated_batch_norm,
    densenet,
    detection,
    face_recognition,
    generation,
    geometry,
    mobilenet,
    mri_varnet,
    nfnet,
    ocr,  # noqa: F401  (registers models)
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
