"""Document OCR models (issue 4): docTR's text detector and word recogniser in plain PyTorch.

- :mod:`.db_net`: ``doctr_det_predictor``, DBNet text detection; outputs per-page text boxes in
  the detection format of :mod:`torchgauge.models.vision.detection` (one class, "words").
- :mod:`.crnn`: ``doctr_reco_predictor``, CRNN word recognition with CTC; outputs greedy-decoded
  character ids, lengths and confidences per crop.

Each module's docstring documents its exact output format.
"""

from . import crnn, db_net  # noqa: F401  (registers models)
