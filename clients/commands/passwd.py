"""``minibroker passwd``: make a salted password hash for ``[[users]]``."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from minibroker.connection import hash_password


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "passwd",
        help="hash a password for the [[users]] configuration",
        description="Print a salted PBKDF2-SHA256 hash and a [[users]] entry to paste into the configuration.",
    )
    p.add_argument("user", help="the user name (the STOMP login)")
    p.add_argument("--password", help="the password (default: asked twice on the terminal, or one line of stdin)")
    p.add_argument("--groups", default="", help="comma-separated groups, e.g. admins,producers")
    p.set_defaults(func=run)


def _read_password() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        from clients.cli import CommandError

        raise CommandError("the two passwords differ")
    return first


def run(args: argparse.Namespace) -> int:
    password = args.password if args.password is not None else _read_password()
    if not password:
        from clients.cli import CommandError

        raise CommandError("the password is empty")
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    print("[[users]]")
    print(f'name = "{args.user}"')
    print(f'password_hash = "{hash_password(password)}"')
    print("groups = [" + ", ".join(f'"{g}"' for g in groups) + "]")
    return 0
