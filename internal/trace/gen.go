package trace

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type call_key -type call_counts -type latency_hist -type trace_error -type stack_key -type stack_calls trace ../../bpf/trace.bpf.c -- -I../../bpf
