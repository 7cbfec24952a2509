// Command gofixture is the Go program the symbol tests build and read back.
// It prints, from inside inlined calls, the stack the runtime itself
// reports, which the tests compare with GoTable.Lookup:
//
//	anchor <function> <address>
//	stack
//	frame <pc> <function>\t<file>\t<line>
//
// Lines marked "mark:" are found by the tests by that text.
package main

import (
	"fmt"
	"reflect"
	"runtime"
)

type point struct{ x, y int }

// record returns the stack of its caller; it is a physical frame.
//
//go:noinline
func record() []uintptr {
	pcs := make([]uintptr, 64)
	return pcs[:runtime.Callers(2, pcs)]
}

// leaf is small, so the compiler inlines it into middle.
func leaf() []uintptr {
	return record() // mark:leaf-calls-record
}

// middle is inlined into run, so leaf ends up two levels deep.
func middle() []uintptr {
	return leaf() // mark:middle-calls-leaf
}

//go:noinline
func run() []uintptr {
	return middle() // mark:run-calls-middle
}

// norm is a value method inlined into the (*point).norm wrapper that the
// compiler writes for calls through the interface below.
func (p point) norm() []uintptr {
	return record() // mark:norm-calls-record
}

type normer interface{ norm() []uintptr }

//go:noinline
func viaInterface(n normer) []uintptr {
	return n.norm() // mark:interface-calls-norm
}

//go:noinline
func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func main() {
	fmt.Printf("anchor main.record %d\n", reflect.ValueOf(record).Pointer())
	for _, pcs := range [][]uintptr{run(), viaInterface(&point{3, 4})} {
		fmt.Println("stack")
		frames := runtime.CallersFrames(pcs)
		for {
			f, more := frames.Next()
			fmt.Printf("frame %d %s\t%s\t%d\n", f.PC, f.Function, f.File, f.Line)
			if !more {
				break
			}
		}
	}
	if sum([]int{1, 2, 3}) != 6 || fib(10) != 55 {
		panic("arithmetic")
	}
}
