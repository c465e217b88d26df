"""TorchBench run.py's default precisions that its framework factories declare, as registry data.

run.py's ``--precision`` defaults to ``get_precision_default`` (``util/extra_args.py:86-101`` at
the commit ``docs/torchbench-fidelity.json`` cites): a model's ``DEFAULT_EVAL_CUDA_PRECISION`` for
eval on CUDA, its ``DEFAULT_TRAIN_CUDA_PRECISION`` for train on CUDA, else fp32. A model built by
one of TorchBench's framework factories inherits the factory's declaration; the models that
subclass these factories pass the matching constant to ``register_model(torchbench_precision=...)``
(models declaring their own, such as ``pytorch_unet``, write theirs at the registration). The
fidelity table records, per model, which class its ``__init__.py`` subclasses, and
``tests/models/test_torchbench_fidelity.py`` checks each registration against it.
"""

from __future__ import annotations

__all__ = ["DETECTRON2_FACTORY", "HUGGINGFACE_FACTORY", "TIMM_FACTORY", "TORCHVISION_FACTORY"]

# util/framework/vision/model_factory.py:18 (TorchVisionModel)
TORCHVISION_FACTORY = {"cuda": {"eval": "fp16"}}
# util/framework/timm/model_factory.py:25 (TimmModel; ExtendedTimmModel's fp32 list names none of ours)
TIMM_FACTORY = {"cuda": {"eval": "fp16"}}
# util/framework/huggingface/model_factory.py:24 (HuggingFaceModel, HuggingFaceGenerationModel)
HUGGINGFACE_FACTORY = {"cuda": {"eval": "fp16"}}
# util/framework/detectron2/model_factory.py:90 (Detectron2Model)
DETECTRON2_FACTORY = {"cuda": {"eval": "fp16"}}
