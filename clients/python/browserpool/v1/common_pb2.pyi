import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ColorScheme(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLOR_SCHEME_UNSPECIFIED: _ClassVar[ColorScheme]
    COLOR_SCHEME_LIGHT: _ClassVar[ColorScheme]
    COLOR_SCHEME_DARK: _ClassVar[ColorScheme]

class Record(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECORD_UNSPECIFIED: _ClassVar[Record]
    RECORD_OFF: _ClassVar[Record]
    RECORD_ON: _ClassVar[Record]
    RECORD_RETAIN_ON_FAILURE: _ClassVar[Record]

class ArtifactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_KIND_UNSPECIFIED: _ClassVar[ArtifactKind]
    DOWNLOAD: _ClassVar[ArtifactKind]
    UPLOAD: _ClassVar[ArtifactKind]
    RECORDING: _ClassVar[ArtifactKind]

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_QUEUED: _ClassVar[SessionState]
    SESSION_STATE_READY: _ClassVar[SessionState]
    SESSION_STATE_CLOSED: _ClassVar[SessionState]
    SESSION_STATE_CRASHED: _ClassVar[SessionState]
    SESSION_STATE_EXPIRED: _ClassVar[SessionState]
    SESSION_STATE_KILLED: _ClassVar[SessionState]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_ARGUMENT: _ClassVar[ErrorCode]
    ERROR_CODE_UNKNOWN_ACTION: _ClassVar[ErrorCode]
    ERROR_CODE_ELEMENT_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_TIMEOUT: _ClassVar[ErrorCode]
    ERROR_CODE_DIALOG_OPEN: _ClassVar[ErrorCode]
    ERROR_CODE_NAVIGATION_FAILED: _ClassVar[ErrorCode]
    ERROR_CODE_BLOCKED_BY_POLICY: _ClassVar[ErrorCode]
    ERROR_CODE_PERMISSION_DENIED: _ClassVar[ErrorCode]
    ERROR_CODE_PAYLOAD_TOO_LARGE: _ClassVar[ErrorCode]
    ERROR_CODE_JS_EXCEPTION: _ClassVar[ErrorCode]
    ERROR_CODE_SESSION_CLOSED: _ClassVar[ErrorCode]
    ERROR_CODE_SESSION_CRASHED: _ClassVar[ErrorCode]
    ERROR_CODE_INTERNAL: _ClassVar[ErrorCode]
    ERROR_CODE_TAB_CRASHED: _ClassVar[ErrorCode]

class DialogKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIALOG_KIND_UNSPECIFIED: _ClassVar[DialogKind]
    DIALOG_KIND_ALERT: _ClassVar[DialogKind]
    DIALOG_KIND_CONFIRM: _ClassVar[DialogKind]
    DIALOG_KIND_PROMPT: _ClassVar[DialogKind]
    DIALOG_KIND_BEFOREUNLOAD: _ClassVar[DialogKind]
    DIALOG_KIND_BASIC_AUTH: _ClassVar[DialogKind]
    DIALOG_KIND_PERMISSION: _ClassVar[DialogKind]
COLOR_SCHEME_UNSPECIFIED: ColorScheme
COLOR_SCHEME_LIGHT: ColorScheme
COLOR_SCHEME_DARK: ColorScheme
RECORD_UNSPECIFIED: Record
RECORD_OFF: Record
RECORD_ON: Record
RECORD_RETAIN_ON_FAILURE: Record
ARTIFACT_KIND_UNSPECIFIED: ArtifactKind
DOWNLOAD: ArtifactKind
UPLOAD: ArtifactKind
RECORDING: ArtifactKind
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_QUEUED: SessionState
SESSION_STATE_READY: SessionState
SESSION_STATE_CLOSED: SessionState
SESSION_STATE_CRASHED: SessionState
SESSION_STATE_EXPIRED: SessionState
SESSION_STATE_KILLED: SessionState
ERROR_CODE_UNSPECIFIED: ErrorCode
ERROR_CODE_INVALID_ARGUMENT: ErrorCode
ERROR_CODE_UNKNOWN_ACTION: ErrorCode
ERROR_CODE_ELEMENT_NOT_FOUND: ErrorCode
ERROR_CODE_TIMEOUT: ErrorCode
ERROR_CODE_DIALOG_OPEN: ErrorCode
ERROR_CODE_NAVIGATION_FAILED: ErrorCode
ERROR_CODE_BLOCKED_BY_POLICY: ErrorCode
ERROR_CODE_PERMISSION_DENIED: ErrorCode
ERROR_CODE_PAYLOAD_TOO_LARGE: ErrorCode
ERROR_CODE_JS_EXCEPTION: ErrorCode
ERROR_CODE_SESSION_CLOSED: ErrorCode
ERROR_CODE_SESSION_CRASHED: ErrorCode
ERROR_CODE_INTERNAL: ErrorCode
ERROR_CODE_TAB_CRASHED: ErrorCode
DIALOG_KIND_UNSPECIFIED: DialogKind
DIALOG_KIND_ALERT: DialogKind
DIALOG_KIND_CONFIRM: DialogKind
DIALOG_KIND_PROMPT: DialogKind
DIALOG_KIND_BEFOREUNLOAD: DialogKind
DIALOG_KIND_BASIC_AUTH: DialogKind
DIALOG_KIND_PERMISSION: DialogKind

class Session(_message.Message):
    __slots__ = ("session_id", "tenant", "subject", "state", "created_at", "expires_at", "idle_deadline", "worker_id", "queue_wait_ms", "cdp_url", "labels", "replica", "artifacts", "artifacts_refused", "locale", "timezone", "user_agent", "geolocation", "color_scheme", "extra_headers", "offline", "network", "proxy_id", "bytes_sent", "bytes_received")
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
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    CDP_URL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    USER_AGENT_FIELD_NUMBER: _ClassVar[int]
    GEOLOCATION_FIELD_NUMBER: _ClassVar[int]
    COLOR_SCHEME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_HEADERS_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    PROXY_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tenant: str
    subject: str
    state: SessionState
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    idle_deadline: _timestamp_pb2.Timestamp
    worker_id: str
    queue_wait_ms: int
    cdp_url: str
    labels: _containers.ScalarMap[str, str]
    replica: str
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    artifacts_refused: str
    locale: str
    timezone: str
    user_agent: str
    geolocation: Geolocation
    color_scheme: ColorScheme
    extra_headers: _containers.ScalarMap[str, str]
    offline: bool
    network: NetworkConditions
    proxy_id: str
    bytes_sent: int
    bytes_received: int
    def __init__(self, session_id: _Optional[str] = ..., tenant: _Optional[str] = ..., subject: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idle_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., worker_id: _Optional[str] = ..., queue_wait_ms: _Optional[int] = ..., cdp_url: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., replica: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., artifacts_refused: _Optional[str] = ..., locale: _Optional[str] = ..., timezone: _Optional[str] = ..., user_agent: _Optional[str] = ..., geolocation: _Optional[_Union[Geolocation, _Mapping]] = ..., color_scheme: _Optional[_Union[ColorScheme, str]] = ..., extra_headers: _Optional[_Mapping[str, str]] = ..., offline: _Optional[bool] = ..., network: _Optional[_Union[NetworkConditions, _Mapping]] = ..., proxy_id: _Optional[str] = ..., bytes_sent: _Optional[int] = ..., bytes_received: _Optional[int] = ...) -> None: ...

class NetworkConditions(_message.Message):
    __slots__ = ("latency_ms", "download_bytes_per_s", "upload_bytes_per_s")
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    latency_ms: int
    download_bytes_per_s: int
    upload_bytes_per_s: int
    def __init__(self, latency_ms: _Optional[int] = ..., download_bytes_per_s: _Optional[int] = ..., upload_bytes_per_s: _Optional[int] = ...) -> None: ...

class Geolocation(_message.Message):
    __slots__ = ("latitude", "longitude", "accuracy")
    LATITUDE_FIELD_NUMBER: _ClassVar[int]
    LONGITUDE_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    latitude: float
    longitude: float
    accuracy: float
    def __init__(self, latitude: _Optional[float] = ..., longitude: _Optional[float] = ..., accuracy: _Optional[float] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("name", "kind", "size", "mime_type", "sha256", "created_at", "expires_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ArtifactKind
    size: int
    mime_type: str
    sha256: str
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ArtifactKind, str]] = ..., size: _Optional[int] = ..., mime_type: _Optional[str] = ..., sha256: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Viewport(_message.Message):
    __slots__ = ("width", "height", "scale", "mobile")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MOBILE_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    scale: float
    mobile: bool
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., scale: _Optional[float] = ..., mobile: _Optional[bool] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("action", "selector", "payload", "timeout_ms", "tab_index", "id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    action: str
    selector: str
    payload: _struct_pb2.Value
    timeout_ms: int
    tab_index: int
    id: str
    def __init__(self, action: _Optional[str] = ..., selector: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., tab_index: _Optional[int] = ..., id: _Optional[str] = ...) -> None: ...

class ActionResult(_message.Message):
    __slots__ = ("id", "action", "alias_of", "ok", "value", "data", "mime_type", "error", "duration_ms", "tab_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_OF_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    action: str
    alias_of: str
    ok: bool
    value: _struct_pb2.Value
    data: bytes
    mime_type: str
    error: ActionError
    duration_ms: int
    tab_index: int
    def __init__(self, id: _Optional[str] = ..., action: _Optional[str] = ..., alias_of: _Optional[str] = ..., ok: _Optional[bool] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., error: _Optional[_Union[ActionError, _Mapping]] = ..., duration_ms: _Optional[int] = ..., tab_index: _Optional[int] = ...) -> None: ...

class ActionError(_message.Message):
    __slots__ = ("code", "message", "did_you_mean", "dialog")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DID_YOU_MEAN_FIELD_NUMBER: _ClassVar[int]
    DIALOG_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    did_you_mean: _containers.RepeatedScalarFieldContainer[str]
    dialog: Dialog
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., did_you_mean: _Optional[_Iterable[str]] = ..., dialog: _Optional[_Union[Dialog, _Mapping]] = ...) -> None: ...

class Dialog(_message.Message):
    __slots__ = ("kind", "message", "url", "default_prompt", "grammar")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PROMPT_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    kind: DialogKind
    message: str
    url: str
    default_prompt: str
    grammar: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[_Union[DialogKind, str]] = ..., message: _Optional[str] = ..., url: _Optional[str] = ..., default_prompt: _Optional[str] = ..., grammar: _Optional[_Iterable[str]] = ...) -> None: ...

class Cookie(_message.Message):
    __slots__ = ("name", "value", "domain", "path", "expires", "http_only", "secure", "same_site")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    HTTP_ONLY_FIELD_NUMBER: _ClassVar[int]
    SECURE_FIELD_NUMBER: _ClassVar[int]
    SAME_SITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    domain: str
    path: str
    expires: float
    http_only: bool
    secure: bool
    same_site: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., domain: _Optional[str] = ..., path: _Optional[str] = ..., expires: _Optional[float] = ..., http_only: _Optional[bool] = ..., secure: _Optional[bool] = ..., same_site: _Optional[str] = ...) -> None: ...

class HttpAuth(_message.Message):
    __slots__ = ("username", "password")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: str
    def __init__(self, username: _Optional[str] = ..., password: _Optional[str] = ...) -> None: ...

class ContextEnvelope(_message.Message):
    __slots__ = ("version", "origin", "captured_at_ms", "user_agent", "viewport", "cookies", "local_storage", "session_storage", "http_auth", "integrity", "locale", "timezone", "geolocation", "color_scheme")
    class LocalStorageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SessionStorageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    USER_AGENT_FIELD_NUMBER: _ClassVar[int]
    VIEWPORT_FIELD_NUMBER: _ClassVar[int]
    COOKIES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_STORAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORAGE_FIELD_NUMBER: _ClassVar[int]
    HTTP_AUTH_FIELD_NUMBER: _ClassVar[int]
    INTEGRITY_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    GEOLOCATION_FIELD_NUMBER: _ClassVar[int]
    COLOR_SCHEME_FIELD_NUMBER: _ClassVar[int]
    version: int
    origin: str
    captured_at_ms: int
    user_agent: str
    viewport: Viewport
    cookies: _containers.RepeatedCompositeFieldContainer[Cookie]
    local_storage: _containers.ScalarMap[str, str]
    session_storage: _containers.ScalarMap[str, str]
    http_auth: HttpAuth
    integrity: str
    locale: str
    timezone: str
    geolocation: Geolocation
    color_scheme: ColorScheme
    def __init__(self, version: _Optional[int] = ..., origin: _Optional[str] = ..., captured_at_ms: _Optional[int] = ..., user_agent: _Optional[str] = ..., viewport: _Optional[_Union[Viewport, _Mapping]] = ..., cookies: _Optional[_Iterable[_Union[Cookie, _Mapping]]] = ..., local_storage: _Optional[_Mapping[str, str]] = ..., session_storage: _Optional[_Mapping[str, str]] = ..., http_auth: _Optional[_Union[HttpAuth, _Mapping]] = ..., integrity: _Optional[str] = ..., locale: _Optional[str] = ..., timezone: _Optional[str] = ..., geolocation: _Optional[_Union[Geolocation, _Mapping]] = ..., color_scheme: _Optional[_Union[ColorScheme, str]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("at", "session_id", "dialog_opened", "dialog_closed", "console", "navigated", "tab_opened", "tab_closed", "session_ended", "artifacts_refused", "dropped")
    AT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DIALOG_OPENED_FIELD_NUMBER: _ClassVar[int]
    DIALOG_CLOSED_FIELD_NUMBER: _ClassVar[int]
    CONSOLE_FIELD_NUMBER: _ClassVar[int]
    NAVIGATED_FIELD_NUMBER: _ClassVar[int]
    TAB_OPENED_FIELD_NUMBER: _ClassVar[int]
    TAB_CLOSED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ENDED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    session_id: str
    dialog_opened: DialogOpened
    dialog_closed: DialogClosed
    console: ConsoleMessage
    navigated: PageNavigated
    tab_opened: TabOpened
    tab_closed: TabClosed
    session_ended: SessionEnded
    artifacts_refused: ArtifactsRefused
    dropped: int
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ..., dialog_opened: _Optional[_Union[DialogOpened, _Mapping]] = ..., dialog_closed: _Optional[_Union[DialogClosed, _Mapping]] = ..., console: _Optional[_Union[ConsoleMessage, _Mapping]] = ..., navigated: _Optional[_Union[PageNavigated, _Mapping]] = ..., tab_opened: _Optional[_Union[TabOpened, _Mapping]] = ..., tab_closed: _Optional[_Union[TabClosed, _Mapping]] = ..., session_ended: _Optional[_Union[SessionEnded, _Mapping]] = ..., artifacts_refused: _Optional[_Union[ArtifactsRefused, _Mapping]] = ..., dropped: _Optional[int] = ...) -> None: ...

class ArtifactsRefused(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class DialogOpened(_message.Message):
    __slots__ = ("dialog", "tab_index")
    DIALOG_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    dialog: Dialog
    tab_index: int
    def __init__(self, dialog: _Optional[_Union[Dialog, _Mapping]] = ..., tab_index: _Optional[int] = ...) -> None: ...

class DialogClosed(_message.Message):
    __slots__ = ("kind", "accepted", "tab_index")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    kind: DialogKind
    accepted: bool
    tab_index: int
    def __init__(self, kind: _Optional[_Union[DialogKind, str]] = ..., accepted: _Optional[bool] = ..., tab_index: _Optional[int] = ...) -> None: ...

class ConsoleMessage(_message.Message):
    __slots__ = ("level", "text", "tab_index")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    level: str
    text: str
    tab_index: int
    def __init__(self, level: _Optional[str] = ..., text: _Optional[str] = ..., tab_index: _Optional[int] = ...) -> None: ...

class PageNavigated(_message.Message):
    __slots__ = ("url", "tab_index")
    URL_FIELD_NUMBER: _ClassVar[int]
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    url: str
    tab_index: int
    def __init__(self, url: _Optional[str] = ..., tab_index: _Optional[int] = ...) -> None: ...

class TabOpened(_message.Message):
    __slots__ = ("tab_index", "url")
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    tab_index: int
    url: str
    def __init__(self, tab_index: _Optional[int] = ..., url: _Optional[str] = ...) -> None: ...

class TabClosed(_message.Message):
    __slots__ = ("tab_index",)
    TAB_INDEX_FIELD_NUMBER: _ClassVar[int]
    tab_index: int
    def __init__(self, tab_index: _Optional[int] = ...) -> None: ...

class SessionEnded(_message.Message):
    __slots__ = ("state", "reason")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    state: SessionState
    reason: str
    def __init__(self, state: _Optional[_Union[SessionState, str]] = ..., reason: _Optional[str] = ...) -> None: ...
