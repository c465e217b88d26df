from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def scenario():
    """tests/report/site_fixtures.py (tests are not a package: loaded by path)."""
    path = Path(__file__).resolve().parent / "site_fixtures.py"
    spec = importlib.util.spec_from_file_location("site_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["site_fixtures"] = module
    spec.loader.exec_module(module)
    return module
