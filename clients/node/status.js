// Rich gRPC errors: the `grpc-status-details-bin` trailer decoded into google.rpc.Status and
// its details (ErrorInfo, BadRequest, RetryInfo, ...).
//
// search.v1 imports no google/rpc proto, so protos/ does not ship them: the schemas are the
// googleapis files google/rpc/status.proto and google/rpc/error_details.proto, loaded here
// from the google-proto-files npm package (see docs/contract.md, "Other languages").
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const protobuf = require("protobufjs");
const protoFiles = require("google-proto-files");

const STATUS_TRAILER = "grpc-status-details-bin";
const CONVERSION = { longs: String, enums: String, defaults: true, arrays: true, objects: true };

let root;

function rpcRoot() {
  if (root === undefined) {
    const includeDir = path.resolve(protoFiles.getProtoPath(), ".."); // holds google/rpc/
    root = new protobuf.Root();
    // Imports (google/protobuf/any.proto, duration.proto) resolve against the same folder.
    root.resolvePath = (origin, target) => {
      const candidate = path.join(includeDir, target);
      return fs.existsSync(candidate) ? candidate : protobuf.util.path.resolve(origin, target);
    };
    root.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"], {
      keepCase: false,
    });
  }
  return root;
}

/** One Any detail as `{type, ...fields}`; `{type, undecoded: true}` for an unknown type. */
function decodeDetail(any) {
  // protobufjs bundles google/protobuf/any.proto as JSON with proto field names: `type_url`.
  const url = any.typeUrl ?? any.type_url;
  const type = url.slice(url.lastIndexOf("/") + 1);
  const message = rpcRoot().lookup(type);
  if (!(message instanceof protobuf.Type)) return { type, undecoded: true };
  return { type, ...message.toObject(message.decode(any.value), CONVERSION) };
}

/**
 * The google.rpc.Status of a failed grpc-js call, with decoded details; undefined when the
 * server sent no `grpc-status-details-bin` trailer.
 */
function richStatus(error) {
  const values = error.metadata ? error.metadata.get(STATUS_TRAILER) : [];
  if (values.length === 0) return undefined;
  const Status = rpcRoot().lookupType("google.rpc.Status");
  const status = Status.decode(values[0]);
  return { code: status.code, message: status.message, details: status.details.map(decodeDetail) };
}

module.exports = { richStatus, STATUS_TRAILER };
