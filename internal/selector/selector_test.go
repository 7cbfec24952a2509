package selector

import (
	"strings"
	"testing"
)

func TestParseAndMatch(t *testing.T) {
	labels := map[string]string{"comm": "api", "container": "3f2a99", "pid": "42"}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{``, true},
		{`{}`, true},
		{`{comm="api"}`, true},
		{`{comm="db"}`, false},
		{`{comm!="db"}`, true},
		{`{ comm = "api" , container =~ "3f2a.*" , }`, true},
		{`{container=~"3f2a"}`, false}, // anchored
		{`{container!~"3f.*"}`, false},
		{`{pod=""}`, true}, // missing label is empty
		{`{pod!=""}`, false},
		{`{comm="a\"pi"}`, false},
		{`{comm=~"a.i|x",pid="42"}`, true},
		// A long but small alternation, as a UI builds from picked values.
		{`{container=~"` + strings.Repeat(`0123456789ab|`, 250) + `3f2a99"}`, true},
		{`{comm=~"a{1000}|api"}`, true},
	} {
		s, err := Parse(tc.sel)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.sel, err)
			continue
		}
		if got := s.Matches(labels); got != tc.want {
			t.Errorf("%q matches = %v, want %v", tc.sel, got, tc.want)
		}
		again, err := Parse(s.String())
		if err != nil || again.String() != s.String() {
			t.Errorf("round trip of %q: %q, %v", tc.sel, again.String(), err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{
		`comm="api"`, `{comm}`, `{comm=api}`, `{comm="api"`, `{comm=="api"}`,
		`{comm="api"} x`, `{1comm="x"}`, `{comm=~"("}`, `{comm="\q"}`, `{,}`,
		`{a="x" b="y"}`, "{" + strings.Repeat(`a="b",`, 1000) + "}",
		// Each under the length limit; expanded, far beyond the size limit.
		`{comm=~"` + strings.Repeat(`(?:a{1000})`, 300) + `"}`,
		`{comm!~"` + strings.Repeat(`[a-z]{999}x{999}`, 10) + `"}`,
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) error has several lines: %v", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{comm="api",container=~"3f2a.*"}`, `{a!~"x|y"}`, `{}`, `{a="\u00e9\""}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err != nil {
			return
		}
		s.Matches(map[string]string{"comm": "x"})
		again, err := Parse(s.String())
		if err != nil {
			t.Fatalf("String() of %q = %q does not parse: %v", text, s.String(), err)
		}
		if again.String() != s.String() {
			t.Fatalf("round trip %q -> %q", s.String(), again.String())
		}
	})
}
