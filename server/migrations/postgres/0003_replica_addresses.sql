-- Where other replicas reach a replica, so a call naming a session another replica holds is
-- forwarded there: gRPC and HTTP (CDP) as host:port ('' for replicas of older versions, which
-- are never forwarded to).
ALTER TABLE replicas ADD COLUMN grpc_addr TEXT NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN http_addr TEXT NOT NULL DEFAULT '';
