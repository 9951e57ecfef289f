// SPDX-License-Identifier: Apache-2.0
// A Node service keeping Buffers in a named JS function, for
// tests/integration/runtimes_test.cc (decision jit-perf-maps). Run with
// --perf-basic-prof --interpreted-frames-native-stack, so that V8 keeps frame
// pointers through a copy of its interpreter trampoline per function and names
// each code object in /tmp/perf-PID.map.
// Protocol: prints "ready PID", waits for "go" on stdin, keeps COUNT Buffers of
// 64 KiB (Buffer.allocUnsafeSlow: outside V8's heap, from node's allocator,
// malloc), prints "done {json}" with the bytes kept, then waits for "exit".
'use strict';
const COUNT = Number(process.argv[2] || 256);
const SIZE = 65536;
const kept = [];

function keepBuffersInJs(n) {
  for (let i = 0; i < n; i++) kept.push(Buffer.allocUnsafeSlow(SIZE));
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  input += chunk;
  let nl;
  while ((nl = input.indexOf('\n')) >= 0) {
    const line = input.slice(0, nl);
    input = input.slice(nl + 1);
    if (line === 'go') {
      keepBuffersInJs(COUNT);
      process.stdout.write('done ' + JSON.stringify({function: 'keepBuffersInJs', bytes: COUNT * SIZE}) + '\n');
    } else if (line === 'exit') {
      process.exit(0);
    }
  }
});
process.stdout.write('ready ' + process.pid + '\n');
