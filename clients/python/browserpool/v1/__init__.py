"""Generated from proto/browserpool/v1 by scripts/gen-clients.sh. DO NOT EDIT."""
