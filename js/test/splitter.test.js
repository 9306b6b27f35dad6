// The incremental block splitter (js/src/block_splitter.js): where a growing Markdown text has
// block boundaries that later text can no longer move. Run with `node --test` (make check).
import assert from "node:assert/strict";
import { test } from "node:test";

import { BlockSplitter } from "../src/block_splitter.js";

/** Boundaries found when `text` arrives in one piece. */
function whole(text) {
  return new BlockSplitter().advance(text);
}

/** Boundaries found when `text` arrives in the given pieces (each call sees all so far). */
function streamed(pieces) {
  const s = new BlockSplitter();
  const out = [];
  let text = "";
  for (const p of pieces) {
    text += p;
    out.push(...s.advance(text));
  }
  return out;
}

test("a blank line ends a block once the next line starts unindented", () => {
  assert.deepEqual(whole("one\n\ntwo"), [[4, 5]]);
  assert.deepEqual(whole("one\n\n\n\ntwo\n"), [[4, 7]]);
  // The next line has not started: nothing is settled yet.
  assert.deepEqual(whole("one\n\n"), []);
});

test("an indented line after a blank line continues the block (a list item, indented code)", () => {
  assert.deepEqual(whole("- item\n\n  more of it\n"), []);
  assert.deepEqual(whole("- item\n\n\tmore of it\n"), []);
  assert.deepEqual(whole("    code\n\n    more code\n"), []);
});

test("an unfinished line decides a pending boundary by its first character", () => {
  const s = new BlockSplitter();
  assert.deepEqual(s.advance("a\n\n"), []);
  assert.deepEqual(s.advance("a\n\n "), []); // may still be an indented continuation
  const t = new BlockSplitter();
  assert.deepEqual(t.advance("a\n\n"), []);
  assert.deepEqual(t.advance("a\n\nb"), [[2, 3]]);
  assert.deepEqual(t.advance("a\n\nbc\n"), []); // reported once
});

test("blank lines inside a fenced code block are no boundary; its closing line at column 0 is", () => {
  const text = "```py\nx = 1\n\ny = 2\n```\nafter\n";
  assert.deepEqual(whole(text), [[text.indexOf("after"), text.indexOf("after")]]);
  // A tilde fence closes only with tildes, at least as many as opened it.
  const tilde = "~~~~\na\n\n```\n~~~\nstill code\n~~~~\n";
  assert.deepEqual(whole(tilde), [[tilde.length, tilde.length]]);
});

test("an indented fence (in a list item) closes without a boundary", () => {
  assert.deepEqual(whole("- x\n  ```\n  code\n\n  ```\n"), []);
});

test("a backtick run with a backtick in its info string is inline code, not a fence", () => {
  const text = "```a`b```\n\nnext";
  assert.deepEqual(whole(text), [[text.indexOf("\n") + 1, text.indexOf("next")]]);
});

test("CRLF line ends split like LF", () => {
  assert.deepEqual(whole("one\r\n\r\ntwo"), [[5, 7]]);
  assert.deepEqual(whole("```\r\nx\r\n\r\n```\r\nnext"), [[15, 15]]);
});

test("reset() forgets the text scanned so far", () => {
  const s = new BlockSplitter();
  assert.deepEqual(s.advance("```\nopen fence\n\n"), []);
  s.reset();
  assert.deepEqual(s.advance("a\n\nb"), [[2, 3]]);
});

test("any way of streaming a text finds the boundaries of the whole text", () => {
  const docs = [
    "# Title\n\nSome *text* here.\n\n- one\n- two\n\n  nested\n\nend\n",
    "```js\nlet a = 1;\n\nlet b = 2;\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nlast",
    "para\r\n\r\n    code\r\n\r\n    more\r\n\r\nnext\r\n",
    "~~~\n```\n\n~~~\n\n> quote\n\n\ttab\n\nx",
  ];
  for (const doc of docs) {
    const expected = whole(doc);
    // Every split into two pieces, and one character at a time.
    for (let i = 0; i <= doc.length; i++) {
      assert.deepEqual(streamed([doc.slice(0, i), doc.slice(i)]), expected, `split at ${i} of ${JSON.stringify(doc)}`);
    }
    assert.deepEqual(streamed([...doc]), expected, `per character: ${JSON.stringify(doc)}`);
  }
});
