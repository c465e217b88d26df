"""Scientific computing: ocean kernels (pyhpc), molecular potentials and GNNs, neural operators for PDEs
and weather, Koopman analysis of dynamical systems.

``ocean_grid`` holds what the three pyhpc kernels share and registers no model.
"""

from . import (  # noqa: F401  (registers models)
    afno,
    dimenet_pp,
    fourier_neural_operator,
    koopman,
    lennard_jones,
    pyhpc_equation_of_state,
    pyhpc_equation_of_state_closed_form,
    pyhpc_isoneutral_mixing,
    pyhpc_turbulent_kinetic_energy,
    schnet,
)
