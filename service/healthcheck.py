"""`python -m service.healthcheck`: exit 0 when the local server's gRPC health is SERVING."""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main() -> int:
    """Probe 127.0.0.1:$SEARCH_PORT (default 50051)."""
    target = f"127.0.0.1:{os.environ.get('SEARCH_PORT', '50051')}"
    try:
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2
            )
    except grpc.RpcError as error:
        print(f"unhealthy: {error.code().name}", file=sys.stderr)
        return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else "NOT_SERVING")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
