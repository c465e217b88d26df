from __future__ import annotations

import json

from .conftest import PLANTED


def test_list_json_has_metadata(cli) -> None:
    code, out, _ = cli("list", "planted_*", "--model-file", PLANTED, "--json")
    assert code == 0
    doc = json.loads(out)
    names = [m["name"] for m in doc]
    assert "planted_ok" in names and names == sorted(names)
    assert {"domain", "task", "train_batch_size", "eval_batch_size", "modes", "tags", "source"} <= set(doc[0])


def test_list_table_and_domain_filter(cli) -> None:
    code, out, err = cli("list", "planted_ok", "--model-file", PLANTED, "--domain", "other")
    assert code == 0 and "planted_ok" in out and "1 models in 1 domains" in err


def test_list_rejects_unknown_domain(cli) -> None:
    code, _, err = cli("list", "--domain", "cv")
    assert code == 2 and "'cv' is not one of" in err
