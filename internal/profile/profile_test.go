package profile

import "testing"

func TestParseKind(t *testing.T) {
	for _, k := range []Kind{CPU, OffCPU, Wall} {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %d, %v; want %d", k.String(), got, err, k)
		}
	}
	for _, s := range []string{"", "CPU", "offcpu", "kind 3"} {
		if k, err := ParseKind(s); err == nil {
			t.Errorf("ParseKind(%q) = %d, want an error", s, k)
		}
	}
}
