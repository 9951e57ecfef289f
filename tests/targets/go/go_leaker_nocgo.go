// SPDX-License-Identifier: Apache-2.0
// A pure Go program (no cgo, statically linked): nothing C to trace. See
// cgo_leaker.go. Speaks the protocol of ../target_protocol.h.
package main

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
	for i := 0; i < 100; i++ {
		keep = append(keep, make([]byte, 4096))
	}
	fmt.Printf("done {\"sites\":{},\"mmap_sites\":[],\"facts\":{}}\n")
	for in.Scan() && in.Text() != "exit" {
	}
}
