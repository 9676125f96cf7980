"""The seed documents ``doctor`` cites: each finding names the story it comes from."""
from __future__ import annotations

__all__ = ["SEEDS", "seed_label"]

#: seed number -> (file in the seeds directory, short title)
SEEDS = {
    "000": ("000_0bd9785ef163934c.txt", "starving consumers without destination memory limits"),
    "001": ("001_674fc1d6885870cb.txt", "temp storage: producers blocked forever"),
    "002": ("002_59e48b5813846dc7.txt", "slow consumers on non-durable topics"),
    "003": ("003_2ad16c8007c3246d.txt", "STOMP prefetch and the stalled socket"),
    "004": ("004_489bf5d377364273.txt", "ring journal: enqueue capacity threshold exceeded"),
}


def seed_label(seed: str | None) -> str:
    """``"seed 001"`` for a seed's trap; ``"config"`` for a plain misconfiguration or a note."""
    return f"seed {seed}" if seed in SEEDS else "config"
