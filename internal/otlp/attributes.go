// Package otlp converts flint's profiles to and from OpenTelemetry's
// profiles signal (OTLP, profiles v1development as the Go module
// go.opentelemetry.io/proto/slim/otlp/profiles/v1development v0.4.1
// generates it) and carries them over gRPC and HTTP.
package otlp

import (
	"strings"

	"github.com/flint-dev/flint/internal/profile"
)

// An attribute is how one flint label travels in OTLP: under key, on the
// resource (the process) or on each sample (the thread), as an int when
// the label is a number.
type attribute struct {
	label, key string
	resource   bool
	isInt      bool
}

// attributes map flint's labels to OpenTelemetry's semantic conventions
// (resource, process, container, k8s, thread and host attributes). Labels
// with no convention travel as "flint.<label>" (flint.cgroup,
// flint.start_time), so a flint receiving them gets them back unchanged.
var attributes = []attribute{
	{label: profile.LabelNode, key: "host.name", resource: true},
	{label: profile.LabelPID, key: "process.pid", resource: true, isInt: true},
	{label: profile.LabelComm, key: "process.executable.name", resource: true},
	{label: profile.LabelExe, key: "process.executable.path", resource: true},
	{label: profile.LabelBuildID, key: "process.executable.build_id.gnu", resource: true},
	{label: profile.LabelContainerID, key: "container.id", resource: true},
	{label: profile.LabelPodUID, key: "k8s.pod.uid", resource: true},
	{label: profile.LabelPod, key: "k8s.pod.name", resource: true},
	{label: profile.LabelNamespace, key: "k8s.namespace.name", resource: true},
	{label: profile.LabelContainer, key: "k8s.container.name", resource: true},
	{label: profile.LabelThread, key: "thread.name"},
	{label: profile.LabelTID, key: "thread.id", isInt: true},
}

// flintPrefix starts the keys of labels without a semantic convention.
const flintPrefix = "flint."

// buildIDKey is a mapping's build ID attribute (the GNU build ID, hex).
const buildIDKey = "process.executable.build_id.gnu"

// byLabel and byKey index attributes.
var byLabel, byKey = func() (map[string]attribute, map[string]attribute) {
	l, k := map[string]attribute{}, map[string]attribute{}
	for _, a := range attributes {
		l[a.label], k[a.key] = a, a
	}
	return l, k
}()

// labelOf returns the flint label an attribute key carries: the known
// ones, flint.* ones, and any other key with its dots and other characters
// that label names cannot hold made underscores (service.name becomes
// service_name).
func labelOf(key string) string {
	if a, ok := byKey[key]; ok {
		return a.label
	}
	if l, ok := strings.CutPrefix(key, flintPrefix); ok && l != "" {
		return l
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, key)
}
