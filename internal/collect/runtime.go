package collect

import (
	"path/filepath"
	"strings"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
)

// runtimeOf names what runs p's code, for the runtime label: the Go release
// that built its executable ("go1.26"), the interpreter or virtual machine
// it maps ("python3.11", "jvm", "node"), else "native". Kernel threads map
// nothing: "".
func (c *Collector) runtimeOf(p *proc.Process) string {
	if len(p.Mappings) == 0 {
		return ""
	}
	for i := range p.Mappings {
		if m := &p.Mappings[i]; m.Path == p.Exe {
			if v := c.sym.GoVersion(m.Key()); v != "" {
				return goRelease(v)
			}
			break
		}
	}
	runtime := "native"
	for i := range p.Mappings {
		name := filepath.Base(p.Mappings[i].Path)
		switch {
		case name == jvmLibrary:
			return "jvm" // it wins over any interpreter a JVM embeds
		case strings.HasPrefix(name, "libnode.so"), p.Mappings[i].Path == p.Exe && (name == "node" || name == "nodejs"):
			runtime = "node"
		default:
			if v := python.FileVersion(name); v != "" {
				runtime = "python" + v
			}
		}
	}
	return runtime
}

// goRelease shortens a Go version to its release: go1.26.0 → go1.26;
// others (devel builds) stay whole.
func goRelease(v string) string {
	if parts := strings.SplitN(v, ".", 3); len(parts) == 3 && strings.HasPrefix(v, "go1.") {
		return parts[0] + "." + parts[1]
	}
	return v
}

// jvmLibrary is HotSpot's shared library, mapped by every java process.
const jvmLibrary = "libjvm.so"

// isJVM reports whether p runs a HotSpot JVM.
func isJVM(p *proc.Process) bool {
	for i := range p.Mappings {
		if filepath.Base(p.Mappings[i].Path) == jvmLibrary {
			return true
		}
	}
	return false
}

// jvmOf reports whether p runs a HotSpot JVM and, if it does, asks for its
// JIT map (SetJIT). Called at each read of its mappings (a JVM read as its
// loader mapped its libraries is known as one only when read again) and at
// its first sample in anonymous code a window (the map may be older than
// the code). Asking again is cheap: the dumper asks a JVM at most once a
// period.
func (c *Collector) jvmOf(p *proc.Process) bool {
	jvm := isJVM(p)
	if jvm && c.jit != nil {
		c.jit(p.PID)
	}
	return jvm
}

// jvms returns the PIDs of the JVMs among the processes known.
func (c *Collector) jvms() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, e := range c.procs {
		if isJVM(e.p) {
			out = append(out, e.p.PID)
		}
	}
	return out
}
