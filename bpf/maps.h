// SPDX-License-Identifier: GPL-2.0
// Map helpers shared by flint's BPF programs. Include after bpf_helpers.h.
#ifndef FLINT_MAPS_H
#define FLINT_MAPS_H

#define EEXIST 17

// percpu_add adds n to counter key of a per-CPU array of __u64.
static __always_inline void percpu_add(void *map, __u32 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		*v += n; // per-CPU value: no other writer
}

// percpu_inc adds one to counter key of a per-CPU array of __u64.
static __always_inline void percpu_inc(void *map, __u32 key)
{
	percpu_add(map, key, 1);
}

// lookup_or_init returns the value at key in a hash map, inserting init
// first when there is none; NULL when the map is full.
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	long err = bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	if (err && err != -EEXIST) // EEXIST: another CPU inserted it
		return NULL;
	return bpf_map_lookup_elem(map, key);
}

// add_count adds n to the __u64 at key in a hash map, inserting it; it
// returns false when the map is full.
static __always_inline bool add_count(void *map, const void *key, __u64 n)
{
	__u64 zero = 0;
	__u64 *v = lookup_or_init(map, key, &zero);
	if (!v)
		return false;
	__sync_fetch_and_add(v, n);
	return true;
}

// hash_ips mixes the first len of ips into 64 bits; never 0, which callers
// use for "no stack". User space computes the same hash (sampler.hashStack).
static __always_inline __u64 hash_ips(const __u64 *ips, __u32 len, __u32 max)
{
	__u64 h = 0x9e3779b97f4a7c15ULL ^ len;
	for (__u32 i = 0; i < max; i++) {
		if (i >= len)
			break;
		h = (h ^ ips[i]) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	return h ? h : 1;
}

#endif
