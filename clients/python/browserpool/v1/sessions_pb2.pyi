import datetime

from browserpool.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LiveViewMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIVE_VIEW_MODE_UNSPECIFIED: _ClassVar[LiveViewMode]
    VIEW: _ClassVar[LiveViewMode]
    CONTROL: _ClassVar[LiveViewMode]
LIVE_VIEW_MODE_UNSPECIFIED: LiveViewMode
VIEW: LiveViewMode
CONTROL: LiveViewMode

class AcquireRequest(_message.Message):
    __slots__ = ("wait_ms", "ttl_ms", "idle_timeout_ms", "viewport", "labels", "context", "record", "locale", "timezone", "user_agent", "geolocation", "color_scheme", "extra_headers", "offline", "network", "proxy_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ExtraHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    VIEWPORT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    USER_AGENT_FIELD_NUMBER: _ClassVar[int]
    GEOLOCATION_FIELD_NUMBER: _ClassVar[int]
    COLOR_SCHEME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_HEADERS_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    PROXY_ID_FIELD_NUMBER: _ClassVar[int]
    wait_ms: int
    ttl_ms: int
    idle_timeout_ms: int
    viewport: _common_pb2.Viewport
    labels: _containers.ScalarMap[str, str]
    context: _common_pb2.ContextEnvelope
    record: _common_pb2.Record
    locale: str
    timezone: str
    user_agent: str
    geolocation: _common_pb2.Geolocation
    color_scheme: _common_pb2.ColorScheme
    extra_headers: _containers.ScalarMap[str, str]
    offline: bool
    network: _common_pb2.NetworkConditions
    proxy_id: str
    def __init__(self, wait_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., idle_timeout_ms: _Optional[int] = ..., viewport: _Optional[_Union[_common_pb2.Viewport, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., context: _Optional[_Union[_common_pb2.ContextEnvelope, _Mapping]] = ..., record: _Optional[_Union[_common_pb2.Record, str]] = ..., locale: _Optional[str] = ..., timezone: _Optional[str] = ..., user_agent: _Optional[str] = ..., geolocation: _Optional[_Union[_common_pb2.Geolocation, _Mapping]] = ..., color_scheme: _Optional[_Union[_common_pb2.ColorScheme, str]] = ..., extra_headers: _Optional[_Mapping[str, str]] = ..., offline: _Optional[bool] = ..., network: _Optional[_Union[_common_pb2.NetworkConditions, _Mapping]] = ..., proxy_id: _Optional[str] = ...) -> None: ...

class AcquireProgress(_message.Message):
    __slots__ = ("waiting", "session")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    waiting: AcquireWait
    session: _common_pb2.Session
    def __init__(self, waiting: _Optional[_Union[AcquireWait, _Mapping]] = ..., session: _Optional[_Union[_common_pb2.Session, _Mapping]] = ...) -> None: ...

class AcquireWait(_message.Message):
    __slots__ = ("tenant", "position", "queued", "waited_ms", "reason")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    position: int
    queued: int
    waited_ms: int
    reason: str
    def __init__(self, tenant: _Optional[str] = ..., position: _Optional[int] = ..., queued: _Optional[int] = ..., waited_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("session_id", "failed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    failed: bool
    def __init__(self, session_id: _Optional[str] = ..., failed: _Optional[bool] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released", "state")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    released: bool
    state: _common_pb2.SessionState
    def __init__(self, released: _Optional[bool] = ..., state: _Optional[_Union[_common_pb2.SessionState, str]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("session_id", "idle_timeout_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    idle_timeout_ms: int
    def __init__(self, session_id: _Optional[str] = ..., idle_timeout_ms: _Optional[int] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: _common_pb2.SessionState
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.SessionState, str]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_common_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DriveRequest(_message.Message):
    __slots__ = ("session_id", "action")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    action: _common_pb2.Action
    def __init__(self, session_id: _Optional[str] = ..., action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class DriveEvent(_message.Message):
    __slots__ = ("attached", "result", "event")
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    attached: _common_pb2.Session
    result: _common_pb2.ActionResult
    event: _common_pb2.Event
    def __init__(self, attached: _Optional[_Union[_common_pb2.Session, _Mapping]] = ..., result: _Optional[_Union[_common_pb2.ActionResult, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ...) -> None: ...

class ActRequest(_message.Message):
    __slots__ = ("session_id", "action")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    action: _common_pb2.Action
    def __init__(self, session_id: _Optional[str] = ..., action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("session_id", "actions", "stop_on_error")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    STOP_ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    actions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Action]
    stop_on_error: bool
    def __init__(self, session_id: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[_common_pb2.Action, _Mapping]]] = ..., stop_on_error: _Optional[bool] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("results", "succeeded", "failed", "duration_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.ActionResult]
    succeeded: int
    failed: int
    duration_ms: int
    def __init__(self, results: _Optional[_Iterable[_Union[_common_pb2.ActionResult, _Mapping]]] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class EventsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ExportContextRequest(_message.Message):
    __slots__ = ("session_id", "origin", "include_storage", "include_http_auth", "capture_user_agent")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STORAGE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HTTP_AUTH_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_USER_AGENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    origin: str
    include_storage: bool
    include_http_auth: bool
    capture_user_agent: bool
    def __init__(self, session_id: _Optional[str] = ..., origin: _Optional[str] = ..., include_storage: _Optional[bool] = ..., include_http_auth: _Optional[bool] = ..., capture_user_agent: _Optional[bool] = ...) -> None: ...

class ImportContextRequest(_message.Message):
    __slots__ = ("session_id", "envelope", "strict_origin")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    STRICT_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    envelope: _common_pb2.ContextEnvelope
    strict_origin: bool
    def __init__(self, session_id: _Optional[str] = ..., envelope: _Optional[_Union[_common_pb2.ContextEnvelope, _Mapping]] = ..., strict_origin: _Optional[bool] = ...) -> None: ...

class ImportContextResponse(_message.Message):
    __slots__ = ("ok", "applied_cookies", "applied_storage_keys", "integrity_error")
    OK_FIELD_NUMBER: _ClassVar[int]
    APPLIED_COOKIES_FIELD_NUMBER: _ClassVar[int]
    APPLIED_STORAGE_KEYS_FIELD_NUMBER: _ClassVar[int]
    INTEGRITY_ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    applied_cookies: int
    applied_storage_keys: int
    integrity_error: str
    def __init__(self, ok: _Optional[bool] = ..., applied_cookies: _Optional[int] = ..., applied_storage_keys: _Optional[int] = ..., integrity_error: _Optional[str] = ...) -> None: ...

class PutFileRequest(_message.Message):
    __slots__ = ("session_id", "name", "chunk")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    chunk: bytes
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ("artifacts",)
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[_common_pb2.Artifact]
    def __init__(self, artifacts: _Optional[_Iterable[_Union[_common_pb2.Artifact, _Mapping]]] = ...) -> None: ...

class GetFileRequest(_message.Message):
    __slots__ = ("session_id", "name", "kind")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    kind: _common_pb2.ArtifactKind
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.ArtifactKind, str]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("chunk", "artifact")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    artifact: _common_pb2.Artifact
    def __init__(self, chunk: _Optional[bytes] = ..., artifact: _Optional[_Union[_common_pb2.Artifact, _Mapping]] = ...) -> None: ...

class DeleteFileRequest(_message.Message):
    __slots__ = ("session_id", "name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteFileResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteArtifactsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteArtifactsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class LiveViewRequest(_message.Message):
    __slots__ = ("session_id", "mode", "ttl_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    mode: LiveViewMode
    ttl_ms: int
    def __init__(self, session_id: _Optional[str] = ..., mode: _Optional[_Union[LiveViewMode, str]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class LiveViewLink(_message.Message):
    __slots__ = ("url", "mode", "expires_at", "link_id")
    URL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    url: str
    mode: LiveViewMode
    expires_at: _timestamp_pb2.Timestamp
    link_id: str
    def __init__(self, url: _Optional[str] = ..., mode: _Optional[_Union[LiveViewMode, str]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., link_id: _Optional[str] = ...) -> None: ...

class RevokeLiveViewRequest(_message.Message):
    __slots__ = ("session_id", "link_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    link_id: str
    def __init__(self, session_id: _Optional[str] = ..., link_id: _Optional[str] = ...) -> None: ...

class RevokeLiveViewResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: int
    def __init__(self, revoked: _Optional[int] = ...) -> None: ...
