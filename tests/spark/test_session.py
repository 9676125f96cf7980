"""A local JVM starts quietly: its one line of noise on stderr is left out, nothing else."""

from __future__ import annotations

import subprocess
import sys

from clients.spark.session import _jvm_stderr_filtered


def test_a_process_started_under_the_filter_loses_only_the_incubator_warning(capfd) -> None:
    """What the JVM does at start, played by a child process: it inherits stderr and prints
    the incubator warning (which Spark's launcher always causes) among its real lines."""
    script = (
        "import sys; sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\n"
        "ERROR something the reader must see\\n'); sys.stderr.flush()"
    )
    with _jvm_stderr_filtered() as forwarder:
        child = subprocess.Popen([sys.executable, "-c", script])
    assert child.wait(60) == 0
    assert forwarder is not None
    forwarder.join(60)  # the child's exit closed the pipe's last write end
    assert not forwarder.is_alive()
    err = capfd.readouterr().err
    assert "ERROR something the reader must see" in err
    assert "incubator" not in err
    print("ours", file=sys.stderr)  # this process's stderr is its own again
    assert capfd.readouterr().err == "ours\n"
