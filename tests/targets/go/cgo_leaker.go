// SPDX-License-Identifier: Apache-2.0
// A Go program that leaks through C: cgo calls into C functions that
// malloc and keep the blocks. leakwatch must trace these (libc's malloc,
// reached through cgo on the system stack) and never probe the Go binary
// itself. Speaks the protocol of ../target_protocol.h. Built with cgo
// (cgo_leaker) and without (go_leaker_nocgo: nothing C to trace, so the
// process must be reported unsupported with no probe attached).
package main

/*
#include <stdlib.h>

static void *volatile kept[64];
static int nkept;

__attribute__((noinline)) static void leak_c(size_t n) { kept[nkept++] = malloc(n); }
__attribute__((noinline)) static void churn_c(void) {
	for (int i = 0; i < 100; i++) { void *volatile p = malloc(96); free(p); }
}
static void run_leaks(void) {
	for (int i = 0; i < 6; i++) leak_c(4000 + i);
	churn_c();
}
static int have_cgo(void) { return 1; }
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
)

var keep [][]byte

func main() {
	in := bufio.NewScanner(os.Stdin)
	fmt.Printf("ready %d\n", os.Getpid())
	for in.Scan() && in.Text() != "go" {
	}
	// Go's own heap grows too; leakwatch does not see it (reported partial).
	for i := 0; i < 100; i++ {
		keep = append(keep, make([]byte, 4096))
	}
	C.run_leaks()
	// 4000+4001+...+4005
	fmt.Printf("done {\"sites\":{\"leak_c\":%d,\"churn_c\":0},\"mmap_sites\":[],\"facts\":{}}\n", 6*4000+15)
	for in.Scan() && in.Text() != "exit" {
	}
}
