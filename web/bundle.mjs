#!/usr/bin/env node
// Builds the shipped TypeScript package from tsc's output (build/ts/, one module per file of web/src):
//   dist/index.js    esbuild bundles the modules into one ES module; the Emscripten glue ./mha.js and
//                    ./version.js stay separate files, imported by relative path;
//   dist/index.d.ts  the public declarations rolled up into one file: each name index.ts re-exports, copied
//                    with its TSDoc from the module that declares it, then checked to compile on its own.
// One file each because the package ships exactly these (tests/consumers checks the tarball's list), and
// because the asset URLs in web/src (`new URL('./mha.wasm', import.meta.url)`) are relative to dist/index.js.
// Run by scripts/build.sh after `tsc -p web/tsconfig.json`; files are only rewritten when they change.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import esbuild from 'esbuild';
import ts from 'typescript';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const emitted = path.join(repoRoot, 'build/ts');
const dist = path.join(repoRoot, 'dist');
/** Files next to dist/index.js that the bundle imports instead of inlining. */
const SEPARATE = ['mha.js', 'version.js'];

function writeIfChanged(file, text) {
  if (fs.existsSync(file) && fs.readFileSync(file, 'utf8') === text) return;
  fs.writeFileSync(file, text);
}

async function bundleJs() {
  const keepSeparate = {
    name: 'keep-separate',
    setup(build) {
      // An import of mha.js or version.js from any module of web/src is the file next to dist/index.js.
      build.onResolve({ filter: /(^|\/)(mha|version)\.js$/ }, (args) => {
        const file = path.basename(args.path);
        if (path.resolve(args.resolveDir, args.path) !== path.join(emitted, file)) {
          throw new Error(`${args.importer} imports ${args.path}, which is not web/src/${file}`);
        }
        return { path: `./${file}`, external: true };
      });
    },
  };
  const result = await esbuild.build({
    entryPoints: [path.join(emitted, 'index.js')],
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'warning',
    plugins: [keepSeparate],
    banner: { js: '// mha-wasm: built from web/src by web/bundle.mjs (one module per concern there).' },
  });
  const imports = [...new Set(Object.values(result.metafile.outputs)[0].imports.map((i) => i.path))].sort();
  if (JSON.stringify(imports) !== JSON.stringify(SEPARATE.map((f) => `./${f}`))) {
    throw new Error(`dist/index.js would import ${imports.join(', ')}; expected only ${SEPARATE.join(', ')}`);
  }
  writeIfChanged(path.join(dist, 'index.js'), result.outputFiles[0].text);
}

/** The names a declaration statement declares (interface, type, function, class, enum, const). */
function declaredNames(statement) {
  if (ts.isVariableStatement(statement)) return statement.declarationList.declarations.map((d) => d.name.getText());
  return statement.name ? [statement.name.getText()] : [];
}

/** The statement's text, preceded by the TSDoc comment right before it (if any). */
function withDoc(statement, source) {
  const comments = ts.getLeadingCommentRanges(source.text, statement.pos) ?? [];
  const doc = comments.filter((c) => source.text.startsWith('/**', c.pos)).at(-1);
  return (doc ? `${source.text.slice(doc.pos, doc.end)}\n` : '') + statement.getText(source);
}

function parse(file) {
  return ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
}

/**
 * index.d.ts with each `export ... from './module.js'` replaced by the declarations it names, in the order
 * index.ts lists them. A name is copied as declared (no renaming) and must be exported where it is declared.
 */
function rollUpDeclarations() {
  const entry = parse(path.join(emitted, 'index.d.ts'));
  const parts = [];
  for (const statement of entry.statements) {
    if (!ts.isExportDeclaration(statement) || !statement.moduleSpecifier) {
      parts.push(withDoc(statement, entry));
      continue;
    }
    const from = path.join(emitted, statement.moduleSpecifier.text.replace(/\.js$/, '.d.ts'));
    const module = parse(from);
    for (const specifier of statement.exportClause.elements) {
      const name = specifier.name.text;
      if (specifier.propertyName && specifier.propertyName.text !== name) {
        throw new Error(`index.ts re-exports ${specifier.propertyName.text} as ${name}: export it under its own name`);
      }
      const declarations = module.statements.filter((s) => declaredNames(s).includes(name));
      if (declarations.length === 0) throw new Error(`${path.relative(repoRoot, from)} declares no ${name}`);
      for (const declaration of declarations) {
        if (!ts.getModifiers(declaration)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) {
          throw new Error(`${path.relative(repoRoot, from)}: ${name} is not exported`);
        }
        parts.push(withDoc(declaration, module));
      }
    }
  }
  return `${parts.join('\n')}\n`;
}

/** Throws unless `text` compiles alone: every name the public declarations use is public too. */
function checkStandalone(text) {
  const file = path.join(emitted, 'index.rolled-up.d.ts');
  fs.writeFileSync(file, text);
  const program = ts.createProgram([file], {
    noEmit: true,
    strict: true,
    types: [],
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    skipLibCheck: true,
  });
  const problems = ts.getPreEmitDiagnostics(program).filter((d) => d.file?.fileName === file || !d.file);
  if (problems.length > 0) {
    const text = problems.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n');
    throw new Error(
      `the rolled-up dist/index.d.ts does not compile alone (a public type uses a private one?):\n${text}`,
    );
  }
}

await bundleJs();
const declarations = rollUpDeclarations();
checkStandalone(declarations);
writeIfChanged(path.join(dist, 'index.d.ts'), declarations);
for (const file of ['version.js', 'version.d.ts'])
  writeIfChanged(path.join(dist, file), fs.readFileSync(path.join(emitted, file), 'utf8'));
