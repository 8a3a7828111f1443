// node --test: the Struct / Value / Timestamp helpers, through the real encoder (proto-loader).
"use strict";

const assert = require("node:assert/strict");
const path = require("node:path");
const test = require("node:test");
const protoLoader = require("@grpc/proto-loader");
const w = require("./wellknown");

const definition = protoLoader.loadSync(["search/v1/index.proto"], {
  includeDirs: [path.resolve(__dirname, "..", "..", "protos")],
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const upsert = definition["search.v1.IndexService"].UpsertDocuments;

// The first document of an UpsertDocumentsRequest after a trip through the wire format.
function overTheWire(document) {
  const bytes = upsert.requestSerialize({ projectId: "1", documents: [document] });
  return upsert.requestDeserialize(bytes).documents[0];
}

test("a plain object given as a Struct is lost; toStruct keeps it", () => {
  const metadata = { team: "platform", n: -1.5, ok: false, none: null, list: [1, "a", [], {}], deep: { a: { b: {} } } };
  assert.deepEqual(overTheWire({ kind: "n", rowId: "r", metadata }).metadata.fields, {});
  const back = overTheWire({ kind: "n", rowId: "r", metadata: w.toStruct(metadata) }).metadata;
  assert.deepEqual(w.fromStruct(back), metadata);
});

test("fromStruct reads an unset Struct as {}", () => {
  assert.deepEqual(w.fromStruct(null), {});
  assert.deepEqual(w.fromStruct(overTheWire({ kind: "n", rowId: "r" }).metadata), {});
});

test("toValue refuses what JSON cannot hold", () => {
  for (const bad of [undefined, NaN, Infinity, 1n, new Date(0), () => 1, Symbol("s")]) {
    assert.throws(() => w.toValue(bad), TypeError);
  }
  assert.throws(() => w.toStruct({ a: [1, undefined] }), /struct\.a\[1\]/);
});

test("RFC 3339 strings keep every fraction digit and honour offsets", () => {
  assert.deepEqual(w.toTimestamp("2024-05-01T09:30:00.123456789Z"), { seconds: "1714555800", nanos: 123456789 });
  assert.deepEqual(w.toTimestamp("2024-05-01T11:30:00.5+02:00"), { seconds: "1714555800", nanos: 500000000 });
  assert.deepEqual(w.toTimestamp("1969-12-31T23:59:59.25Z"), { seconds: "-1", nanos: 250000000 });
  assert.deepEqual(w.toTimestamp("0001-01-01T00:00:00Z"), { seconds: "-62135596800", nanos: 0 });
  assert.deepEqual(w.toTimestamp("9999-12-31T23:59:59.999999999Z"), { seconds: "253402300799", nanos: 999999999 });
});

test("what is not RFC 3339, or out of a Timestamp's range, is refused", () => {
  for (const bad of ["2024-05-01", "2024-05-01T00:00:00", "2024-05-01 00:00:00Z", "2024-02-30T00:00:00Z",
    "2023-02-29T00:00:00Z", "2024-05-01T24:00:00Z", "2024-05-01T00:00:60Z", "2024-05-01T00:00:00.Z",
    "2024-05-01T00:00:00.1234567890Z", "May 1, 2024"]) {
    assert.throws(() => w.toTimestamp(bad), TypeError, bad);
  }
  assert.throws(() => w.toTimestamp("0001-01-01T00:00:00+01:00"), RangeError);
  assert.throws(() => w.toTimestamp(new Date(NaN)), TypeError);
});

test("Dates convert with their milliseconds, before 1970 too", () => {
  assert.deepEqual(w.toTimestamp(new Date("2024-06-02T17:45:10.500Z")), { seconds: "1717350310", nanos: 500000000 });
  assert.deepEqual(w.toTimestamp(new Date(-1)), { seconds: "-1", nanos: 999000000 });
});

test("a Timestamp reads back as RFC 3339 with 0, 3, 6 or 9 fraction digits", () => {
  for (const text of ["2024-05-01T09:30:00Z", "2024-05-01T09:30:00.120Z", "2024-05-01T09:30:00.123456Z",
    "2024-05-01T09:30:00.000000001Z", "1969-12-31T23:59:59.250Z"]) {
    const sent = { kind: "n", rowId: "r", createTime: w.toTimestamp(text) };
    assert.equal(w.fromTimestamp(overTheWire(sent).createTime), text);
  }
  assert.deepEqual(w.timestampToDate({ seconds: "-1", nanos: 999000000 }), new Date(-1));
});
