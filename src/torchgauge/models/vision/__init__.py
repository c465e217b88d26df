"""Vision models: classification families here; detection and generation in subpackages."""

from . import detection, generation  # noqa: F401  (registers models)
from . import ocr  # noqa: F401  (registers models)
from . import (  # noqa: F401  (registers models)
    alexnet,
    cifar_resnet,
    densenet,
    mobilenet,
    nfnet,
    quantized,
    regnet,
    resnest,
    resnet,
    shufflenet,
    squeezenet,
    vgg,
    vit,
    vovnet,
)
