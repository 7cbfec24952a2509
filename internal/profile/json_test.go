package profile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/flint-dev/flint/internal/symbol"
)

// flameTestProfile has two processes, user frames from three packages, an
// inlined call, kernel frames and names with markup characters.
func flameTestProfile() *Profile {
	exe := &Mapping{File: "/usr/bin/app"}
	libc := &Mapping{File: "/lib/x86_64-linux-gnu/libc.so.6"}
	kernel := &Mapping{File: "[kernel.kallsyms]", Kernel: true}
	loc := func(m *Mapping, fns ...string) *Location {
		l := &Location{Mapping: m}
		for i, fn := range fns {
			l.Frames = append(l.Frames, symbol.Frame{Function: fn, File: "/src/app/" + fn[:1] + ".go", Line: 10 + i})
		}
		return l
	}
	return &Profile{Samples: []*Sample{
		{Count: 60, Labels: map[string]string{LabelComm: "app"}, Stack: []*Location{
			loc(kernel, "handle_mm_fault"),
			loc(kernel, "asm_exc_page_fault"),
			loc(exe, "runtime.nextFreeFast", "runtime.mallocgc"),
			loc(exe, "net/http.(*conn).serve"),
			loc(exe, "main.main"),
		}},
		{Count: 30, Labels: map[string]string{LabelComm: "app"}, Stack: []*Location{
			loc(libc, "malloc"),
			loc(exe, "std::vector<int, std::allocator<int>>::push_back(int const&)"),
			loc(exe, "main.main"),
		}},
		{Count: 5, Labels: map[string]string{LabelComm: "app"}, Stack: []*Location{
			loc(exe, "main.main"),
		}},
		{Count: 10, Labels: map[string]string{LabelComm: `idle<&>"`}, Stack: []*Location{
			loc(kernel, "cpuidle_enter"),
			loc(kernel, "do_idle"),
		}},
	}}
}

// randomFlameTree returns a random call tree of n nodes with heavy-tailed
// self counts, shaped like a real profile: a few hundred processes and
// functions under them, around thirty levels deep.
func randomFlameTree(n int) *Node {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []FrameKind{KindUser, KindUser, KindUser, KindInline, KindKernel}
	nodes := []*Node{{Name: "all", Kind: KindRoot}}
	parents := []int{-1}
	for i := 1; i < n; i++ {
		p := rng.IntN(i)
		nd := &Node{
			Name:   fmt.Sprintf("github.com/example/pkg%d.(*Type%d).Method%d", i%41, i%7, i),
			Kind:   kinds[rng.IntN(len(kinds))],
			Module: "/usr/bin/example",
			File:   fmt.Sprintf("/src/pkg%d/file%d.go", i%41, i%13),
			Line:   1 + rng.IntN(2000),
			Self:   int64(math.Pow(rng.Float64(), -1.3)),
		}
		if p == 0 {
			nd.Kind = KindProcess
			nd.Module, nd.File, nd.Line = "", "", 0
		}
		nodes = append(nodes, nd)
		parents = append(parents, p)
		nodes[p].Children = append(nodes[p].Children, nd)
	}
	// Children always come after their parent, so one backward pass sums totals.
	for i := n - 1; i >= 0; i-- {
		nodes[i].Total += nodes[i].Self
		if p := parents[i]; p >= 0 {
			nodes[p].Total += nodes[i].Total
		}
	}
	return nodes[0]
}

func TestWriteJSON(t *testing.T) {
	tests := []struct {
		name string
		root *Node
	}{
		{"root only", &Node{Name: "all", Kind: KindRoot}},
		{"profile", flameTestProfile().Tree()},
		{"markup in names", &Node{Name: "all", Kind: KindRoot, Total: 3, Children: []*Node{
			{Name: `</script><script>alert("x")</script>`, Kind: KindProcess, Self: 1, Total: 1},
			{Name: "a<b>&c \u2028 <!--", Kind: KindUser, Module: "m&m", File: "f<1>.go", Line: 7, Self: 2, Total: 2},
		}}},
		{"random", randomFlameTree(2000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteJSON(&buf, tt.root); err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 || !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
				t.Errorf("output has %d newlines, want one line", n)
			}
			if bytes.Contains(buf.Bytes(), []byte("<")) {
				t.Errorf("output contains an unescaped '<'")
			}
			var got Node
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(&got, tt.root) {
				t.Errorf("decoded tree differs from the written one")
			}
		})
	}
}
