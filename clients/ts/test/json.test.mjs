import { test } from "node:test";
import assert from "node:assert/strict";
import { parseJSON, stringifyJSON } from "../dist/json.js";

test("integers within 2^53 stay numbers, beyond become bigint", () => {
  assert.deepEqual(parseJSON('{"a":9007199254740991,"b":9007199254740993,"c":-9223372036854775808,"d":18446744073709551615,"e":1.5e300,"f":"12345678901234567890"}'), {
    a: 9007199254740991,
    b: 9007199254740993n,
    c: -9223372036854775808n,
    d: 18446744073709551615n,
    e: 1.5e300,
    f: "12345678901234567890",
  });
  assert.deepEqual(parseJSON('[1,{"x":[true,false,null,"a\\"b\\\\",12345678901234567]}]'), [1, { x: [true, false, null, 'a"b\\', 12345678901234567n] }]);
});

test("bigint values serialize as JSON integers", () => {
  assert.equal(stringifyJSON({ v: 9007199254740993n, n: [1n, -2n], s: "9n" }), '{"v":9007199254740993,"n":[1,-2],"s":"9n"}');
  assert.equal(stringifyJSON({ a: 1 }), '{"a":1}');
  assert.equal(stringifyJSON(undefined), "null");
});

test("malformed JSON is a SyntaxError", () => {
  for (const bad of ['{"a":12345678901234567', '{"a" 12345678901234567}', "[12345678901234567,]", "12345678901234567 x"]) {
    assert.throws(() => parseJSON(bad), SyntaxError, bad);
  }
});
