package profile

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

// htmlData returns the JSON embedded in a page written by WriteHTML.
func htmlData(t *testing.T, page string) string {
	t.Helper()
	const open = `<script type="application/json" id="flint-data">`
	_, rest, ok := strings.Cut(page, open)
	if !ok {
		t.Fatal("page has no flint-data element")
	}
	data, _, ok := strings.Cut(rest, "</script>")
	if !ok {
		t.Fatal("flint-data element is not closed")
	}
	return data
}

func TestWriteHTML(t *testing.T) {
	hostile := &Node{Name: "all", Kind: KindRoot, Total: 6, Children: []*Node{
		{Name: `</script><script>alert("x")</script>`, Kind: KindProcess, Total: 6, Children: []*Node{
			{Name: "</SCRIPT >", Kind: KindUser, Self: 1, Total: 1},
			{Name: "<!-- <script>", Kind: KindUser, Self: 1, Total: 1},
			{Name: "a&b \u2028\u2029 ]]>", Kind: KindInline, Module: "</script>", File: "<b>", Line: 2, Self: 2, Total: 2},
			{Name: "nul\x00 ctl\x1b", Kind: KindKernel, Self: 2, Total: 2},
		}},
	}}
	tests := []struct {
		name  string
		root  *Node
		title string
	}{
		{"profile", flameTestProfile().Tree(), "flint: app"},
		{"hostile names", hostile, `</title><script>alert("t")</script>`},
		{"random", randomFlameTree(3000), "random"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteHTML(&buf, tt.root, tt.title); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			var got Node
			if err := json.Unmarshal([]byte(htmlData(t, page)), &got); err != nil {
				t.Fatalf("decode embedded json: %v", err)
			}
			if !reflect.DeepEqual(&got, tt.root) {
				t.Error("embedded tree differs from the written one")
			}
			// Only the data element and the code element may end.
			if n := strings.Count(strings.ToLower(page), "</script"); n != 2 {
				t.Errorf("page has %d </script, want 2", n)
			}
			if n := strings.Count(page, "<script"); n != 2 {
				t.Errorf("page has %d <script, want 2", n)
			}
			if strings.Contains(page, "<title>"+tt.title) && strings.ContainsAny(tt.title, "<&\"") {
				t.Error("title is not escaped")
			}
			for _, external := range []string{"http://", "https://", "src=", "@import"} {
				if strings.Contains(page, external) {
					t.Errorf("page refers to something outside itself: %q", external)
				}
			}
		})
	}
}

func TestWriteHTMLEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, nil, "empty"); err != nil {
		t.Fatal(err)
	}
	var got Node
	if err := json.Unmarshal([]byte(htmlData(t, buf.String())), &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "all" || got.Total != 0 {
		t.Errorf("empty page embeds %+v", got)
	}
}

func BenchmarkWriteHTML(b *testing.B) {
	root := randomFlameTree(100_000)
	for b.Loop() {
		if err := WriteHTML(io.Discard, root, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
