"""Fixtures for the client tests: a fake STOMP server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from .fake_server import FakeStompServer

MakeServer = Callable[..., Awaitable[FakeStompServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    """``await make_server(**options)`` starts a ``FakeStompServer``; all are
    stopped when the test ends."""
    servers: list[FakeStompServer] = []

    async def make(**options: object) -> FakeStompServer:
        server = await FakeStompServer(**options).start()  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def server(make_server: MakeServer) -> FakeStompServer:
    """A fake server with the default behaviour."""
    return await make_server()
