module github.com/flint-dev/flint

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/ianlancetaylor/demangle v0.0.0-20250417193237-f615e6bd150b
	golang.org/x/sys v0.49.0
)

require golang.org/x/sync v0.23.0 // indirect
