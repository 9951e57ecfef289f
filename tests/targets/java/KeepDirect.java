// SPDX-License-Identifier: Apache-2.0
// A Java service keeping direct ByteBuffers from a JIT-compiled method, for
// tests/integration/runtimes_test.cc (decision jit-perf-maps). Run with
// -XX:+PreserveFramePointer -XX:MaxDirectMemorySize=64m; the test writes
// the perf map with
// `jcmd PID Compiler.perfmap`.
// Protocol: warms keepDirectInJava up until the JIT compiled it (the same
// paths the kept run takes, into a scratch list, so that the compiled code
// is not deoptimized by a branch never seen), prints "ready PID", waits for
// "go" on stdin, keeps COUNT buffers of 64 KiB (ByteBuffer.allocateDirect:
// outside the Java heap, malloc'ed by the JVM), prints "done {json}", then
// waits for "exit".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;

public class KeepDirect {
  static final int SIZE = 65536;
  static final ArrayList<ByteBuffer> kept = new ArrayList<>();

  static long keepDirectInJava(int n, int size, ArrayList<ByteBuffer> into) {
    long total = 0;
    for (int i = 0; i < n; i++) {
      ByteBuffer b = ByteBuffer.allocateDirect(size);
      total += b.capacity();
      into.add(b);
    }
    return total;
  }

  public static void main(String[] args) throws Exception {
    int count = args.length > 0 ? Integer.parseInt(args[0]) : 256;
    // A fresh list each time: the list grows (and copies) as the kept run's
    // does. A path the compiled code never saw is an uncommon
    // trap: the method would be deoptimized and run interpreted, and an
    // interpreted frame's return address (pushed by the interpreter, not by
    // a call) ends the walk.
    // The buffers are of the kept run's size too (a smaller one left a
    // branch in DirectByteBuffer's constructor unseen): run with
    // -XX:MaxDirectMemorySize=64m, so that the JVM collects them (its own
    // System.gc when the limit is reached) as they pile up.
    // The kept run's own count too: with 16 a clean-clone run deoptimized
    // keepDirectInJava during the kept run (an uncommon trap, then
    // interpreted) and 61% of the bytes ended above it. 200 calls of 256
    // pass C2's back-edge threshold; the test runs with -Xbatch, so the
    // compiled code is installed before the loop goes on.
    for (int i = 0; i < 200; i++) keepDirectInJava(count, SIZE, new ArrayList<>());
    System.gc();  // the warm-up's buffers freed (their cleaners) before tracing starts
    Thread.sleep(300);
    System.out.println("ready " + ProcessHandle.current().pid());
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line; (line = in.readLine()) != null;) {
      if (line.equals("go")) {
        long bytes = keepDirectInJava(count, SIZE, kept);
        System.out.println("done {\"function\": \"keepDirectInJava\", \"bytes\": " + bytes + "}");
      } else if (line.equals("exit")) {
        return;
      }
    }
  }
}
