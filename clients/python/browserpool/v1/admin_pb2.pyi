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

class Isolation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_UNSPECIFIED: _ClassVar[Isolation]
    ISOLATION_PROCESS: _ClassVar[Isolation]
    ISOLATION_CONTEXT: _ClassVar[Isolation]

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_STATE_UNSPECIFIED: _ClassVar[WorkerState]
    WORKER_STATE_BOOTING: _ClassVar[WorkerState]
    WORKER_STATE_WARM: _ClassVar[WorkerState]
    WORKER_STATE_LEASED: _ClassVar[WorkerState]
    WORKER_STATE_RECYCLING: _ClassVar[WorkerState]
    WORKER_STATE_DEAD: _ClassVar[WorkerState]
ISOLATION_UNSPECIFIED: Isolation
ISOLATION_PROCESS: Isolation
ISOLATION_CONTEXT: Isolation
WORKER_STATE_UNSPECIFIED: WorkerState
WORKER_STATE_BOOTING: WorkerState
WORKER_STATE_WARM: WorkerState
WORKER_STATE_LEASED: WorkerState
WORKER_STATE_RECYCLING: WorkerState
WORKER_STATE_DEAD: WorkerState

class Proxy(_message.Message):
    __slots__ = ("id", "url", "username", "password", "direct_hosts", "tenants", "has_password")
    ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    DIRECT_HOSTS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    HAS_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    id: str
    url: str
    username: str
    password: str
    direct_hosts: _containers.RepeatedScalarFieldContainer[str]
    tenants: _containers.RepeatedScalarFieldContainer[str]
    has_password: bool
    def __init__(self, id: _Optional[str] = ..., url: _Optional[str] = ..., username: _Optional[str] = ..., password: _Optional[str] = ..., direct_hosts: _Optional[_Iterable[str]] = ..., tenants: _Optional[_Iterable[str]] = ..., has_password: _Optional[bool] = ...) -> None: ...

class PutProxyRequest(_message.Message):
    __slots__ = ("proxy",)
    PROXY_FIELD_NUMBER: _ClassVar[int]
    proxy: Proxy
    def __init__(self, proxy: _Optional[_Union[Proxy, _Mapping]] = ...) -> None: ...

class PutProxyResponse(_message.Message):
    __slots__ = ("proxy", "created")
    PROXY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    proxy: Proxy
    created: bool
    def __init__(self, proxy: _Optional[_Union[Proxy, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListProxiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProxiesResponse(_message.Message):
    __slots__ = ("proxies",)
    PROXIES_FIELD_NUMBER: _ClassVar[int]
    proxies: _containers.RepeatedCompositeFieldContainer[Proxy]
    def __init__(self, proxies: _Optional[_Iterable[_Union[Proxy, _Mapping]]] = ...) -> None: ...

class DeleteProxyRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteProxyResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("id", "max_slots", "max_queue", "max_session_ttl_ms", "idle_timeout_ms", "allow_hosts", "allow_private_networks", "isolation", "max_memory_mb", "default_record", "max_file_mb", "max_artifact_mb", "artifact_ttl_s", "default_proxy", "max_session_bytes")
    ID_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSION_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_HOSTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PRIVATE_NETWORKS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RECORD_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_MB_FIELD_NUMBER: _ClassVar[int]
    MAX_ARTIFACT_MB_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_TTL_S_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PROXY_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSION_BYTES_FIELD_NUMBER: _ClassVar[int]
    id: str
    max_slots: int
    max_queue: int
    max_session_ttl_ms: int
    idle_timeout_ms: int
    allow_hosts: _containers.RepeatedScalarFieldContainer[str]
    allow_private_networks: bool
    isolation: Isolation
    max_memory_mb: int
    default_record: _common_pb2.Record
    max_file_mb: int
    max_artifact_mb: int
    artifact_ttl_s: int
    default_proxy: str
    max_session_bytes: int
    def __init__(self, id: _Optional[str] = ..., max_slots: _Optional[int] = ..., max_queue: _Optional[int] = ..., max_session_ttl_ms: _Optional[int] = ..., idle_timeout_ms: _Optional[int] = ..., allow_hosts: _Optional[_Iterable[str]] = ..., allow_private_networks: _Optional[bool] = ..., isolation: _Optional[_Union[Isolation, str]] = ..., max_memory_mb: _Optional[int] = ..., default_record: _Optional[_Union[_common_pb2.Record, str]] = ..., max_file_mb: _Optional[int] = ..., max_artifact_mb: _Optional[int] = ..., artifact_ttl_s: _Optional[int] = ..., default_proxy: _Optional[str] = ..., max_session_bytes: _Optional[int] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ("worker_id", "state", "pid", "cdp_port", "tenant", "session_id", "started_at", "rss_bytes", "pss_bytes", "replica")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CDP_PORT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    state: WorkerState
    pid: int
    cdp_port: int
    tenant: str
    session_id: str
    started_at: _timestamp_pb2.Timestamp
    rss_bytes: int
    pss_bytes: int
    replica: str
    def __init__(self, worker_id: _Optional[str] = ..., state: _Optional[_Union[WorkerState, str]] = ..., pid: _Optional[int] = ..., cdp_port: _Optional[int] = ..., tenant: _Optional[str] = ..., session_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rss_bytes: _Optional[int] = ..., pss_bytes: _Optional[int] = ..., replica: _Optional[str] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("replica", "grpc_addr", "draining", "warm", "leased", "capacity", "error", "sandbox", "unsandboxed", "resource_fence")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    WARM_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    UNSANDBOXED_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FENCE_FIELD_NUMBER: _ClassVar[int]
    replica: str
    grpc_addr: str
    draining: bool
    warm: int
    leased: int
    capacity: int
    error: str
    sandbox: str
    unsandboxed: bool
    resource_fence: str
    def __init__(self, replica: _Optional[str] = ..., grpc_addr: _Optional[str] = ..., draining: _Optional[bool] = ..., warm: _Optional[int] = ..., leased: _Optional[int] = ..., capacity: _Optional[int] = ..., error: _Optional[str] = ..., sandbox: _Optional[str] = ..., unsandboxed: _Optional[bool] = ..., resource_fence: _Optional[str] = ...) -> None: ...

class TenantUsage(_message.Message):
    __slots__ = ("tenant", "active", "queued", "max_slots")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    active: int
    queued: int
    max_slots: int
    def __init__(self, tenant: _Optional[str] = ..., active: _Optional[int] = ..., queued: _Optional[int] = ..., max_slots: _Optional[int] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("seq", "at", "tenant", "subject", "jti_hash", "session_id", "rpc", "action", "alias_of", "target", "outcome", "code", "duration_ms", "prev_hash", "hash")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    JTI_HASH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RPC_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_OF_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at: _timestamp_pb2.Timestamp
    tenant: str
    subject: str
    jti_hash: str
    session_id: str
    rpc: str
    action: str
    alias_of: str
    target: str
    outcome: str
    code: str
    duration_ms: int
    prev_hash: str
    hash: str
    def __init__(self, seq: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., subject: _Optional[str] = ..., jti_hash: _Optional[str] = ..., session_id: _Optional[str] = ..., rpc: _Optional[str] = ..., action: _Optional[str] = ..., alias_of: _Optional[str] = ..., target: _Optional[str] = ..., outcome: _Optional[str] = ..., code: _Optional[str] = ..., duration_ms: _Optional[int] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ...) -> None: ...

class PoolStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolStatusResponse(_message.Message):
    __slots__ = ("workers", "warm", "leased", "capacity", "draining", "tenants", "replicas", "unsandboxed")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WARM_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    UNSANDBOXED_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    warm: int
    leased: int
    capacity: int
    draining: bool
    tenants: _containers.RepeatedCompositeFieldContainer[TenantUsage]
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    unsandboxed: bool
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ..., warm: _Optional[int] = ..., leased: _Optional[int] = ..., capacity: _Optional[int] = ..., draining: _Optional[bool] = ..., tenants: _Optional[_Iterable[_Union[TenantUsage, _Mapping]]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., unsandboxed: _Optional[bool] = ...) -> None: ...

class AdminListSessionsRequest(_message.Message):
    __slots__ = ("tenant", "state", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    state: _common_pb2.SessionState
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.SessionState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AdminListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_common_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class KillSessionRequest(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class KillSessionResponse(_message.Message):
    __slots__ = ("killed", "state")
    KILLED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    killed: bool
    state: _common_pb2.SessionState
    def __init__(self, killed: _Optional[bool] = ..., state: _Optional[_Union[_common_pb2.SessionState, str]] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("drain", "all_replicas", "replica")
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    ALL_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    drain: bool
    all_replicas: bool
    replica: str
    def __init__(self, drain: _Optional[bool] = ..., all_replicas: _Optional[bool] = ..., replica: _Optional[str] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("draining", "leased", "replicas")
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    draining: bool
    leased: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    def __init__(self, draining: _Optional[bool] = ..., leased: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ...) -> None: ...

class PutTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class PutTenantResponse(_message.Message):
    __slots__ = ("tenant", "created")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    created: bool
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class DeleteTenantRequest(_message.Message):
    __slots__ = ("id", "force")
    ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    force: bool
    def __init__(self, id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteTenantResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class IssueTokenRequest(_message.Message):
    __slots__ = ("tenant", "subject", "scopes", "ttl_s")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    subject: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    ttl_s: int
    def __init__(self, tenant: _Optional[str] = ..., subject: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class IssueTokenResponse(_message.Message):
    __slots__ = ("token", "jti", "expires_at")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    JTI_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    token: str
    jti: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, token: _Optional[str] = ..., jti: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("jti",)
    JTI_FIELD_NUMBER: _ClassVar[int]
    jti: str
    def __init__(self, jti: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: bool
    def __init__(self, revoked: _Optional[bool] = ...) -> None: ...

class QueryAuditRequest(_message.Message):
    __slots__ = ("tenant", "session_id", "action", "since", "limit")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    session_id: str
    action: str
    since: _timestamp_pb2.Timestamp
    limit: int
    def __init__(self, tenant: _Optional[str] = ..., session_id: _Optional[str] = ..., action: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class VerifyAuditRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifyAuditResponse(_message.Message):
    __slots__ = ("ok", "records_checked", "first_bad_seq", "message")
    OK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    FIRST_BAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    records_checked: int
    first_bad_seq: int
    message: str
    def __init__(self, ok: _Optional[bool] = ..., records_checked: _Optional[int] = ..., first_bad_seq: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
