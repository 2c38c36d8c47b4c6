"""TLS run of the Python client against a live server with mutual TLS (driven by
server/tests/e2e/clients.rs, which checks the JSON line this prints).

Env: SERVER (https://host:port), TOKEN, CA_FILE (the CA of the server's certificate),
CERT_FILE and KEY_FILE (a client certificate that CA signed).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import browserpool  # noqa: E402
from browserpool.v1 import sessions_pb2  # noqa: E402

env = os.environ
out = {}

# The CA file and the client identity: the call goes through (List needs no browser).
with browserpool.connect(
    env["SERVER"], env["TOKEN"], ca_file=env["CA_FILE"], cert_file=env["CERT_FILE"], key_file=env["KEY_FILE"]
) as client:
    listed = client.sessions.List(sessions_pb2.ListSessionsRequest(), timeout=30)
    out["with_identity"] = {"sessions": len(listed.sessions)}

# The CA file alone: the server refuses the handshake, the call fails UNAVAILABLE.
with browserpool.connect(env["SERVER"], env["TOKEN"], ca_file=env["CA_FILE"]) as client:
    try:
        client.get("s-none")
        out["without_identity"] = "answered?!"
    except browserpool.BrowserpoolError as e:
        out["without_identity"] = e.code.name

print(json.dumps(out, sort_keys=True))
