"""The labs' tests: a module names its lab's folder as ``LAB``, and ``results`` plays every
run of that lab once for the module, on the virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from broker_support import lab_run_results


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every run of the module's lab (its ``LAB``) by run name, its printing kept quiet."""
    return lab_run_results(request.module.LAB)
