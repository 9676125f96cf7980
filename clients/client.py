"""The STOMP client library, under the name the project plan gave it.

The code lives in the ``clients.stomp`` package (one module per concern);
this module re-exports its public API so ``from clients.client import
StompClient`` works as well as ``from clients.stomp import StompClient``.
"""

from .stomp import *  # noqa: F401,F403
from .stomp import __all__  # noqa: F401
