// The typed client as a TypeScript program uses it: `tsc -p test/types`
// (part of npm test) must pass, each @ts-expect-error marking a mistake the
// types catch.
import { connect } from "@warrenipc/client";
import { createClient } from "@warrenipc/client/protobuf";
import { create } from "@bufbuild/protobuf";
import { Counter, type Entry, type ListReply } from "../../gen/counter_pb.js";
import { Everything, AllSchema, Kind, type All, type AllList } from "../../gen/warren/test/v1/everything_pb.js";

export async function counter(): Promise<void> {
  const c = await connect("default");
  const counter = createClient(Counter, c);
  const e: Entry = await counter.set({ name: "a", value: 1n }, { timeoutMs: 1000, metadata: { k: "v" } });
  const v: bigint = e.value;
  const l: ListReply = await counter.list({});
  for await (const w of counter.watch({ name: "a" })) {
    const n: bigint = w.value;
    console.log(n);
  }
  // @ts-expect-error int64 fields are bigint, not number
  await counter.set({ name: "a", value: 1 });
  // @ts-expect-error no such field
  await counter.get({ nam: "a" });
  // @ts-expect-error no such method
  await counter.delete({ name: "a" });
  // @ts-expect-error the codec is protobuf binary: not an option
  await counter.get({ name: "a" }, { codec: undefined as never });
  // @ts-expect-error a server stream is not a promise of a reply
  const wrong: Entry = await counter.watch({ name: "a" });
  console.log(v, l, wrong);
}

export async function everything(): Promise<void> {
  const c = await connect("default");
  const ev = createClient(Everything, c);
  const all: All = await ev.echo(create(AllSchema, { int64s: -1n, kind: Kind.MINUS, choice: { case: "choiceString", value: "x" } }));
  for await (const m of ev.repeat({ message: all, count: 2 })) console.log(m.int32s);
  const cs = ev.collect();
  await cs.send({ strings: "a" });
  const list: AllList = await cs.closeAndReceive();
  const bidi = ev.mirror();
  await bidi.send(all);
  const back: All | undefined = await bidi.receive();
  await bidi.closeSend();
  // @ts-expect-error a client stream takes no request
  ev.collect({ strings: "a" });
  // @ts-expect-error messages of another type are refused
  await bidi.send({ counters: [] });
  console.log(list, back);
}
