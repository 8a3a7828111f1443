// Writes and reads the search.v1 gRPC service from Node.js with @grpc/grpc-js:
//
//   1. CreateProject, then UpsertDocuments with a metadata Struct and timestamps;
//   2. a search of that project that reads metadata and timestamps back and checks them;
//   3. a call the server refuses (INVALID_ARGUMENT), its rich error details decoded;
//   4. one hybrid project search over every project and one workspace search.
//
//   npm ci
//   node example.js [ADDRESS] [QUERY]
//
// ADDRESS defaults to $SEARCH_ADDRESS or 127.0.0.1:50051; QUERY to $SEARCH_QUERY or "nebula".
// $SEARCH_TOKEN, when set, is sent as a bearer token (writes need the write role). The protos
// are loaded at run time from ../../protos (no generated code). Exits 1 on any failure,
// including a value that does not round-trip.
"use strict";

const assert = require("node:assert/strict");
const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const { richStatus } = require("./status");
const { fromStruct, fromTimestamp, toStruct, toTimestamp, toValue } = require("./wellknown");

const PROTO_ROOT = path.resolve(__dirname, "..", "..", "protos");
const FILES = [
  "search/v1/index.proto",
  "search/v1/project_search.proto",
  "search/v1/workspace_search.proto",
];

function loadServices() {
  const definition = protoLoader.loadSync(FILES, {
    includeDirs: [PROTO_ROOT],
    keepCase: false, // lowerCamelCase field names, as in the JSON mapping
    longs: String, // int64 ids and totals stay exact, as strings
    enums: String, // enum values by name, e.g. "SEARCH_MODE_HYBRID"
    defaults: true, // unset scalars read as their zero values
    oneofs: true, // a oneof's name holds the name of the member that is set
  });
  return grpc.loadPackageDefinition(definition).search.v1;
}

function callOptions(seconds) {
  return { deadline: new Date(Date.now() + seconds * 1000) };
}

function metadata() {
  const md = new grpc.Metadata();
  md.set("x-request-id", `node-example-${process.pid}-${Date.now()}`);
  if (process.env.SEARCH_TOKEN) {
    md.set("authorization", `Bearer ${process.env.SEARCH_TOKEN}`);
  }
  return md;
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata(), callOptions(10), (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

function collect(stream) {
  return new Promise((resolve, reject) => {
    const messages = [];
    stream.on("data", (message) => messages.push(message));
    stream.on("error", reject);
    stream.on("end", () => resolve(messages));
  });
}

// A client-streaming call: writes each request, then waits for the one response.
function upload(client, method, requests) {
  return new Promise((resolve, reject) => {
    const call = client[method](metadata(), callOptions(30), (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
    requests.forEach((request) => call.write(request));
    call.end();
  });
}

// What the example writes and expects back: JSON-compatible metadata of every Value kind,
// and times with microseconds (what the server stores; nanoseconds past that are dropped).
const METADATA = {
  team: "platform",
  severity: 2,
  reviewed: true,
  owner: { name: "Ada", oncall: ["ada@example.com", "bob@example.com"] },
  supersedes: null,
  ratio: 0.25,
};
const CREATE_TIME = "2024-05-01T09:30:00.123456Z"; // an RFC 3339 string
const UPDATE_TIME = new Date("2024-06-02T17:45:10.500Z"); // a Date

async function writeAndReadBack(v1, address, credentials) {
  const index = new v1.IndexService(address, credentials);
  const search = new v1.ProjectSearchService(address, credentials);
  const externalId = `node-example-${Date.now()}-${process.pid}`;
  const { project } = await unary(index, "CreateProject", {
    externalId,
    name: "Node example",
  });
  console.log(`created project ${project.projectId} (${project.externalId}) at ${fromTimestamp(project.createTime)}`);

  const document = {
    kind: "note",
    rowId: "incident-review.md",
    title: "Incident review",
    path: "eng/incident-review.md",
    body: "# Incident review\n\nThe nebula ingest stalled; the on-call engineer paged the platform team.",
    metadata: toStruct(METADATA), // a plain object would be encoded as an empty Struct
    createTime: toTimestamp(CREATE_TIME), // an RFC 3339 string would fail to serialize
    updateTime: toTimestamp(UPDATE_TIME),
  };
  const summary = await upload(index, "UpsertDocuments", [
    { projectId: project.projectId, documents: [document] },
  ]);
  const outcomes = summary.results.map((r) => `${r.rowId}: ${r.outcome}`).join(", ");
  console.log(`upserted ${summary.documentsReceived} document(s): ${outcomes}`);

  const request = {
    scope: { projectIds: [project.projectId] }, // int64 as strings, with longs: String
    text: "incident",
    mode: "SEARCH_MODE_FTS",
    filters: {
      // Value operands, built like Struct fields.
      metadata: [{ path: "team", operator: "METADATA_OPERATOR_EQ", values: [toValue("platform")] }],
    },
  };
  const pages = await collect(search.SearchProjects(request, metadata(), callOptions(30)));
  const hit = pages.flatMap(({ page }) => page.results).find((r) => r.rowId === document.rowId);
  assert.ok(hit, `the document written was not found: ${JSON.stringify(pages)}`);
  const metadataBack = fromStruct(hit.metadata);
  assert.deepEqual(metadataBack, METADATA, "metadata did not round-trip");
  console.log(`metadata round-trip: ok ${sortedJson(metadataBack)}`);
  const createBack = fromTimestamp(hit.createTime);
  const updateBack = fromTimestamp(hit.updateTime);
  assert.equal(createBack, CREATE_TIME, "createTime did not round-trip");
  assert.equal(updateBack, UPDATE_TIME.toISOString(), "updateTime did not round-trip");
  console.log(`timestamps round-trip: ok createTime=${createBack} updateTime=${updateBack}`);
  index.close();
  search.close();
}

// JSON with object keys sorted: a Struct is a map, and map order on the wire is unspecified.
function sortedJson(value) {
  return JSON.stringify(value, (key, item) =>
    item && typeof item === "object" && !Array.isArray(item)
      ? Object.fromEntries(Object.keys(item).sort().map((k) => [k, item[k]]))
      : item,
  );
}

function printRichError(error) {
  const status = richStatus(error);
  console.log(`refused: ${grpc.status[error.code]} (code ${error.code}): ${error.details}`);
  if (status === undefined) {
    console.log("  no grpc-status-details-bin trailer");
    return;
  }
  assert.equal(status.code, error.code, "google.rpc.Status.code differs from the call's status");
  for (const detail of status.details) {
    if (detail.type === "google.rpc.ErrorInfo") {
      console.log(`  ErrorInfo: reason=${detail.reason} domain=${detail.domain} metadata=${sortedJson(detail.metadata)}`);
    } else if (detail.type === "google.rpc.BadRequest") {
      for (const v of detail.fieldViolations) {
        console.log(`  BadRequest: field=${v.field} description=${v.description}`);
      }
    } else if (detail.type === "google.rpc.RetryInfo") {
      const delay = Number(detail.retryDelay.seconds) + detail.retryDelay.nanos / 1e9;
      console.log(`  RetryInfo: retry after ${delay}s`);
    } else {
      console.log(`  ${detail.type}: ${JSON.stringify(detail)}`);
    }
  }
}

async function refusedCall(v1, address, credentials) {
  const index = new v1.IndexService(address, credentials);
  try {
    await unary(index, "CreateProject", { externalId: "not a valid id!", name: "refused" });
    throw new Error("CreateProject accepted an invalid external id");
  } catch (error) {
    if (error.code !== grpc.status.INVALID_ARGUMENT) throw error;
    printRichError(error);
  } finally {
    index.close();
  }
}

async function projectSearch(v1, address, credentials, text) {
  const index = new v1.IndexService(address, credentials);
  const search = new v1.ProjectSearchService(address, credentials);
  const { projects } = await unary(index, "ListProjects", { pageSize: 100 });
  const projectIds = projects.map((p) => p.projectId);
  console.log(`project search: "${text}" over ${projectIds.length} project(s)`);
  const request = {
    scope: { projectIds },
    text,
    mode: process.env.SEARCH_MODE || "SEARCH_MODE_HYBRID",
    pageSize: 5,
    maxPages: 2, // the server streams up to two pages in this one call
  };
  const pages = await collect(search.SearchProjects(request, metadata(), callOptions(30)));
  for (const { page } of pages) {
    console.log(`  page ${page.pageNumber} (more: ${page.hasMore})`);
    page.results.forEach((r, i) => {
      const score = r.scores.score.toFixed(3);
      console.log(`  ${i + 1}. ${score}  ${r.title}  [${r.projectExternalId}:${r.path}]`);
    });
  }
  index.close();
  search.close();
}

async function workspaceSearch(v1, address, credentials, text) {
  const workspace = new v1.WorkspaceSearchService(address, credentials);
  const { accounts, guidance } = await unary(workspace, "ListAccounts", {});
  console.log(`workspace search: "${text}" over ${accounts.length} account(s)`);
  if (guidance.cards.length > 0) {
    console.log(`  first query card: ${guidance.cards[0].provider}: ${guidance.cards[0].example}`);
  }
  // One query per provider with a connected account; GitHub when none is connected (the
  // service then reports that the query reached no account).
  const providers = [...new Set(accounts.map((a) => a.provider))];
  const queries = (providers.length ? providers : ["PROVIDER_GITHUB"]).map((provider) => ({
    provider,
    text,
  }));
  const stream = workspace.SearchWorkspace({ queries, topK: 5 }, metadata(), callOptions(30));
  for (const response of await collect(stream)) {
    // The oneof `message` names its member: "queryStatus" or "page".
    if (response.message === "queryStatus") {
      const s = response.queryStatus;
      console.log(`  query ${s.queryIndex} on ${s.accountId || "-"}: ${s.state} ${s.message}`);
    } else if (response.message === "page") {
      console.log(`  fused page ${response.page.pageNumber} (rrf k=${response.page.rrfK})`);
      response.page.results.forEach((r, i) => {
        console.log(`  ${i + 1}. ${r.score.toFixed(4)}  ${r.title}  ${r.url}`);
      });
    }
  }
  workspace.close();
}

async function main() {
  const address = process.argv[2] || process.env.SEARCH_ADDRESS || "127.0.0.1:50051";
  const text = process.argv[3] || process.env.SEARCH_QUERY || "nebula";
  const v1 = loadServices();
  const credentials = grpc.credentials.createInsecure();
  await writeAndReadBack(v1, address, credentials);
  await refusedCall(v1, address, credentials);
  await projectSearch(v1, address, credentials, text);
  await workspaceSearch(v1, address, credentials, text);
}

main().catch((error) => {
  // grpc-js errors carry the status code and the server's message.
  console.error(`error: ${error.code !== undefined ? `code ${error.code}: ` : ""}${error.details || error.message}`);
  process.exit(1);
});
