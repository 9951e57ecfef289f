// SPDX-License-Identifier: Apache-2.0
// A cgo program whose Go heap grows after leakwatch attached (decision
// reserved-address-space): the Go runtime reserved its first 64 MiB heap
// arena (PROT_NONE) at start-up, before the attach, and maps the heap's
// growth over it (sysMap: mmap MAP_FIXED read-write), through libc's mmap
// (cgo), so those mappings are traced. After "go" it keeps 64 slices of
// 1 MiB and touches the first half of each, page by page: 32 MiB touched
// of 64 MiB the runtime committed. Transparent huge pages are off for the
// process (PR_SET_THP_DISABLE; the runtime asks for them on its heap, and
// one touched byte could then make 2 MiB resident), so that touched pages
// are what is resident. The collector is off (debug.SetGCPercent(-1)): every
// slice comes from memory fresh from the kernel, which the runtime knows is
// zero and does not clear, where a span reused after a collection would be
// cleared whole (1 MiB touched for 512 KiB). Speaks the protocol of
// ../target_protocol.h.
package main

/*
static int have_cgo(void) { return 1; }
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
)

const (
	chunk  = 1 << 20
	chunks = 64
	page   = 4096
)

var keep [][]byte

func main() {
	const prSetTHPDisable = 41
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTHPDisable, 1, 0, 0, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "prctl(PR_SET_THP_DISABLE): %v\n", errno)
		os.Exit(1)
	}
	debug.SetGCPercent(-1)
	_ = C.have_cgo()
	in := bufio.NewScanner(os.Stdin)
	fmt.Printf("ready %d\n", os.Getpid())
	for in.Scan() && in.Text() != "go" {
	}
	touched := 0
	for i := 0; i < chunks; i++ {
		b := make([]byte, chunk)
		for off := 0; off < chunk/2; off += page {
			b[off] = 1
			touched += page
		}
		keep = append(keep, b)
	}
	fmt.Printf("done {\"sites\":{},\"mmap_sites\":[],\"facts\":{\"kept\":%d,\"touched\":%d}}\n", chunks*chunk, touched)
	for in.Scan() && in.Text() != "exit" {
	}
}
