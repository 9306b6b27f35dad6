// The settings panel's field parsing (js/src/settings_panel.js): what a typed value becomes, and
// what the browser refuses to send. Run with `node --test` (make check).
//
// settings-schema.json is the `settings_schema` trait a kernel sends (panel_schema() in
// nbstream/widgets/settings_panel.py); tests/test_protocol.py fails when it is out of date.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { FIELDS, fieldSpecs, formatField, parseField, sentValue } from "../src/settings_panel.js";

const SCHEMA = JSON.parse(readFileSync(new URL("./settings-schema.json", import.meta.url), "utf8"));
const SPECS = fieldSpecs(SCHEMA);

/** @param {string} name */
function field(name) {
  const spec = SPECS.find((f) => f.name === name);
  assert.ok(spec, `no field ${name}`);
  return spec;
}

test("every field the panel knows gets its kind, hint and range from the schema", () => {
  assert.deepEqual(
    SPECS.map((f) => f.name),
    FIELDS.map((f) => f.name),
  );
  assert.deepEqual(
    SPECS.map((f) => [f.name, f.kind, f.hint ?? null]),
    [
      ["max_new_tokens", "int", "> 0"],
      ["temperature", "float", ">= 0; 0 is greedy"],
      ["top_p", "float", "0 < p <= 1"],
      ["top_k", "int", ">= 0; 0 disables"],
      ["repetition_penalty", "float", "> 0; 1 is none"],
      ["do_sample", "bool", null],
      ["seed", "int", ">= 0; reproducible sampling"],
      ["alternatives", "int", "0\u2013100; top candidates per token"],
      ["stop_sequences", "lines", "one per line; \\n is a newline"],
    ],
  );
});

test("a setting the kernel does not describe is not shown; without a schema, none is", () => {
  const { top_k: _dropped, ...rest } = SCHEMA;
  assert.ok(!fieldSpecs(rest).some((f) => f.name === "top_k"));
  assert.equal(fieldSpecs(rest).length, FIELDS.length - 1);
  assert.deepEqual(fieldSpecs(undefined), []);
  assert.deepEqual(fieldSpecs({ top_k: { type: "complex" } }), []);
});

test("a range comes from the schema, with the kernel's message", () => {
  const narrow = { ...SCHEMA.top_k, max: 7, messages: { above: "top_k too big: {value}" } };
  const [k] = fieldSpecs({ top_k: narrow });
  assert.deepEqual(parseField(k, "7"), { value: 7 });
  assert.deepEqual(parseField(k, "8"), { error: "top_k too big: 8" });
  const [bare] = fieldSpecs({ top_k: { ...narrow, messages: {} } });
  assert.deepEqual(parseField(bare, "8"), { error: "top_k is out of range, got 8" });
});

test("an empty field is unset (null): the model's default applies", () => {
  for (const spec of SPECS) assert.deepEqual(parseField(spec, ""), { value: null }, spec.name);
  assert.deepEqual(parseField(field("top_k"), "   "), { value: null });
});

test("whole numbers", () => {
  const k = field("top_k");
  assert.deepEqual(parseField(k, "40"), { value: 40 });
  assert.deepEqual(parseField(k, " +7 "), { value: 7 });
  assert.deepEqual(parseField(k, "0"), { value: 0 });
  // Worded as the kernel words it (validate_settings), the text quoted as Python does.
  assert.equal(parseField(k, "1.5").error, "top_k must be an int, got '1.5'");
  assert.match(parseField(k, "1e3").error, /must be an int/);
  assert.match(parseField(k, "-1").error, /top_k must be >= 0, got -1/);
  // Past 2**53 - 1 (a seed up to 2**64 - 1): exact, as its digits (the kernel reads them).
  assert.deepEqual(parseField(field("seed"), "9007199254740993"), { value: "9007199254740993" });
  assert.deepEqual(parseField(field("seed"), "+18446744073709551615"), { value: "18446744073709551615" });
  assert.match(parseField(field("seed"), "18446744073709551617").error, /seed must be at most 2\*\*64 - 1/);
  assert.match(parseField(field("max_new_tokens"), "9007199254740993").error, /is absurd/);
});

test("numbers", () => {
  const t = field("temperature");
  assert.deepEqual(parseField(t, "0.7"), { value: 0.7 });
  assert.deepEqual(parseField(t, ".5"), { value: 0.5 });
  assert.deepEqual(parseField(t, "1e-1"), { value: 0.1 });
  assert.deepEqual(parseField(t, "0"), { value: 0 });
  assert.equal(parseField(t, "abc").error, "temperature must be a number, got 'abc'");
  assert.equal(parseField(t, "it's").error, `temperature must be a number, got "it's"`);
  assert.match(parseField(t, "0x10").error, /must be a number/);
  assert.match(parseField(t, "Infinity").error, /must be a number/);
  assert.match(parseField(t, "1e400").error, /temperature must be a finite number, got 1e400/);
  assert.match(parseField(t, "-0.1").error, /temperature must be >= 0/);
});

test("the ranges of nbstream/settings.py (as the schema says)", () => {
  const cases = [
    ["max_new_tokens", "1", true],
    ["max_new_tokens", "0", false],
    ["max_new_tokens", "1000000", true],
    ["max_new_tokens", "1000001", false],
    ["top_p", "1", true],
    ["top_p", "0.01", true],
    ["top_p", "0", false],
    ["top_p", "1.01", false],
    ["repetition_penalty", "1", true],
    ["repetition_penalty", "0", false],
    ["alternatives", "0", true],
    ["alternatives", "100", true],
    ["alternatives", "101", false],
    ["seed", "0", true],
    ["seed", "-3", false],
  ];
  for (const [name, text, ok] of cases) {
    const parsed = parseField(field(name), text);
    assert.equal("value" in parsed, ok, `${name}=${text}: ${JSON.stringify(parsed)}`);
  }
  assert.match(parseField(field("max_new_tokens"), "1000001").error, /use at most 1,000,000/);
  assert.equal(parseField(field("top_p"), "1.5").error, "top_p must be in (0, 1], got 1.5");
  assert.equal(
    parseField(field("alternatives"), "101").error,
    "alternatives must be between 0 (off) and 100, got 101",
  );
});

test("the sampling switch: model default, on, off", () => {
  const b = field("do_sample");
  assert.deepEqual(parseField(b, ""), { value: null });
  assert.deepEqual(parseField(b, "true"), { value: true });
  assert.deepEqual(parseField(b, "false"), { value: false });
  assert.equal(formatField(b, true), "true");
  assert.equal(formatField(b, null), "");
});

test("stop sequences: one per line, escapes for newline, tab and backslash, no duplicates", () => {
  const s = field("stop_sequences");
  assert.deepEqual(parseField(s, "END\n\n###\nEND"), { value: ["END", "###"] });
  assert.deepEqual(parseField(s, "a\\nb\r\n\\t\\\\x\\q"), { value: ["a\nb", "\t\\x\\q"] });
  assert.deepEqual(parseField(s, "\n\n"), { value: null });
  // What the field shows parses back to the same list.
  const stops = ["\n\n", "User:", "tab\there", "back\\slash", "\\n literally"];
  assert.deepEqual(parseField(s, formatField(s, stops)), { value: stops });
});

test("a free text field (the chat's system prompt) is taken as typed", () => {
  const system = { name: "system", label: "System prompt", kind: /** @type {const} */ ("text") };
  assert.deepEqual(parseField(system, "  Be brief.\n"), { value: "  Be brief.\n" });
  assert.deepEqual(parseField(system, ""), { value: null });
});

test("what a field sends: a refused value too, so the kernel holds what the field shows", () => {
  const t = field("temperature");
  const k = field("top_k");
  assert.equal(sentValue(t, "0.7"), 0.7);
  assert.equal(sentValue(t, ""), null);
  // Out of range: the number (the kernel reports it).
  assert.equal(sentValue(t, "-1"), -1);
  assert.equal(sentValue(field("top_p"), " 1.5 "), 1.5);
  assert.equal(sentValue(field("max_new_tokens"), "0"), 0);
  // Not a number of the field's kind: the text.
  assert.equal(sentValue(t, " warm "), "warm");
  assert.equal(sentValue(k, "1.5"), "1.5");
  assert.equal(sentValue(k, "1e3"), "1e3");
  // A number JSON cannot carry exactly: the text.
  assert.equal(sentValue(t, "1e400"), "1e400");
  assert.equal(sentValue(field("seed"), "9007199254740993"), "9007199254740993");
  // Valid values are sent as parsed.
  assert.equal(sentValue(k, "+7"), 7);
  assert.deepEqual(sentValue(field("stop_sequences"), "END\nEND"), ["END"]);
  assert.equal(sentValue(field("do_sample"), "false"), false);
});
