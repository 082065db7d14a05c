// `npm start`: serves the repository root (the demo at /web/demo/, the package at /dist/) until Ctrl-C.
// PORT picks the port (default 5173); HOST the interface (default 127.0.0.1; 0.0.0.0 to expose it).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, serve } from './serve.mjs';

const port = process.env.PORT === undefined || process.env.PORT === '' ? 5173 : Number(process.env.PORT);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`start: PORT must be an integer in 0..65535, got ${JSON.stringify(process.env.PORT)}`);
  process.exit(1);
}
const host = process.env.HOST || '127.0.0.1';

for (const file of ['dist/index.js', 'dist/mha.js', 'dist/mha.wasm']) {
  if (!existsSync(join(REPO_ROOT, file))) {
    console.error(`start: ${file} is missing; run \`npm run build\` first (npm start does it for you)`);
    process.exit(1);
  }
}

let running;
try {
  running = await serve({ port, host });
} catch (error) {
  if (error.code === 'EADDRINUSE') {
    console.error(`start: port ${port} is already in use; pick another one, e.g. PORT=${port + 1} npm start`);
  } else {
    console.error(`start: cannot listen on ${host}:${port}: ${error.message}`);
  }
  process.exit(1);
}

const shown = host === '127.0.0.1' || host === '0.0.0.0' || host === '::' ? 'localhost' : host;
console.log(`mha-wasm demo: http://${shown}:${running.port}/web/demo/`);
console.log('(serving the repository root with COOP/COEP headers; Ctrl-C to stop)');

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, async () => {
    if (stopping) process.exit(1);
    stopping = true;
    await running.close();
    process.exit(0);
  });
}
