"""A thin helper over the generated stubs: bearer auth, errors with their code, sessions.

Everything here is a convenience over :mod:`browserpool.v1` (the messages and stubs generated
from ``proto/browserpool/v1``); ``client.sessions`` and ``client.admin`` are the raw stubs,
with the token attached, for every rpc the helper does not wrap.
"""

from __future__ import annotations

import collections
import contextlib
import math
from typing import Any, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import grpc
from google.protobuf import struct_pb2

from browserpool.v1 import admin_pb2_grpc, common_pb2, sessions_pb2, sessions_pb2_grpc

#: The size of each message of :meth:`Client.put_file`.
_CHUNK = 1 << 20

__all__ = [
    "ActionError",
    "BearerAuth",
    "BrowserpoolError",
    "Client",
    "LeasedSession",
    "action",
    "connect",
    "from_value",
    "state_name",
    "to_value",
]


class BrowserpoolError(Exception):
    """A call that failed as a whole: the server refused it or it never got there.

    ``code`` is the gRPC status (``grpc.StatusCode.UNAUTHENTICATED`` for a bad token,
    ``NOT_FOUND``, ``DEADLINE_EXCEEDED`` when no browser was free in time...) and
    ``details`` the server's message.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> "BrowserpoolError":
        """The error for a failed call of the raw stubs."""
        return cls(err.code(), err.details() or "")  # type: ignore[attr-defined]


class ActionError(Exception):
    """An action that ran and failed (``ActionResult.ok`` false).

    ``code`` is a ``common_pb2.ErrorCode`` value, ``code_name`` its name
    (``ERROR_CODE_ELEMENT_NOT_FOUND``...), ``message`` the server's, ``did_you_mean`` its
    suggestions (an unknown action or option), ``result`` the whole ``ActionResult`` (for a
    dialog, ``result.error.dialog``).
    """

    def __init__(self, result: common_pb2.ActionResult) -> None:
        self.result = result
        self.code = result.error.code
        self.code_name = common_pb2.ErrorCode.Name(self.code)
        self.message = result.error.message
        self.did_you_mean = list(result.error.did_you_mean)
        said = f"{result.action}: {self.code_name}: {self.message}"
        if self.did_you_mean:
            said += f" (did you mean: {', '.join(self.did_you_mean)}?)"
        super().__init__(said)


def state_name(state: int) -> str:
    """A session state as its name: ``state_name(client.release(id).state) == "CLOSED"``."""
    return common_pb2.SessionState.Name(state).removeprefix("SESSION_STATE_")


def _request(message: Any, **fields: Any) -> Any:
    """``message(**fields)``, with a wrong type named by its field and what it takes, where
    protobuf says only ``bad argument type for built-in operation``."""
    try:
        return message(**fields)
    except (TypeError, ValueError) as err:
        for name, value in fields.items():
            try:
                message(**{name: value})
            except (TypeError, ValueError):
                field = message.DESCRIPTOR.fields_by_name.get(name)
                if field is None:
                    raise TypeError(f"{message.DESCRIPTOR.name} has no field {name!r}") from None
                raise TypeError(
                    f"{message.DESCRIPTOR.name}.{name}: expected {_kind(field)}, got {type(value).__name__} {value!r}"
                ) from None
        raise err


def _kind(field: Any) -> str:
    """What a protobuf field takes, in words."""
    if field.message_type is not None:
        if field.message_type.GetOptions().map_entry:
            return "a dict"
        return f"a {field.message_type.name} (or a dict of its fields)"
    if field.enum_type is not None:
        return f"a {field.enum_type.name} value (an int, e.g. {field.enum_type.values[-1].name})"
    words = {
        field.TYPE_STRING: "a str",
        field.TYPE_BYTES: "bytes",
        field.TYPE_BOOL: "a bool",
        field.TYPE_DOUBLE: "a float",
        field.TYPE_FLOAT: "a float",
    }
    kind = words.get(field.type, "an int" + (" (milliseconds)" if field.name.endswith("_ms") else ""))
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    return f"a list of {kind}" if repeated else kind


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class BearerAuth(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call, plaintext or TLS alike."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token.strip()}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [m for m in (details.metadata or ()) if m[0] != "authorization"]
        metadata.append(self._header)
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)


def to_value(obj: Any) -> struct_pb2.Value:
    """A JSON-like Python value (None, bool, int, float, str, list, dict) as a protobuf Value."""
    v = struct_pb2.Value()
    if obj is None:
        v.null_value = struct_pb2.NULL_VALUE
    elif isinstance(obj, bool):
        v.bool_value = obj
    elif isinstance(obj, (int, float)):
        v.number_value = obj
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, (list, tuple)):
        v.list_value.values.extend(to_value(x) for x in obj)
    elif isinstance(obj, dict):
        v.struct_value.SetInParent()
        for key, x in obj.items():
            v.struct_value.fields[str(key)].CopyFrom(to_value(x))
    else:
        raise TypeError(f"not JSON-like: {type(obj).__name__}")
    return v


def from_value(v: Optional[struct_pb2.Value]) -> Any:
    """A protobuf Value as plain Python; whole numbers come back as ``int``."""
    if v is None:
        return None
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        n = v.number_value
        return int(n) if math.isfinite(n) and n.is_integer() and abs(n) <= 2**53 else n
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "list_value":
        return [from_value(x) for x in v.list_value.values]
    if kind == "struct_value":
        return {k: from_value(x) for k, x in v.struct_value.fields.items()}
    return None


def action(name: str, selector: str = "", payload: Any = None, *, timeout_ms: int = 0, id: str = "") -> common_pb2.Action:
    """Builds an action: name, selector (CSS, text=, role=, xpath=...; may be empty), JSON-like payload (may be None)."""
    a = _request(common_pb2.Action, action=name, selector=selector, timeout_ms=timeout_ms, id=id)
    if payload is not None:
        a.payload.CopyFrom(to_value(payload))
    return a


class Client:
    """A connection to a browserpool server; make one with :func:`connect`.

    ``sessions`` and ``admin`` are the generated stubs (``SessionsStub``, ``AdminStub``) with
    the token attached; they raise ``grpc.RpcError``. The methods below wrap the common
    calls and raise :class:`BrowserpoolError` instead. Use as a context manager, or call
    :meth:`close`, to close the channel.
    """

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.sessions = sessions_pb2_grpc.SessionsStub(channel)
        self.admin = admin_pb2_grpc.AdminStub(channel)

    def _call(self, rpc, request):
        try:
            return rpc(request)
        except grpc.RpcError as err:
            raise BrowserpoolError.from_rpc(err) from None

    def acquire(self, wait_ms: int = 30_000, **fields: Any) -> common_pb2.Session:
        """Leases a browser, waiting up to ``wait_ms`` for a free one; ``fields`` are the other
        ``AcquireRequest`` fields (``ttl_ms``, ``idle_timeout_ms``, ``labels``, ``viewport``...)."""
        return self._call(self.sessions.Acquire, _request(sessions_pb2.AcquireRequest, wait_ms=wait_ms, **fields))

    def act(
        self, session_id: str, name: str, selector: str = "", payload: Any = None, *, timeout_ms: int = 0, check: bool = True
    ) -> common_pb2.ActionResult:
        """Runs one action; raises :class:`ActionError` when it fails (unless ``check=False``)."""
        request = _request(
            sessions_pb2.ActRequest, session_id=session_id, action=action(name, selector, payload, timeout_ms=timeout_ms)
        )
        result = self._call(self.sessions.Act, request)
        if check and not result.ok:
            raise ActionError(result)
        return result

    def get(self, session_id: str) -> common_pb2.Session:
        """Reads a session (state, deadlines, ``cdp_url``)."""
        return self._call(self.sessions.Get, sessions_pb2.GetSessionRequest(session_id=session_id))

    def release(self, session_id: str, *, failed: bool = False) -> sessions_pb2.ReleaseResponse:
        """Ends a session and destroys its browser; idempotent. ``failed=True`` says the job
        failed, so a ``RECORD_RETAIN_ON_FAILURE`` recording is kept."""
        return self._call(self.sessions.Release, sessions_pb2.ReleaseRequest(session_id=session_id, failed=failed))

    def put_file(self, session_id: str, name: str, data: bytes) -> common_pb2.Artifact:
        """Uploads ``data`` as file ``name`` of the session (in 1 MiB messages); a file input
        takes it with the ``set_input_files`` action."""
        chunks = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)] or [b""]
        requests = (
            sessions_pb2.PutFileRequest(session_id=session_id if i == 0 else "", name=name if i == 0 else "", chunk=c)
            for i, c in enumerate(chunks)
        )
        return self._call(self.sessions.PutFile, requests)

    def list_files(self, session_id: str) -> List[common_pb2.Artifact]:
        """The session's files (downloads and uploads), live or kept after its end."""
        return list(self._call(self.sessions.ListFiles, sessions_pb2.ListFilesRequest(session_id=session_id)).artifacts)

    def get_file(self, session_id: str, name: str) -> Tuple[common_pb2.Artifact, bytes]:
        """One file of the session, whole, with its artifact (size, type, SHA-256)."""
        return self._download(sessions_pb2.GetFileRequest(session_id=session_id, name=name))

    def get_recording(self, session_id: str) -> Tuple[common_pb2.Artifact, bytes]:
        """The recording (WebM) of an ended session, whole, with its artifact."""
        kind = common_pb2.ArtifactKind.RECORDING
        return self._download(sessions_pb2.GetFileRequest(session_id=session_id, kind=kind))

    def delete_file(self, session_id: str, name: str) -> None:
        """Deletes one file of a live session."""
        self._call(self.sessions.DeleteFile, sessions_pb2.DeleteFileRequest(session_id=session_id, name=name))

    def delete_artifacts(self, session_id: str) -> int:
        """Deletes what an ended session kept (its files and recording); how many."""
        request = sessions_pb2.DeleteArtifactsRequest(session_id=session_id)
        return self._call(self.sessions.DeleteArtifacts, request).deleted

    def live_view(self, session_id: str, control: bool = False, ttl_ms: int = 0) -> sessions_pb2.LiveViewLink:
        """A link to watch the live session in a web browser (control=True: to drive it too),
        working for ttl_ms (0: 15 minutes; never past the session's end)."""
        mode = sessions_pb2.LiveViewMode.CONTROL if control else sessions_pb2.LiveViewMode.VIEW
        request = sessions_pb2.LiveViewRequest(session_id=session_id, mode=mode, ttl_ms=ttl_ms)
        return self._call(self.sessions.LiveView, request)

    def revoke_live_view(self, session_id: str, link_id: str = "") -> int:
        """Revokes one live view link of the session (every one when link_id is empty); how many."""
        request = sessions_pb2.RevokeLiveViewRequest(session_id=session_id, link_id=link_id)
        return self._call(self.sessions.RevokeLiveView, request).revoked

    def _download(self, request: sessions_pb2.GetFileRequest) -> Tuple[common_pb2.Artifact, bytes]:
        artifact, parts = None, []
        try:
            for message in self.sessions.GetFile(request):
                if message.HasField("artifact") and artifact is None:
                    artifact = message.artifact
                parts.append(message.chunk)
        except grpc.RpcError as err:
            raise BrowserpoolError.from_rpc(err) from None
        if artifact is None:
            raise BrowserpoolError(grpc.StatusCode.INTERNAL, "GetFile sent no artifact")
        return artifact, b"".join(parts)

    @contextlib.contextmanager
    def session(self, wait_ms: int = 30_000, **fields: Any) -> Iterator["LeasedSession"]:
        """Acquires a browser for the ``with`` block and releases it on the way out, also when
        the block raises (then the block's exception propagates, even if the release fails)."""
        leased = LeasedSession(self, self.acquire(wait_ms, **fields))
        try:
            yield leased
        except BaseException:
            with contextlib.suppress(Exception):
                self.release(leased.id)
            raise
        self.release(leased.id)

    def close(self) -> None:
        """Closes the channel."""
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LeasedSession:
    """A leased browser, as :meth:`Client.session` yields it."""

    def __init__(self, client: Client, info: common_pb2.Session) -> None:
        self.client = client
        #: The session as Acquire returned it (``session_id``, ``cdp_url``, deadlines...).
        self.info = info

    @property
    def id(self) -> str:
        """The session id."""
        return self.info.session_id

    def act(self, name: str, selector: str = "", payload: Any = None, *, timeout_ms: int = 0, check: bool = True) -> common_pb2.ActionResult:
        """Runs one action (see :meth:`Client.act`); screenshots and PDFs are in ``.data``."""
        return self.client.act(self.id, name, selector, payload, timeout_ms=timeout_ms, check=check)

    def value(self, name: str, selector: str = "", payload: Any = None, *, timeout_ms: int = 0) -> Any:
        """Runs one action and returns its JSON value as plain Python."""
        result = self.act(name, selector, payload, timeout_ms=timeout_ms)
        return from_value(result.value) if result.HasField("value") else None

    def get(self) -> common_pb2.Session:
        """Reads the session again."""
        return self.client.get(self.id)


def connect(
    target: str,
    token: str,
    *,
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
    server_name: Optional[str] = None,
    options: Sequence[Tuple[str, Any]] = (),
) -> Client:
    """Connects to ``target`` with a JWT sent as ``authorization: Bearer <token>`` on every call.

    ``target`` is ``host:port`` or ``http://host:port`` (plaintext), or ``https://host:port``
    (TLS, trusting the system's CAs or ``ca_file``; a ``ca_file`` alone also means TLS).
    ``cert_file`` and ``key_file`` (PEM) are the client identity for a server with mutual TLS;
    ``server_name`` overrides the name the server's certificate must carry; ``options`` are
    extra gRPC channel options. The connection is made on the first call.
    """
    tls = ca_file is not None
    if "://" in target:
        url = urlsplit(target)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ValueError(f"target must be host:port, http://host:port or https://host:port: {target!r}")
        if url.scheme == "http" and tls:
            raise ValueError("ca_file given for an http:// target; use https://")
        tls = url.scheme == "https"
        target = url.netloc
    opts = list(options)
    if tls:
        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        creds = grpc.ssl_channel_credentials(
            root_certificates=read(ca_file), private_key=read(key_file), certificate_chain=read(cert_file)
        )
        if server_name:
            opts.append(("grpc.ssl_target_name_override", server_name))
        channel = grpc.secure_channel(target, creds, options=opts)
    else:
        channel = grpc.insecure_channel(target, options=opts)
    return Client(grpc.intercept_channel(channel, BearerAuth(token)))
