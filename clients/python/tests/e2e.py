"""End-to-end run of the Python client against a live server (driven by
server/tests/e2e/clients.rs, which checks the JSON line this prints).

Env: SERVER (http://host:port), TOKEN (sessions:read and sessions:write), SITE (the fixture
site's base URL). Run it with the venv of scripts/lib.sh's ensure_client_deps.
"""

import json
import os
import sys
from pathlib import Path

# The package from this checkout, not an installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

import browserpool  # noqa: E402
from browserpool.v1 import common_pb2, sessions_pb2  # noqa: E402

server, token, site = os.environ["SERVER"], os.environ["TOKEN"], os.environ["SITE"]
out = {}

with browserpool.connect(server, token) as client:
    # The whole flow: navigate, interact, read, screenshot; released by the with block.
    record = common_pb2.Record.RECORD_ON
    with client.session(wait_ms=30_000, labels={"client": "python"}, record=record) as s:
        out["session"] = s.id
        out["uploaded_sha256"] = client.put_file(s.id, "hello.txt", b"hi there").sha256
        link = client.live_view(s.id, control=True, ttl_ms=60_000)
        out["live"] = [link.url.split("/live/")[1].split("/")[0], sessions_pb2.LiveViewMode.Name(link.mode)]
        out["live_revoked"] = client.revoke_live_view(s.id, link.link_id)
        s.act("navigate", payload=site + "/")
        out["title"] = s.value("title")
        out["heading_before"] = s.value("extract", "h1")
        s.act("fill", "#name", "python")
        s.act("click", "#go")
        out["heading"] = s.value("extract", "#greeting")
        out["evaluated"] = s.value("evaluate", "", "({n: 1 + 1, list: [true, 'x', null], half: 0.5})")
        shot = s.act("screenshot")
        out["png"] = shot.data[:8] == b"\x89PNG\r\n\x1a\n"
        out["mime"] = shot.mime_type
        out["png_bytes"] = len(shot.data)
        # An action that fails raises ActionError with its code; the session lives on.
        try:
            s.act("click", "#missing", timeout_ms=500)
        except browserpool.ActionError as e:
            out["action_error"] = e.code_name
        # A misspelt action: the error carries the server's suggestion.
        try:
            s.act("navigat", payload=site + "/")
        except browserpool.ActionError as e:
            out["did_you_mean"] = [e.did_you_mean, "did you mean: navigate" in str(e)]
        # A wrong argument type is named by its field, not protobuf's "bad argument type".
        try:
            client.acquire(wait_ms="30s")
        except TypeError as e:
            out["type_error"] = str(e)
        out["state_inside"] = common_pb2.SessionState.Name(s.get().state)
    out["state_after"] = common_pb2.SessionState.Name(client.get(out["session"]).state)
    out["released_state"] = browserpool.state_name(client.release(out["session"]).state)
    # Kept after the end: the upload and the recording.
    kept, data = client.get_file(out["session"], "hello.txt")
    out["kept_file"], out["kept_sha256"] = data.decode(), kept.sha256
    video, data = client.get_recording(out["session"])
    out["recording"] = [video.name, video.mime_type, data[:4] == b"\x1a\x45\xdf\xa3", len(data) == video.size]

    # An exception inside the block still releases the session, and is the one that propagates.
    try:
        with client.session(wait_ms=30_000) as s:
            out["raised_session"] = s.id
            raise RuntimeError("boom")
    except RuntimeError as e:
        out["raised"] = str(e)
    out["raised_state_after"] = common_pb2.SessionState.Name(client.get(out["raised_session"]).state)

# A bad token: the server refuses the call, the helper raises BrowserpoolError with the code.
with browserpool.connect(server, "not-a-token") as bad:
    try:
        with bad.session(wait_ms=1_000):
            out["bad_token"] = "acquired?!"
    except browserpool.BrowserpoolError as e:
        out["bad_token"] = e.code.name
        out["bad_token_is_status"] = e.code == grpc.StatusCode.UNAUTHENTICATED

print(json.dumps(out, sort_keys=True))
