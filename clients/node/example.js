// One project search and one workspace search against the search.v1 gRPC service.
//
//   npm install
//   node example.js [ADDRESS] [QUERY]
//
// ADDRESS defaults to $SEARCH_ADDRESS or 127.0.0.1:50051; QUERY to $SEARCH_QUERY or "nebula".
// $SEARCH_TOKEN, when set, is sent as a bearer token. The protos are loaded at run time from
// ../../protos (no generated code); server reflection would work too.
"use strict";

const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

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
    longs: String, // int64 ids stay exact
    enums: String, // enum values by name, e.g. "SEARCH_MODE_HYBRID"
    defaults: true,
    oneofs: true,
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
  for (const message of await collect(stream)) {
    if (message.queryStatus) {
      const s = message.queryStatus;
      console.log(`  query ${s.queryIndex} on ${s.accountId || "-"}: ${s.state} ${s.message}`);
    } else if (message.page) {
      console.log(`  fused page ${message.page.pageNumber} (rrf k=${message.page.rrfK})`);
      message.page.results.forEach((r, i) => {
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
  await projectSearch(v1, address, credentials, text);
  await workspaceSearch(v1, address, credentials, text);
}

main().catch((error) => {
  // grpc-js errors carry the status code and the server's message.
  console.error(`error: ${error.code !== undefined ? `code ${error.code}: ` : ""}${error.details || error.message}`);
  process.exit(1);
});
