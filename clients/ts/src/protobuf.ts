// Protocol Buffers for warren calls, with the user's @bufbuild/protobuf
// (version 2) schemas: an optional peer dependency, imported only here.
//
//   import { protobuf } from "@warrenipc/client/protobuf";
//   const reply = await client.call("Pkg.Method", create(ReqSchema, {...}),
//     { codec: protobuf(ReqSchema, ReplySchema) });

import { fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Codec } from "./client.js";

/** A codec (id 2) that encodes In messages and decodes Out messages. */
export function protobuf<In extends DescMessage, Out extends DescMessage>(input: In, output: Out): Codec<MessageShape<In>, MessageShape<Out>> {
  return {
    id: 2,
    name: "proto",
    encode: (msg) => toBinary(input, msg),
    decode: (b) => fromBinary(output, b),
  };
}
