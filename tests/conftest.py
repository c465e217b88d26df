import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

# Keep intra-op threads low: CI has 2 cores and pytest may run models back to back.
os.environ.setdefault("OMP_NUM_THREADS", "2")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device")
    # Tests whose verdict rests on wall-clock timing are benchmarks: shared machines are too
    # noisy to gate CI on them. Run them on a quiet machine with TORCHGAUGE_TIMING_TESTS=1.
    run_timing = os.environ.get("TORCHGAUGE_TIMING_TESTS") == "1"
    skip_timing = pytest.mark.skip(reason="asserts on wall-clock timing; set TORCHGAUGE_TIMING_TESTS=1 to run")
    for item in items:
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(skip_cuda)
        if "timing" in item.keywords and not run_timing:
            item.add_marker(skip_timing)


def pytest_sessionstart(session):
    # The first optimizer in a process imports torch._dynamo (seconds); pay it once up front
    # so that per-test durations of the model smoke tests are comparable.
    import torch

    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


# Real GPU traces live in the shared reference folder beside the clone (CI: <clone>/../shared);
# a worktree elsewhere can point at it with TORCHGAUGE_SHARED_DIR.
_SHARED_DIR = Path(os.environ.get("TORCHGAUGE_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")


@pytest.fixture(scope="session")
def gpu_traces() -> Path:
    """The folder of real GPU traces (shared/reference/gpu-traces); skips when it is absent."""
    folder = _SHARED_DIR / "reference" / "gpu-traces"
    if not folder.is_dir():
        pytest.skip(
            f"real GPU traces not found at {folder} (CI has shared/ beside the clone; "
            "elsewhere set TORCHGAUGE_SHARED_DIR)"
        )
    return folder


_FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_fixture_module(name: str) -> ModuleType:
    """tests/fixtures/<name>.py as module ``name`` (tests are not a package), loaded once per session."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _FIXTURES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def fixture_module():
    """:func:`load_fixture_module`: ``fixture_module("local_postgres")`` is tests/fixtures/local_postgres.py."""
    return load_fixture_module


@pytest.fixture(scope="session")
def kineto():
    """tests/fixtures/kineto_traces.py: builders of synthetic Kineto trace events."""
    return load_fixture_module("kineto_traces")
