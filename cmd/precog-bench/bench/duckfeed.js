// duckfeed.js: DuckDB's read-sum-write, the limit of the bench's feed row
// (issue 33). The harness (duckdb.go) builds the COPY statement and runs
//   NODE_PATH=<make duckdb's node_modules> node duckfeed.js THREADS 'COPY (...) TO ...'
// as a process of its own, timed from spawn to exit like precog's run. It
// opens an in-memory DuckDB on THREADS threads (extensions neither
// installed nor loaded from the network: Parquet is built in), runs the
// statement and prints {"rows": N, "threads": T}: the rows COPY wrote and the
// thread count DuckDB ran with.
'use strict';

const { DuckDBInstance } = require('@duckdb/node-api');

async function main(argv) {
  if (argv.length !== 2) {
    throw new Error('usage: node duckfeed.js THREADS COPY-STATEMENT');
  }
  const threads = Number(argv[0]);
  if (!Number.isInteger(threads) || threads < 1) {
    throw new Error(`THREADS ${JSON.stringify(argv[0])}: want a whole number >= 1`);
  }
  const sql = argv[1];
  if (!/^COPY \(/.test(sql)) {
    throw new Error('the statement must be a COPY (SELECT ...) TO ...');
  }
  const db = await DuckDBInstance.create(':memory:', {
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
  });
  const con = await db.connect();
  await con.run(`SET threads = ${threads}`);
  const set = (await con.runAndReadAll("SELECT current_setting('threads')")).getRows()[0][0];
  const copied = (await con.runAndReadAll(sql)).getRows()[0][0];
  con.closeSync();
  db.closeSync();
  process.stdout.write(JSON.stringify({ rows: Number(copied), threads: Number(set) }) + '\n');
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`duckfeed: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
