"""The README's client examples, run as a reader would run them, against the real server."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_example(marker: str) -> str:
    """The README's ```python block that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    [block] = [b for b in blocks if marker in b]
    return block


def test_the_stomp_py_example_acknowledges_its_persistent_message(broker) -> None:
    example = _python_example("import stomp").replace('("127.0.0.1", 61613)', f'("127.0.0.1", {broker.port})')
    result = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "/queue/hello from stomp.py"
    deadline = time.monotonic() + 10  # the example's connection ends: what it left unacknowledged is back
    while broker.call(lambda: len(broker.server.broker.sessions)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert broker.call(lambda: len(broker.server.broker.sessions)) == 0
    assert broker.call(lambda: broker.server.broker.destinations["/queue/hello"].size()) == 0
