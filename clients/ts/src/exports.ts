// What both builds export besides connect.
export { Client, json, raw } from "./client.js";
export type { BidiStream, CallOptions, ClientStream, Codec, ConnectOptions, MetadataInit, ServerStream } from "./client.js";
export { StatusError, CODES } from "./status.js";
export type { Code } from "./status.js";
export { parseJSON, stringifyJSON } from "./json.js";
export type { Metadata, Settings } from "./wire.js";
export type { SessionOptions } from "./session.js";
