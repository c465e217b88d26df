"""Speech models: one file per architecture family, imported here to register them."""

from . import (  # noqa: F401  (registers models)
    conformer,
    ddsp,
    deepspeech2,
    demucs,
    hifigan,
    rnnt,
    speaker_encoder,
    speech_transformer,
    tacotron1,
    tacotron2,
    waveglow,
    wavenet,
)
