"""Fixtures for the approvals tests (fakes live in ``approval_fakes``)."""

from __future__ import annotations

import pytest
from approval_fakes import Harness, build_harness


@pytest.fixture
def harness() -> Harness:
    return build_harness()
