//! Admin calls about the whole service: the same rpc asked of every other live replica (on
//! the caller's behalf, marked so each answers for itself alone) and the answers merged. A
//! replica that does not answer is listed with its error; it never fails the whole call.

use std::collections::BTreeMap;

use browserpool_proto::v1 as pb;
use browserpool_proto::v1::admin_client::AdminClient;
use tonic::transport::Channel;
use tonic::Status;

use crate::error::ServiceError;
use crate::forward::Peers;
use crate::store::ReplicaRecord;

/// The answer of one replica to a fanned-out call.
pub struct Answer<T> {
    pub replica: ReplicaRecord,
    pub result: Result<T, Status>,
}

/// Calls `call` on every replica of `targets` at once and gathers the answers in order.
pub async fn each<T, F, Fut>(peers: &Peers, targets: &[ReplicaRecord], call: F) -> Vec<Answer<T>>
where
    F: Fn(AdminClient<Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
{
    let calls = targets.iter().map(|replica| {
        let client = AdminClient::new(peers.channel(&replica.grpc_addr));
        let fut = call(client);
        async move { Answer { replica: replica.clone(), result: fut.await.map(tonic::Response::into_inner) } }
    });
    futures::future::join_all(calls).await
}

/// Why a replica's answer is missing, for [`pb::ReplicaStatus::error`].
fn failure(replica: &ReplicaRecord, status: &Status) -> String {
    format!("replica {} at {} did not answer: {:?}: {}", replica.id, replica.grpc_addr, status.code(), status.message())
}

/// This replica's status plus the others' answers: workers listed, counts summed over the
/// replicas that answered, tenant usage summed per tenant.
pub fn merge_status(
    mut whole: pb::PoolStatusResponse,
    answers: Vec<Answer<pb::PoolStatusResponse>>,
) -> pb::PoolStatusResponse {
    let mut tenants: BTreeMap<String, pb::TenantUsage> =
        whole.tenants.drain(..).map(|t| (t.tenant.clone(), t)).collect();
    for answer in answers {
        match answer.result {
            Ok(part) => {
                whole.workers.extend(part.workers);
                whole.warm += part.warm;
                whole.leased += part.leased;
                whole.capacity += part.capacity;
                whole.draining &= part.draining;
                whole.unsandboxed |= part.unsandboxed;
                for t in part.tenants {
                    let usage = tenants.entry(t.tenant.clone()).or_insert_with(|| pb::TenantUsage {
                        active: 0,
                        queued: 0,
                        ..t.clone()
                    });
                    usage.active += t.active;
                    usage.queued += t.queued;
                }
                whole.replicas.extend(part.replicas);
            }
            Err(status) => whole.replicas.push(pb::ReplicaStatus {
                replica: answer.replica.id.clone(),
                grpc_addr: answer.replica.grpc_addr.clone(),
                error: failure(&answer.replica, &status),
                ..Default::default()
            }),
        }
    }
    whole.tenants = tenants.into_values().collect();
    whole
}

/// The drain answers of the replicas acted on (`mine` when this one is among them).
pub fn merge_drain(mine: Option<pb::DrainResponse>, answers: Vec<Answer<pb::DrainResponse>>) -> pb::DrainResponse {
    let mut whole = mine.unwrap_or(pb::DrainResponse { draining: true, leased: 0, replicas: Vec::new() });
    for answer in answers {
        match answer.result {
            Ok(part) => {
                whole.draining &= part.draining;
                whole.leased += part.leased;
                whole.replicas.extend(part.replicas);
            }
            Err(status) => {
                whole.draining = false;
                whole.replicas.push(pb::ReplicaStatus {
                    replica: answer.replica.id.clone(),
                    grpc_addr: answer.replica.grpc_addr.clone(),
                    error: failure(&answer.replica, &status),
                    ..Default::default()
                });
            }
        }
    }
    whole
}

/// Kills sessions held by other replicas (`(session, replica)` pairs) through their
/// KillSession. Sessions of replicas no longer live are left to the sweep (CRASHED). Fails
/// with UNAVAILABLE naming every session a live replica could not end.
pub async fn kill_elsewhere(
    peers: &Peers,
    caller: &tonic::metadata::MetadataMap,
    sessions: Vec<(String, String)>,
    reason: &str,
) -> Result<(), ServiceError> {
    let live = peers.others().await?;
    let calls = sessions.into_iter().filter_map(|(id, replica)| {
        let owner = live.iter().find(|r| r.id == replica)?.clone();
        let req =
            peers.on_behalf(caller, pb::KillSessionRequest { session_id: id.clone(), reason: reason.to_string() });
        let mut client = AdminClient::new(peers.channel(&owner.grpc_addr));
        Some(async move { client.kill_session(req).await.map_err(|s| format!("{id} ({})", failure(&owner, &s))) })
    });
    let failed: Vec<String> = futures::future::join_all(calls).await.into_iter().filter_map(Result::err).collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(ServiceError::Unreachable(format!(
            "could not end every live session, nothing deleted: {}",
            failed.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: &str) -> ReplicaRecord {
        ReplicaRecord {
            id: id.into(),
            grpc_addr: format!("{id}:50051"),
            http_addr: format!("{id}:8080"),
            heartbeat_ms: 0,
        }
    }

    fn status(
        id: &str,
        warm: u32,
        leased: u32,
        draining: bool,
        tenants: &[(&str, u32, u32)],
    ) -> pb::PoolStatusResponse {
        pb::PoolStatusResponse {
            workers: vec![pb::Worker { worker_id: format!("{id}-w"), replica: id.into(), ..Default::default() }],
            warm,
            leased,
            capacity: warm + leased,
            draining,
            unsandboxed: false,
            tenants: tenants
                .iter()
                .map(|(t, active, queued)| pb::TenantUsage {
                    tenant: t.to_string(),
                    active: *active,
                    queued: *queued,
                    max_slots: 4,
                })
                .collect(),
            replicas: vec![pb::ReplicaStatus { replica: id.into(), draining, warm, leased, ..Default::default() }],
        }
    }

    #[test]
    fn statuses_sum_over_the_replicas_that_answered() {
        let merged = merge_status(
            status("a", 2, 1, true, &[("t", 1, 0), ("u", 0, 2)]),
            vec![
                Answer { replica: replica("b"), result: Ok(status("b", 1, 3, false, &[("t", 2, 1)])) },
                Answer { replica: replica("c"), result: Err(Status::unavailable("connection refused")) },
            ],
        );
        assert_eq!((merged.warm, merged.leased, merged.capacity), (3, 4, 7));
        assert!(!merged.draining, "one replica still takes sessions");
        let t: Vec<_> = merged.tenants.iter().map(|t| (t.tenant.as_str(), t.active, t.queued, t.max_slots)).collect();
        assert_eq!(t, vec![("t", 3, 1, 4), ("u", 0, 2, 4)]);
        let workers: Vec<_> = merged.workers.iter().map(|w| w.replica.as_str()).collect();
        assert_eq!(workers, vec!["a", "b"]);
        let replicas: Vec<_> = merged.replicas.iter().map(|r| (r.replica.as_str(), r.error.is_empty())).collect();
        assert_eq!(replicas, vec![("a", true), ("b", true), ("c", false)]);
        assert!(
            merged.replicas[2].error.contains("c:50051") && merged.replicas[2].error.contains("connection refused")
        );
    }

    #[test]
    fn a_drain_is_whole_only_when_every_replica_drains() {
        let drained = |id: &str, leased| pb::DrainResponse {
            draining: true,
            leased,
            replicas: vec![pb::ReplicaStatus { replica: id.into(), draining: true, leased, ..Default::default() }],
        };
        let all =
            merge_drain(Some(drained("a", 1)), vec![Answer { replica: replica("b"), result: Ok(drained("b", 2)) }]);
        assert!(all.draining);
        assert_eq!((all.leased, all.replicas.len()), (3, 2));
        let partial = merge_drain(
            Some(drained("a", 1)),
            vec![Answer { replica: replica("b"), result: Err(Status::deadline_exceeded("slow")) }],
        );
        assert!(!partial.draining);
        assert!(partial.replicas[1].error.contains("DeadlineExceeded"));
    }
}
