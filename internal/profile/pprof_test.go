package profile

import (
	"testing"
	"time"
)

func TestProtoKinds(t *testing.T) {
	for _, tc := range []struct {
		kind   Kind
		period time.Duration
		types  []string
		values []int64 // of the first sample, counted 3
	}{
		{CPU, 10 * time.Millisecond, []string{"samples/count", "cpu/nanoseconds"}, []int64{3, 30_000_000}},
		{OffCPU, time.Nanosecond, []string{"off_cpu/nanoseconds"}, []int64{3}},
		{Wall, time.Nanosecond, []string{"wall/nanoseconds"}, []int64{3}},
	} {
		p := &Profile{Kind: tc.kind, Period: tc.period, Comments: []string{"c"},
			Samples: []*Sample{{Count: 3, Labels: map[string]string{}}}}
		pp := p.Proto()
		var types []string
		for _, st := range pp.SampleType {
			types = append(types, st.Type+"/"+st.Unit)
		}
		if len(types) != len(tc.types) || types[0] != tc.types[0] {
			t.Errorf("kind %d: sample types %v, want %v", tc.kind, types, tc.types)
		}
		if got := pp.Sample[0].Value; len(got) != len(tc.values) || got[len(got)-1] != tc.values[len(got)-1] {
			t.Errorf("kind %d: values %v, want %v", tc.kind, got, tc.values)
		}
		if pp.PeriodType.Type+"/"+pp.PeriodType.Unit != tc.types[len(tc.types)-1] || len(pp.Comments) != 1 {
			t.Errorf("kind %d: period type %v, comments %v", tc.kind, pp.PeriodType, pp.Comments)
		}
		if err := pp.CheckValid(); err != nil {
			t.Errorf("kind %d: %v", tc.kind, err)
		}
	}
}
