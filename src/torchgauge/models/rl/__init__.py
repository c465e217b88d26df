"""Reinforcement-learning models: one file per architecture family, imported here to register them.

``envs.py`` holds the in-torch environments and the replay buffer they share.
"""

from . import dqn, drq, learning_to_paint, ppo, sac  # noqa: F401  (registers models)
