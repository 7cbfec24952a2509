package otlp

import (
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	service "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	"google.golang.org/protobuf/proto"
)

// BenchmarkEncode is what exporting a window costs the agent before the
// network: Encode and the protobuf encoding of the request, for a window
// of the agent's shape (fixture.AgentWindow).
func BenchmarkEncode(b *testing.B) {
	p := fixture.AgentWindow(time.Now())
	var size int
	for b.Loop() {
		d := Encode(p, "bench")
		body, err := proto.Marshal(&service.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary})
		if err != nil {
			b.Fatal(err)
		}
		size = len(body)
	}
	b.ReportMetric(float64(size), "bytes/window")
}

// BenchmarkDecode is what receiving such a window costs: the protobuf
// decoding of the request and Decode.
func BenchmarkDecode(b *testing.B) {
	d := Encode(fixture.AgentWindow(time.Now()), "bench")
	body, err := proto.Marshal(&service.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var req service.ExportProfilesServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
		d.ResourceProfiles, d.Dictionary = req.ResourceProfiles, req.Dictionary
		if _, _, err := Decode(d); err != nil {
			b.Fatal(err)
		}
	}
}
