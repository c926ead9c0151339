//go:build ref

package main

import (
	"fmt"
	"os"
)

// priority needs controller-runtime's priority queue, which only the default build (the
// newest client-go) has.
func priority(params) *report {
	fmt.Fprintln(os.Stderr, "priority: controller-runtime's priority queue is in the default build (go.mod), not the reference one")
	os.Exit(2)
	return nil
}
