package python

import "testing"

func TestFileVersion(t *testing.T) {
	for path, want := range map[string]string{
		"/usr/bin/python3.11":                            "3.11",
		"/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0": "3.12",
		"/usr/local/bin/python3.11d":                     "3.11",
		"/usr/bin/python3.13t":                           "3.13t",
		"/usr/lib/libpython3.13t.so.1.0":                 "3.13t",
		"/usr/bin/python2.7":                             "2.7",
		"/usr/bin/python3":                               "3",
		"/usr/bin/python3.11-config":                     "",
		"/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so": "",
		"/usr/bin/pythonista":          "",
		"/usr/lib/libpython-helper.so": "",
		"/usr/bin/mypython3.11":        "",
	} {
		if got := FileVersion(path); got != want {
			t.Errorf("FileVersion(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestMinorOf(t *testing.T) {
	for v, want := range map[string]int{"3.9": 9, "3.13": 13, "3.13t": -1, "3": -1, "2.7": -1} {
		got, ok := minorOf(v)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("minorOf(%q) = %d, want %d", v, got, want)
		}
	}
}
