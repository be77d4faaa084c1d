"""Fixtures of the Python suite: the repository's committed test data (the same files and
goldens as the Rust tests; the goldens come from ExecuTorch's own runtime)."""

import json
from pathlib import Path

import pytest

TESTDATA = Path(__file__).resolve().parents[3] / "testdata"


def fixture_dirs(group):
    return sorted(p.parent for p in (TESTDATA / group).glob("*/meta.json"))


def load_meta(d):
    return json.loads((d / "meta.json").read_text())


@pytest.fixture(scope="session")
def testdata():
    return TESTDATA
