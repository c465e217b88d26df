"""Speech models: one file per architecture family, imported here to register them."""

from . import conformer, demucs, rnnt, speaker_encoder, speech_transformer, tacotron2  # noqa: F401  (registers models)
