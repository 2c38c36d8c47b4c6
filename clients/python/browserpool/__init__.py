"""browserpool client: lease headless Chromium browsers from a browserpool server over gRPC.

The messages and stubs are generated from ``proto/browserpool/v1`` into :mod:`browserpool.v1`
(``common_pb2``, ``sessions_pb2``, ``sessions_pb2_grpc``, ``admin_pb2``, ``admin_pb2_grpc``) by
``scripts/gen-clients.sh``; :mod:`browserpool.client` is the thin hand-written helper::

    import browserpool

    with browserpool.connect("http://127.0.0.1:50051", token) as client:
        with client.session(wait_ms=10_000) as s:      # released on exit, also on an exception
            s.act("navigate", payload="https://example.com/")
            print(s.value("extract", "h1"))
            png = s.act("screenshot").data

Whole-call failures raise :class:`BrowserpoolError` (``.code`` is the ``grpc.StatusCode``);
actions that ran and failed raise :class:`ActionError` (``.code_name`` says why).
"""

from browserpool import client as _client
from browserpool.client import *  # noqa: F401,F403 (the helper's names, listed once there)

__all__ = list(_client.__all__)
