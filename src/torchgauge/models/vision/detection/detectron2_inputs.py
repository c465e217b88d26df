"""Image sizes of the batches TorchBench feeds its Detectron2 models, after Detectron2's mapper.

TorchBench (``util/framework/detectron2/model_factory.py``, ``models/detectron2_maskrcnn``)
reads one batch of ``coco_2017_val_100`` through Detectron2's ``DatasetMapper`` and times the
model on it. The mapper resizes with ``ResizeShortestEdge`` (Apache-2.0,
https://github.com/facebookresearch/detectron2, ``data/transforms/augmentation_impl.py``):
evaluation to a short side of 800 (``common/data/coco.py`` test mapper, ``INPUT.MIN_SIZE_TEST``),
training to one of 640..800 drawn per image (``common/data/coco.py`` train mapper), the long side
capped at 1333 in both. The models then report detections at the image's original size
(``detector_postprocess``). COCO images are not available here; the synthetic batch stands for a
480 x 640 landscape photo, COCO's most common size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ....workload import BuildContext
from .batch import DetectionWorkload

__all__ = [
    "FULL_MAPPER",
    "SMOKE_MAPPER",
    "MapperSizes",
    "ResizedDetectionWorkload",
    "mapped_sizes",
    "original_sizes",
    "resize_shortest_edge",
]


@dataclass(frozen=True)
class MapperSizes:
    """A source image and the shortest-edge resizes of Detectron2's train and test mappers."""

    source: tuple[int, int]  # (height, width) of the image as read from disk
    train_short_edges: tuple[int, ...]  # one drawn per training image ("choice" sample style)
    test_short_edge: int
    max_size: int  # cap on the long side after resizing


# common/data/coco.py: train (640, 672, 704, 736, 768, 800), test 800, long side <= 1333.
FULL_MAPPER = MapperSizes((480, 640), (640, 672, 704, 736, 768, 800), 800, 1333)
# Smoke: the same resize rule on a 96 x 120 source (128 x 160 evaluated, the R-CNN smoke size).
SMOKE_MAPPER = MapperSizes((96, 120), (112, 128), 128, 213)


def resize_shortest_edge(size: tuple[int, int], short_edge: int, max_size: int) -> tuple[int, int]:
    """``(height, width)`` after ``ResizeShortestEdge``: short side to ``short_edge``, long side at most ``max_size``.

    Detectron2's ``ResizeShortestEdge.get_output_shape``, rounding included (``int(x + 0.5)``).
    """
    height, width = size
    scale = short_edge / min(height, width)
    new_h, new_w = (short_edge, scale * width) if height < width else (scale * height, short_edge)
    if max(new_h, new_w) > max_size:
        shrink = max_size / max(new_h, new_w)
        new_h, new_w = new_h * shrink, new_w * shrink
    return int(new_h + 0.5), int(new_w + 0.5)


def mapped_sizes(ctx: BuildContext) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(input size, original size)`` of the first image of the batch TorchBench times.

    Evaluation resizes to the test short edge; training draws one of the train short edges
    from the context's seeded generator, as the mapper draws one per image.
    """
    mapper = ctx.pick(FULL_MAPPER, SMOKE_MAPPER)
    if ctx.train:
        draw = torch.randint(len(mapper.train_short_edges), (1,), generator=ctx.generator())
        short_edge = mapper.train_short_edges[int(draw)]
    else:
        short_edge = mapper.test_short_edge
    return resize_shortest_edge(mapper.source, short_edge, mapper.max_size), mapper.source


def original_sizes(image_sizes: list[tuple[int, int]], input_size: tuple[int, int], source: tuple[int, int]):
    """Each image's size before the resize that took ``source`` to ``input_size`` (the ``height``/``width`` keys)."""
    scale = source[0] / input_size[0]
    return [(round(height * scale), round(width * scale)) for height, width in image_sizes]


class ResizedDetectionWorkload(DetectionWorkload):
    """A detector fed resized images: ``inputs`` are ``(images, image_sizes, output_sizes)``.

    Evaluation reports the detections at ``output_sizes``, each image's size before resizing
    (the ``height`` / ``width`` of Detectron2's input dicts); training ignores them.
    """

    def forward(self) -> Any:
        images, image_sizes, output_sizes = self.inputs
        if self.module.training:
            return self.module(images, image_sizes, self.targets)
        return self.module(images, image_sizes, output_sizes=output_sizes)
