"""``torchgauge run --executor``: option checks and cluster errors, without a cluster."""

from __future__ import annotations

import pytest

from .conftest import PLANTED


@pytest.mark.parametrize(
    "args, message",
    [
        (["--address", "head:6379"], "--address apply only with --executor ray"),
        (["--cpus-per-run", "2", "--mix-hardware"], "--cpus-per-run, --mix-hardware apply only with --executor ray"),
        (["--executor", "ray", "--in-process"], "does not combine with --executor ray"),
        (["--executor", "ray", "--cpus-per-run", "0"], "accepted: an integer >= 1"),
        (["--executor", "dask"], "'dask' is not one of 'local', 'ray'"),
        (["--executor", "ray", "--device", "cuda:1"], "the ray executor assigns GPUs itself; accepted: cpu, cuda"),
    ],
)
def test_bad_executor_options_get_one_line_errors(cli, tmp_path, args, message) -> None:
    code, _, err = cli("run", "planted_ok", *args, "--model-file", PLANTED, "--output", str(tmp_path / "r.json"))
    assert code == 2 and message in err and "Traceback" not in err


def test_unreachable_cluster_is_one_line(cli, tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'torchgauge[ray]')")
    code, _, err = cli(
        "run",
        "planted_ok",
        "--executor",
        "ray",
        "--address",
        "127.0.0.1:1",
        "--model-file",
        PLANTED,
        "--output",
        str(tmp_path / "r.json"),
    )
    assert code == 1 and "cannot connect to the Ray cluster at 127.0.0.1:1" in err and "Traceback" not in err
