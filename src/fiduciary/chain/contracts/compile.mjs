// Compiles the contracts of this folder with solc-js (the version package-lock.json pins),
// resolving @openzeppelin imports from node_modules, into ../artifacts/NAME.json (abi and
// bytecode). Run from the repository root: node src/fiduciary/chain/contracts/compile.mjs
// (an optional argument: another output folder, for the test that checks they are current).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../../..");
const require = createRequire(path.join(root, "package.json"));
const solc = require("solc");

const sources = {};
for (const name of fs.readdirSync(here).filter((f) => f.endsWith(".sol")).sort()) {
  sources[name] = { content: fs.readFileSync(path.join(here, name), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
function findImports(file) {
  const candidate = path.join(root, "node_modules", file);
  if (fs.existsSync(candidate)) return { contents: fs.readFileSync(candidate, "utf8") };
  return { error: `not found: ${file}` };
}
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
if (errors.length) {
  for (const e of errors) console.error(e.formattedMessage);
  process.exit(1);
}
const out = process.argv[2] ? path.resolve(process.argv[2]) : path.join(here, "..", "artifacts");
fs.mkdirSync(out, { recursive: true });
for (const file of Object.keys(sources)) {
  for (const [name, contract] of Object.entries(output.contracts[file])) {
    const artifact = {
      contractName: name,
      compiler: `solc-js ${solc.version()}`,
      abi: contract.abi,
      bytecode: "0x" + contract.evm.bytecode.object,
    };
    fs.writeFileSync(path.join(out, `${name}.json`), JSON.stringify(artifact, null, 1) + "\n");
    console.log(`${name}: ${contract.evm.bytecode.object.length / 2} bytes`);
  }
}
