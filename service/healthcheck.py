"""`python -m service.healthcheck`: exit 0 when the local server is ready to serve searches.

Readiness (the default) is the gRPC health of `search.v1.ProjectSearchService`: SERVING only
once the embedding model has loaded and the store answers. `--liveness` checks the server's
overall health ("") instead: the process is up and answering.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

READINESS_SERVICE = "search.v1.ProjectSearchService"  # set from the model and store probes


def main(argv: Sequence[str] | None = None) -> int:
    """Probe 127.0.0.1:$SEARCH_PORT (default 50051)."""
    parser = argparse.ArgumentParser(prog="python -m service.healthcheck")
    parser.add_argument("--liveness", action="store_true", help="only check the process is up")
    args = parser.parse_args(argv)
    target = f"127.0.0.1:{os.environ.get('SEARCH_PORT', '50051')}"
    service = "" if args.liveness else READINESS_SERVICE
    try:
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2
            )
    except grpc.RpcError as error:
        print(f"unhealthy: {error.code().name}", file=sys.stderr)
        return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else "NOT_SERVING")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
