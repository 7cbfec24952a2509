package profile

import (
	"slices"
	"testing"
)

func TestTopFunctionsRecursion(t *testing.T) {
	// f calls f calls g: f's cum counts the sample once.
	g := &Node{Name: "g", Kind: KindUser, Self: 3, Total: 3}
	f2 := &Node{Name: "f", Kind: KindUser, Self: 1, Total: 4, Children: []*Node{g}}
	f1 := &Node{Name: "f", Kind: KindUser, Total: 4, Children: []*Node{f2}}
	root := &Node{Name: "all", Kind: KindRoot, Total: 4, Children: []*Node{
		{Name: "app", Kind: KindProcess, Total: 4, Children: []*Node{f1}},
	}}
	if got, want := TopFunctions(root, false), []FunctionTotal{{"g", 3, 3}, {"f", 1, 4}}; !slices.Equal(got, want) {
		t.Errorf("top %v, want %v", got, want)
	}
	if got, want := TopFunctions(root, true), []FunctionTotal{{"f", 1, 4}, {"g", 3, 3}}; !slices.Equal(got, want) {
		t.Errorf("top by cum %v, want %v", got, want)
	}
}
