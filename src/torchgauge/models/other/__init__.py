"""other models: one file per architecture family, imported here to register them."""

from . import (  # noqa: F401  (registers models)
    basic_gnn,
    differential_privacy,
    fourier_neural_operator,
    gaussian_process,
    lennard_jones,
    linear_chain_crf,
    maml,
    moco,
    pyhpc_equation_of_state,
    pyhpc_isoneutral_mixing,
    pyhpc_turbulent_kinetic_energy,
)
