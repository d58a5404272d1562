// Protocol Buffers for warren calls, with the user's @bufbuild/protobuf
// (version 2) schemas: an optional peer dependency, imported only here.
//
// Typed clients from the service descriptors protoc-gen-es generates:
//
//   import { createClient } from "@warrenipc/client/protobuf";
//   import { Counter } from "./gen/counter_pb.js";
//   const counter = createClient(Counter, await connect("default"));
//   const entry = await counter.get({ name: "a" }); // an Entry; entry.value is a bigint
//
// Or one call at a time, with a codec:
//
//   const reply = await client.call("Pkg.Method", create(ReqSchema, {...}),
//     { codec: protobuf(ReqSchema, ReplySchema) });

import {
  create,
  fromBinary,
  isMessage,
  toBinary,
  type DescMessage,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import type { BidiStream, CallOptions, Client, ClientStream, Codec, ServerStream } from "./client.js";

/** A codec (id 2) that encodes In messages and decodes Out messages. */
export function protobuf<In extends DescMessage, Out extends DescMessage>(input: In, output: Out): Codec<MessageShape<In>, MessageShape<Out>> {
  return {
    id: 2,
    name: "proto",
    encode: (msg) => toBinary(input, msg),
    decode: (b) => fromBinary(output, b),
  };
}

/** The options of a typed call: those of Client.call but the codec, which is protobuf binary. */
export type TypedCallOptions = Omit<CallOptions, "codec">;

/** A method of a typed client, by the kind of the RPC it calls. */
export type TypedMethod<M> = M extends { methodKind: "unary"; input: infer I extends DescMessage; output: infer O extends DescMessage }
  ? (request: MessageInitShape<I>, opts?: TypedCallOptions) => Promise<MessageShape<O>>
  : M extends { methodKind: "server_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
    ? (request: MessageInitShape<I>, opts?: TypedCallOptions) => ServerStream<MessageShape<O>>
    : M extends { methodKind: "client_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
      ? (opts?: TypedCallOptions) => ClientStream<MessageInitShape<I>, MessageShape<O>>
      : M extends { methodKind: "bidi_streaming"; input: infer I extends DescMessage; output: infer O extends DescMessage }
        ? (opts?: TypedCallOptions) => BidiStream<MessageInitShape<I>, MessageShape<O>>
        : never;

/**
 * The client of a service: one method per RPC, named as protoc-gen-es
 * names them (lower camel case). Unary methods resolve with the reply;
 * server streams are async iterables; client and bidirectional streams
 * send requests (messages or their init objects) and receive replies.
 */
export type TypedClient<S extends DescService> = {
  [K in keyof S["method"]]: TypedMethod<S["method"][K]>;
};

/** A codec (id 2) that also takes init objects: create(input, init) before encoding. */
function messageCodec<I extends DescMessage, O extends DescMessage>(input: I, output: O): Codec<MessageInitShape<I>, MessageShape<O>> {
  return {
    id: 2,
    name: "proto",
    encode: (msg) => toBinary(input, isMessage(msg, input) ? msg : create(input, msg)),
    decode: (b) => fromBinary(output, b),
  };
}

/**
 * A typed client of a service described by protoc-gen-es (v2) output, over
 * a connected Client. Messages travel as protobuf binary (codec 2); each
 * method calls "package.Service.Method", the name a Go server gives a
 * method registered with its schema (rpc.WithSchema).
 */
export function createClient<S extends DescService>(service: S, client: Client): TypedClient<S> {
  const out: Record<string, unknown> = {};
  for (const m of service.methods) {
    const name = `${service.typeName}.${m.name}`;
    const codec = messageCodec(m.input, m.output) as Codec<unknown, unknown>;
    const plain: CallOptions = { codec };
    const options = (opts?: TypedCallOptions): CallOptions => (opts ? { ...opts, codec } : plain);
    switch (m.methodKind) {
      case "unary":
        out[m.localName] = (req: unknown, opts?: TypedCallOptions) => client.call(name, req, options(opts));
        break;
      case "server_streaming":
        out[m.localName] = (req: unknown, opts?: TypedCallOptions) => client.stream(name, req, options(opts));
        break;
      case "client_streaming":
        out[m.localName] = (opts?: TypedCallOptions) => client.clientStream(name, options(opts));
        break;
      case "bidi_streaming":
        out[m.localName] = (opts?: TypedCallOptions) => client.bidiStream(name, options(opts));
        break;
    }
  }
  return out as TypedClient<S>;
}
