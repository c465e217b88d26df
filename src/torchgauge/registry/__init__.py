"""Model registry: a decorator keyed by the builder's function name.

Shape follows torchvision's ``_api.py`` (duplicate names raise) with timm's
``list_models`` (fnmatch include/exclude, natural sort) and tags as data. Parts:

- :mod:`.model_spec`: :class:`ModelSpec`, the domains and modes, the errors.
- :mod:`.entries`: the table, ``@register_model``/``add_spec``, the generated index and plugins.
- :mod:`.lookup`: patterns and names: ``list_models``, ``resolve_name``, ``get_spec``, ``get_builder``.
- :mod:`.building`: ``create``, one workload from its entry.
- :mod:`.model_files`: ``load_model_file`` for ``--model-file``.

Example::

    @register_model(domain="vision", task="classification", batch_size=(32, 64),
                    source="He et al., Deep Residual Learning, 2015")
    def resnet50(ctx: BuildContext, **kwargs) -> Workload:
        return _create_resnet(ctx, layers=(3, 4, 6, 3), **kwargs)
"""

from __future__ import annotations

from .building import create
from .entries import ENTRY_POINT_GROUP, add_spec, load_plugins, register_model
from .lookup import get_builder, get_spec, list_models, model_domain, resolve_name, validate_model_names
from .model_files import load_model_file
from .model_spec import DOMAINS, MODES, SIZES, AmbiguousModelError, ModelFileError, ModelSpec, UnknownModelError

__all__ = [
    "DOMAINS",
    "ENTRY_POINT_GROUP",
    "MODES",
    "SIZES",
    "ModelFileError",
    "ModelSpec",
    "UnknownModelError",
    "AmbiguousModelError",
    "register_model",
    "add_spec",
    "list_models",
    "get_spec",
    "model_domain",
    "resolve_name",
    "get_builder",
    "create",
    "load_model_file",
    "load_plugins",
    "validate_model_names",
]
