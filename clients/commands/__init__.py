"""One module per ``minibroker`` subcommand (or per family: ``operations``
has purge, delete, close, browse and move).

Each module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an
exit status). ``clients.cli`` imports the modules listed in ``COMMANDS``;
heavy imports (PySpark, matplotlib) happen inside ``func``, never at import.
"""

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = [
    "serve",
    "send",
    "recv",
    "stat",
    "operations",
    "journal",
    "lab",
    "doctor",
    "workload",
    "replay",
    "analyze",
    "bench",
    "passwd",
]
