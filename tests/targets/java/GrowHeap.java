// SPDX-License-Identifier: Apache-2.0
// A JVM whose heap grows after leakwatch attached (decision
// reserved-address-space): run with a small -Xms and -Xmx2g, HotSpot reserves
// the 2 GiB heap PROT_NONE at start-up and commits regions into it as the
// heap grows (mmap MAP_FIXED read-write over the reservation). After "go" it
// keeps 256 arrays of 256 KiB (64 MiB, below G1's humongous size for 1 MiB
// regions) and asks for a full GC, after which G1 sizes the heap to
// -XX:MinHeapFreeRatio: with 75, about four times what it holds, committed
// and never touched. "done" reports the heap's committed and used bytes
// (Runtime.totalMemory, totalMemory - freeMemory). Speaks the protocol of
// ../target_protocol.h.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;

public class GrowHeap {
  static final List<byte[]> kept = new ArrayList<>();

  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    System.out.println("ready " + ProcessHandle.current().pid());
    System.out.flush();
    for (String l; (l = in.readLine()) != null && !l.equals("go");) {
    }
    for (int i = 0; i < 256; i++) kept.add(new byte[256 << 10]);
    System.gc();
    Runtime r = Runtime.getRuntime();
    System.out.println("done {\"committed\":" + r.totalMemory() + ",\"used\":" + (r.totalMemory() - r.freeMemory())
        + ",\"kept\":" + (256L << 18) + "}");
    System.out.flush();
    for (String l; (l = in.readLine()) != null && !l.equals("exit");) {
    }
  }
}
