"""Meta-learning: MAML's second-order meta-update, functional (Omniglot, sinusoid) and as TorchBench's learner."""

from . import maml, maml_strided_conv  # noqa: F401  (registers models)
