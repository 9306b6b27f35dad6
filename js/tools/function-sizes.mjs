// Lists the functions of the front end's sources with their length in lines (from the line
// of `function`/the method's name/the arrow's parameters to the closing brace, comments and
// blank lines included), longest first. The parsing is Biome's (its
// noExcessiveLinesPerFunction rule, run with a limit of one line): TypeScript 7's `tsc` has
// no JavaScript API, and Biome already parses js/src for the lint.
//
// Usage (from js/): node tools/function-sizes.mjs [--max N] [FILE...]   (default: src/*.js)
//   --max N: list only the functions longer than N lines, and exit 1 if there is one.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const js = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const at = args.indexOf("--max");
const max = at >= 0 ? Number(args.splice(at, 2)[1]) : null;
if (max !== null && !Number.isInteger(max)) throw new Error("--max takes a whole number of lines");
const files = args.length
  ? args.map((f) => resolve(f))
  : readdirSync(join(js, "src"))
      .filter((f) => f.endsWith(".js"))
      .map((f) => join(js, "src", f));

// A configuration of that one rule only (the project's biome.json enables the preset).
const dir = mkdtempSync(join(tmpdir(), "function-sizes-"));
const config = {
  files: { includes: ["**/*.js", "**/*.mjs"] },
  formatter: { enabled: false },
  assist: { enabled: false },
  linter: {
    enabled: true,
    rules: {
      preset: "none",
      complexity: { noExcessiveLinesPerFunction: { level: "error", options: { maxLines: 1 } } },
    },
  },
};
writeFileSync(join(dir, "biome.json"), JSON.stringify(config));
let out;
try {
  const biome = join(js, "node_modules", ".bin", "biome");
  const argv = ["lint", `--config-path=${dir}`, "--reporter=json", "--max-diagnostics=none", ...files];
  try {
    out = execFileSync(biome, argv, { cwd: js, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  } catch (err) {
    out = /** @type {{stdout: string}} */ (err).stdout; // exit 1: the rule fired, as it should
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const RULE = "lint/complexity/noExcessiveLinesPerFunction";
const sources = new Map();
/** A function's name, read from the source where it starts (`name(`, `name =`, `function name`). */
function nameAt(path, line, column) {
  if (!sources.has(path)) sources.set(path, readFileSync(path, "utf8").split("\n"));
  const text = sources.get(path)[line - 1] ?? "";
  const head = text.slice(0, column - 1);
  const from = text.slice(column - 1);
  const named =
    /^(?:async\s+)?function\s*\*?\s*([\w$]+)/.exec(from) ??
    /^(?:static\s+|async\s+|get\s+|set\s+)*(#?[\w$]+)\s*\(/.exec(from) ??
    /([\w$.]+)\s*[=:]\s*(?:async\s+)?(?:function\b.*)?$/.exec(head);
  if (named) return named[1];
  const call = /([\w$.]+)\(([^()]*)$/.exec(head); // a callback: the call it is passed to
  return call ? `${call[1]}(${call[2].trim()} …)` : "(anonymous)";
}

const rows = JSON.parse(out)
  .diagnostics.filter((d) => d.category === RULE)
  .map(({ location: { path, start, end } }) => {
    const file = resolve(js, path); // Biome says a path under js/ relative to it
    const shown = file.startsWith(js + sep) ? relative(js, file) : file;
    return { lines: end.line - start.line + 1, where: `${shown}:${start.line}`, name: nameAt(file, start.line, start.column) };
  })
  .filter((r) => max === null || r.lines > max)
  .sort((a, b) => b.lines - a.lines || a.where.localeCompare(b.where, "en", { numeric: true }));
for (const r of rows) console.log(`${String(r.lines).padStart(4)} ${r.where} ${r.name}`);
if (max !== null) {
  console.log(rows.length ? `${rows.length} over ${max} lines` : `none over ${max} lines`);
  process.exitCode = rows.length ? 1 : 0;
}
