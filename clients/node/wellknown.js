// google.protobuf.Struct / Value and Timestamp in the object shapes @grpc/proto-loader uses
// (options keepCase: false, longs: String, enums: String, oneofs: true), both ways.
//
// proto-loader does not apply the proto3 JSON mapping to well-known types: a Struct is
// `{fields: {key: Value}}`, a Value is one of `{nullValue}`, `{numberValue}`, `{stringValue}`,
// `{boolValue}`, `{structValue}`, `{listValue: {values}}`, and a Timestamp is
// `{seconds, nanos}`. A plain object given for a Struct has no `fields` and encodes as an
// empty Struct; an RFC 3339 string given for a Timestamp fails to serialize.
"use strict";

const RFC3339 =
  /^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$/;
// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the range a Timestamp may hold.
const MIN_SECONDS = -62135596800;
const MAX_SECONDS = 253402300799;

function daysInMonth(year, month) {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

// Date.parse rolls 2024-02-30 over to March 1; RFC 3339 refuses it.
function validFields(date, time, offset) {
  const [year, month, day] = date.split("-").map(Number);
  const [hour, minute, second] = time.split(":").map(Number);
  const [offsetHour, offsetMinute] = /^[Zz]$/.test(offset) ? [0, 0] : offset.slice(1).split(":").map(Number);
  return (
    month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month) &&
    hour <= 23 && minute <= 59 && second <= 59 && offsetHour <= 23 && offsetMinute <= 59
  );
}

function isPlainObject(value) {
  if (value === null || typeof value !== "object") return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** A Value for a JSON-compatible JS value; throws TypeError for anything JSON cannot hold. */
function toValue(value, where = "value") {
  if (value === null) return { nullValue: "NULL_VALUE" };
  switch (typeof value) {
    case "string":
      return { stringValue: value };
    case "boolean":
      return { boolValue: value };
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`${where}: ${value} has no JSON form`);
      return { numberValue: value };
    default:
      break;
  }
  if (Array.isArray(value)) {
    return { listValue: { values: value.map((item, i) => toValue(item, `${where}[${i}]`)) } };
  }
  if (isPlainObject(value)) return { structValue: toStruct(value, where) };
  throw new TypeError(`${where}: a ${typeof value} is not a JSON value`);
}

/** A Struct for a plain JS object (keys in insertion order). */
function toStruct(object, where = "struct") {
  if (!isPlainObject(object)) throw new TypeError(`${where}: expected a plain object`);
  const fields = {};
  for (const [key, value] of Object.entries(object)) {
    fields[key] = toValue(value, `${where}.${key}`);
  }
  return { fields };
}

/** The JS value of a Value as read by proto-loader (`kind` names the set member). */
function fromValue(value) {
  // With `oneofs: true` proto-loader names the member in `kind`; without it, find the member
  // that is present (with `defaults: true` the others may hold their zero values too).
  const kind =
    value.kind ||
    ["structValue", "listValue", "stringValue", "numberValue", "boolValue", "nullValue"].find(
      (name) => value[name] !== undefined && value[name] !== null,
    );
  switch (kind) {
    case "nullValue":
    case undefined:
      return null;
    case "numberValue":
      return value.numberValue;
    case "stringValue":
      return value.stringValue;
    case "boolValue":
      return value.boolValue;
    case "structValue":
      return fromStruct(value.structValue);
    case "listValue":
      return (value.listValue.values || []).map(fromValue);
    default:
      throw new TypeError(`unknown google.protobuf.Value member ${kind}`);
  }
}

/** The plain JS object of a Struct as read by proto-loader; {} for an unset Struct. */
function fromStruct(struct) {
  const object = {};
  for (const [key, value] of Object.entries((struct && struct.fields) || {})) {
    object[key] = fromValue(value);
  }
  return object;
}

/** A Timestamp `{seconds, nanos}` from a Date or an RFC 3339 string (nanoseconds kept). */
function toTimestamp(input) {
  let seconds;
  let nanos;
  if (input instanceof Date) {
    const millis = input.getTime();
    if (Number.isNaN(millis)) throw new TypeError("timestamp: invalid Date");
    seconds = Math.floor(millis / 1000);
    nanos = (millis - seconds * 1000) * 1e6;
  } else if (typeof input === "string") {
    const match = RFC3339.exec(input);
    // Date.parse alone would accept many non-RFC 3339 forms and drop digits past milliseconds.
    const whole =
      match && validFields(match[1], match[2], match[4])
        ? Date.parse(`${match[1]}T${match[2]}${match[4].toUpperCase()}`)
        : NaN;
    if (Number.isNaN(whole)) throw new TypeError(`timestamp: not RFC 3339: ${JSON.stringify(input)}`);
    seconds = whole / 1000;
    nanos = match[3] ? Number(match[3].padEnd(9, "0")) : 0;
  } else {
    throw new TypeError("timestamp: expected a Date or an RFC 3339 string");
  }
  if (seconds < MIN_SECONDS || seconds > MAX_SECONDS) {
    throw new RangeError("timestamp: outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z");
  }
  return { seconds: String(seconds), nanos };
}

/** The RFC 3339 text (UTC, 0/3/6/9 fraction digits as in the JSON mapping) of a Timestamp. */
function fromTimestamp(timestamp) {
  const seconds = Number(timestamp.seconds); // a string with longs: String; exact in a double
  const nanos = timestamp.nanos || 0;
  const base = new Date(seconds * 1000).toISOString().slice(0, 19);
  if (nanos === 0) return `${base}Z`;
  const digits = String(nanos).padStart(9, "0");
  const fraction = nanos % 1e6 === 0 ? digits.slice(0, 3) : nanos % 1e3 === 0 ? digits.slice(0, 6) : digits;
  return `${base}.${fraction}Z`;
}

/** The Date of a Timestamp (sub-millisecond digits are lost: a Date holds milliseconds). */
function timestampToDate(timestamp) {
  return new Date(Number(timestamp.seconds) * 1000 + Math.floor((timestamp.nanos || 0) / 1e6));
}

module.exports = { toValue, toStruct, fromValue, fromStruct, toTimestamp, fromTimestamp, timestampToDate };
