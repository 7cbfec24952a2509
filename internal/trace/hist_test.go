package trace

import (
	"math"
	"testing"
)

func TestBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 7, 8, 9, 15, 16, 17, 100, 1000, 1048576, 1100000, 123456789, 1 << 40, 1<<41 - 1} {
		i := bucketOf(v)
		lo, hi := BucketBounds(i)
		if v < lo || v >= hi {
			t.Errorf("%d in bucket %d = [%d, %d)", v, i, lo, hi)
		}
		if lo >= 8 && float64(hi-lo)/float64(lo) > 0.125 {
			t.Errorf("bucket %d = [%d, %d) wider than 12.5%%", i, lo, hi)
		}
	}
	if i := bucketOf(math.MaxUint64); i != HistBuckets-1 {
		t.Errorf("bucketOf(max) = %d, want the last bucket %d", i, HistBuckets-1)
	}
	// Buckets tile the line.
	for i := 1; i < HistBuckets; i++ {
		_, prevHi := BucketBounds(i - 1)
		if lo, _ := BucketBounds(i); lo != prevHi {
			t.Fatalf("bucket %d starts at %d, bucket %d ends at %d", i, lo, i-1, prevHi)
		}
	}
}

func TestPercentiles(t *testing.T) {
	h := &Histogram{Counts: make([]uint64, HistBuckets)}
	// 90 calls of ~1.1 ms, 10 of ~10 ms.
	h.Counts[bucketOf(1100000)] = 90
	h.Counts[bucketOf(10000000)] = 10
	h.SumNs = 90*1100000 + 10*10000000
	if h.Count() != 100 {
		t.Fatalf("count %d", h.Count())
	}
	for _, tc := range []struct {
		q      float64
		lo, hi float64
	}{
		{0.5, 1.048e6, 1.18e6},
		{0.9, 1.048e6, 1.18e6},
		{0.99, 9.4e6, 10.5e6},
	} {
		if p := h.Percentile(tc.q); p < tc.lo || p > tc.hi {
			t.Errorf("p%v = %v, want in [%v, %v]", tc.q*100, p, tc.lo, tc.hi)
		}
	}
	if m := h.Mean(); m != 1.99e6 {
		t.Errorf("mean %v, want 1.99e6", m)
	}
	l := h.Log2()
	if len(l) != 4 || l[0].LowNs != 1<<20 || l[0].Count != 90 || l[3].LowNs != 1<<23 || l[3].Count != 10 {
		t.Errorf("log2 buckets %+v: want 1 Mi..16 Mi ns, 90 then 10", l)
	}
	if (&Histogram{}).Percentile(0.5) != 0 || (&Histogram{}).Log2() != nil {
		t.Error("empty histogram not empty")
	}
}
