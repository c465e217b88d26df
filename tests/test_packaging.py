"""The package ships whole: setuptools' find_packages (pyproject.toml) only takes folders with an
``__init__.py``, so a folder of modules without one installs in editable mode and vanishes from a wheel."""

from __future__ import annotations

from pathlib import Path

import torchgauge

PACKAGE_DIR = Path(torchgauge.__file__).parent


def test_every_folder_of_modules_is_a_regular_package() -> None:
    missing = [
        str(folder.relative_to(PACKAGE_DIR.parent))
        for folder in [PACKAGE_DIR, *PACKAGE_DIR.rglob("*")]
        if folder.is_dir()
        and folder.name != "__pycache__"
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").is_file()
    ]
    assert missing == []
