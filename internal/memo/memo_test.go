package memo

import (
	"strings"
	"testing"
)

// TestStrings computes a value once per key, starts over past Max, and
// finds a key given as bytes without copying it.
func TestStrings(t *testing.T) {
	calls := 0
	upper := func(s string) string { calls++; return strings.ToUpper(s) }
	m := Strings[string]{Max: 2}
	for _, k := range []string{"a", "b", "a", "b"} {
		if v := m.Get(k, upper); v != strings.ToUpper(k) {
			t.Errorf("Get(%q) = %q", k, v)
		}
	}
	if calls != 2 {
		t.Errorf("%d computations of 2 keys", calls)
	}
	m.Get("c", upper) // a third: starts over
	m.Get("a", upper)
	if calls != 4 || len(m.m) != 2 {
		t.Errorf("past Max: %d computations, %d kept", calls, len(m.m))
	}
	key := []byte("a")
	if allocs := testing.AllocsPerRun(100, func() { m.GetBytes(key, upper) }); allocs != 0 {
		t.Errorf("%v allocations finding a key given as bytes", allocs)
	}
}
