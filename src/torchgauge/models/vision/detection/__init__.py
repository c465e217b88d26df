"""Detection, segmentation and OCR models (issue 4), one file per architecture family.

Inference output format (every box detector here)::

    [  # one dict per image
        {
            "boxes": Tensor (N, 4) float, (x1, y1, x2, y2) in input-image pixels (or, for
                models fed resized images, in pixels of the image before resizing),
            "scores": Tensor (N,) float, highest first,
            "labels": Tensor (N,) int64, in the model's own class ids,
            "masks": Tensor (N, 1, H, W) (instance segmentation only): bool for Detectron2's
                models (probability >= 0.5), float probabilities for torchvision's,
        },
        ...
    ]
"""

from . import (
    efficientdet,  # noqa: F401  (registers models)
    fcos,  # noqa: F401  (registers models)
    rcnn,  # noqa: F401  (registers models)
    retinanet,  # noqa: F401  (registers models)
    torchvision_rcnn,  # noqa: F401  (registers models)
    yolov3,  # noqa: F401  (registers models)
    yolov3_torchbench,  # noqa: F401  (registers models)
)
