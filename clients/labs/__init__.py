"""The labs: one pathology each, shown, explained and cured.

A lab is a directory under ``examples/labs/`` with a ``lab.toml`` (title, the public
document it reproduces, the configurations it runs and the verdict each must give), a README that
tells the story, the broker configurations, and a ``scenario.py`` whose
``run(lab)`` drives the broker (on the virtual clock, in seconds) and returns
an ``Outcome``. ``minibroker lab run NAME`` runs every configuration and exits
0 only when each verdict is the one the lab promises.
"""

from .model import Lab, LabError, RunSpec, find_labs, labs_directory, load_lab, sibling_module
from .runner import LabRun, Outcome, RunResult, run_lab

__all__ = [
    "Lab",
    "LabError",
    "LabRun",
    "Outcome",
    "RunResult",
    "RunSpec",
    "find_labs",
    "labs_directory",
    "load_lab",
    "run_lab",
    "sibling_module",
]
