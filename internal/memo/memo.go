// Package memo keeps values computed from strings, so that what many
// processes share (their files, their cgroups) is computed and stored once.
package memo

import "sync"

// Strings maps strings to the values computed from them, at most Max of
// them: past it, it starts over, so a node that keeps bringing new ones
// costs time, never memory. Safe for concurrent use.
type Strings[V any] struct {
	Max int

	mu sync.Mutex
	m  map[string]V
}

// Get returns the value of key, computing it with compute the first time.
// compute runs under the memo's lock: it should be quick.
func (s *Strings[V]) Get(key string, compute func(string) V) V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[key]; ok {
		return v
	}
	return s.add(key, compute)
}

// GetBytes is Get for a key in a byte slice, which it copies only the first
// time.
func (s *Strings[V]) GetBytes(key []byte, compute func(string) V) V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[string(key)]; ok {
		return v
	}
	return s.add(string(key), compute)
}

func (s *Strings[V]) add(key string, compute func(string) V) V {
	if s.m == nil || len(s.m) >= s.Max {
		s.m = map[string]V{}
	}
	v := compute(key)
	s.m[key] = v
	return v
}
